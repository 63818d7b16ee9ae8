//! `sign`: the exact headers a provider would send for a body, as headers,
//! a curl command or a fixture object.

use anyhow::{Context, bail};
use idempotent_receiver::client;
use idempotent_receiver::config::Settings;
use idempotent_receiver::providers::{self, Provider, ProviderSpec};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// The signature scheme: any provider name (see `idempotent-receiver providers`).
    #[arg(
        long,
        required_unless_present = "endpoint",
        conflicts_with = "endpoint",
        requires = "secret"
    )]
    provider: Option<String>,
    /// The secret to sign with (as the provider issues it, e.g. whsec_...).
    #[arg(long)]
    secret: Option<String>,
    /// Sign as a configured endpoint instead (needed for the generic hmac scheme).
    #[arg(long)]
    endpoint: Option<String>,
    /// The body to sign.
    #[arg(long)]
    file: PathBuf,
    /// The delivery id, for schemes that carry it in a header (default: a random one).
    #[arg(long)]
    id: Option<String>,
    /// The Unix timestamp to sign (default: now).
    #[arg(long)]
    timestamp: Option<i64>,
    /// A private key file, for the providers that sign asymmetrically: Discord (the
    /// ed25519 seed in hex) and PayPal (an RSA key, PKCS#8 PEM). A test key: the
    /// receiver itself only ever holds the public half.
    #[arg(long, value_name = "FILE")]
    signing_key: Option<PathBuf>,
    /// The event type, for schemes that carry it in a header (GitHub, Shopify).
    #[arg(long)]
    event_type: Option<String>,
    #[arg(long, value_enum, default_value = "headers")]
    format: Format,
    /// The URL in `--format curl` (default: the local receiver's /webhooks/<endpoint>
    /// with --endpoint; with --provider, /webhooks/<provider>, which is only right for an
    /// endpoint named after its provider).
    #[arg(long)]
    url: Option<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    /// `Name: value` lines.
    Headers,
    /// A runnable curl command.
    Curl,
    /// A fixture object {headers, body}.
    Json,
}

pub fn run(settings: &Settings, args: Args) -> anyhow::Result<()> {
    let provider: Arc<dyn Provider> = match (&args.endpoint, &args.provider, args.secret) {
        (Some(name), _, _) => settings
            .endpoint(name)
            .with_context(|| format!("no endpoint named {name:?} in {}", settings.source))?
            .provider
            .clone(),
        (None, Some(name), Some(secret)) => {
            let spec = ProviderSpec {
                secrets: vec![secret],
                ..ProviderSpec::default()
            };
            Arc::from(providers::build(name, &spec).with_context(|| format!("--provider {name}"))?)
        }
        _ => bail!("give --endpoint, or --provider with --secret"),
    };
    let body = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let id = args
        .id
        .unwrap_or_else(|| format!("msg_{}", uuid::Uuid::new_v4().simple()));
    let timestamp = args
        .timestamp
        .unwrap_or_else(|| chrono::Utc::now().timestamp());
    let signing_key = read_signing_key(args.signing_key.as_deref())?;
    let delivery = client::sign_with_key(
        provider.as_ref(),
        &id,
        timestamp,
        args.event_type.as_deref(),
        body.clone(),
        signing_key.as_deref(),
    )?;
    // A scheme that signs inside the body (Adyen) or posts a form
    // (Braintree) sends other bytes than the file's: curl then carries them.
    let body_file = (delivery.body == body).then(|| args.file.to_string_lossy().into_owned());
    match args.format {
        Format::Headers => {
            for (name, value) in &delivery.headers {
                println!("{name}: {value}");
            }
        }
        Format::Curl => {
            let url = args.url.unwrap_or_else(|| {
                let name = args.endpoint.unwrap_or_else(|| {
                    let name = provider.name().to_owned();
                    eprintln!(
                        "note: the curl command posts to /webhooks/{name}; give --endpoint NAME \
                         (or --url) to post to your endpoint"
                    );
                    name
                });
                format!(
                    "http://{}/webhooks/{name}",
                    settings.listen.replace("0.0.0.0", "127.0.0.1")
                )
            });
            println!(
                "{}",
                client::curl_command(&url, &delivery, body_file.as_deref())
            );
        }
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&client::fixture_json(&delivery))?
        ),
    }
    Ok(())
}

/// The text of `--signing-key`, if given.
pub fn read_signing_key(path: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    path.map(|path| {
        std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the signing key {}", path.display()))
    })
    .transpose()
}
