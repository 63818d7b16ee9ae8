//! `send`: sign a delivery with an endpoint's configured secret, post it to
//! the receiver and print the answer.

use anyhow::{Context, bail};
use idempotent_receiver::client::{self, Answer, SendError, SignedDelivery};
use idempotent_receiver::config::Settings;
use idempotent_receiver::duration_text::{format_duration, parse_duration};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// The configured endpoint to sign for.
    #[arg(long)]
    endpoint: String,
    /// The JSON body to send (default: a sample payment.succeeded event).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Where to post (default: the configured listen address).
    #[arg(long)]
    url: Option<String>,
    /// The delivery id, for schemes that carry it in a header (default: a new random msg_...
    /// id). Without --file it is the sample body's id too. Repeat an id to see a replay.
    #[arg(long)]
    id: Option<String>,
    /// A private key file, for the providers that sign asymmetrically: Discord (the
    /// ed25519 seed in hex) and PayPal (an RSA key, PKCS#8 PEM). A test key: the
    /// receiver itself only ever holds the public half.
    #[arg(long, value_name = "FILE")]
    signing_key: Option<PathBuf>,
    /// The event type, for schemes that carry it in a header (GitHub's X-GitHub-Event,
    /// Shopify's X-Shopify-Topic, an hmac endpoint's event_type_header).
    #[arg(long)]
    event_type: Option<String>,
    /// How long to wait for a receiver that is not listening yet (e.g. one started just
    /// before); "0" fails at once.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    wait: Duration,
}

pub async fn run(settings: &Settings, args: Args) -> anyhow::Result<ExitCode> {
    let endpoint = args.endpoint.as_str();
    let Some(configured) = settings.endpoint(endpoint) else {
        let known: Vec<&str> = settings.endpoints.iter().map(|e| e.name.as_str()).collect();
        bail!(
            "no endpoint named {endpoint:?} in {} (known: {})",
            settings.source,
            known.join(", ")
        );
    };
    let provider = configured.provider.as_ref();
    let id = args
        .id
        .unwrap_or_else(|| format!("msg_{}", uuid::Uuid::new_v4().simple()));
    let body = match args.file {
        Some(path) => {
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?
        }
        None => client::sample_body(provider, &id),
    };
    let url = args.url.unwrap_or_else(|| {
        let listen = settings.listen.replace("0.0.0.0", "127.0.0.1");
        format!("http://{listen}/webhooks/{endpoint}")
    });
    let signing_key = super::sign::read_signing_key(args.signing_key.as_deref())?;
    let delivery = client::sign_with_key(
        provider,
        &id,
        chrono::Utc::now().timestamp(),
        args.event_type.as_deref(),
        body,
        signing_key.as_deref(),
    )?;
    // The key the receiver stores the delivery under, which is not `--id`
    // for schemes that read it from the body (Stripe's `evt_...`).
    let identity = match client::identity(provider, &delivery) {
        Ok(identities) => identities
            .iter()
            .map(|identity| {
                format!(
                    "key {}, event type {}",
                    identity.key,
                    identity.event_type.as_deref().unwrap_or("(none)")
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        Err(rejection) => format!("no key: {rejection}"),
    };
    let answer = post_once_listening(&url, &delivery, args.wait).await?;
    println!("POST {url}  ({identity})");
    println!("HTTP {}", answer.status);
    for (name, value) in &answer.headers {
        println!("{name}: {value}");
    }
    println!();
    println!("{}", answer.body);
    Ok(if (200..300).contains(&answer.status) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Posts `delivery`, waiting up to `wait` for something to accept the
/// connection: `serve &` followed at once by `send` must work. Only a refused
/// connection is retried; that request never reached a receiver.
async fn post_once_listening(
    url: &str,
    delivery: &SignedDelivery,
    wait: Duration,
) -> anyhow::Result<Answer> {
    const POLL: Duration = Duration::from_millis(200);
    let http = reqwest::Client::new();
    let deadline = Instant::now() + wait;
    let mut told = false;
    loop {
        match client::post(&http, url, delivery).await {
            Err(error) if error.is_refused() && Instant::now() < deadline => {
                if !told {
                    eprintln!(
                        "nothing listens at {url} yet; waiting up to {} for the receiver (--wait)",
                        format_duration(wait)
                    );
                    told = true;
                }
                tokio::time::sleep(POLL).await;
            }
            Err(error @ SendError::Transport { .. }) if error.is_refused() => {
                return Err(anyhow::Error::new(error).context(format!(
                    "no receiver listened within {}: start one with `idempotent-receiver serve` \
                     (with the same --config / --listen), or pass --url",
                    format_duration(wait)
                )));
            }
            other => return Ok(other?),
        }
    }
}
