//! `send`: sign a delivery with an endpoint's configured secret, post it to
//! the receiver and print the answer.

use anyhow::{Context, bail};
use idempotent_receiver::client;
use idempotent_receiver::config::Settings;
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// The delivery id (default: a new random msg_... id). Repeat an id to see a replay.
    #[arg(long)]
    id: Option<String>,
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
    let id = args
        .id
        .unwrap_or_else(|| format!("msg_{}", uuid::Uuid::new_v4().simple()));
    let body = match args.file {
        Some(path) => {
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?
        }
        None => client::sample_payment(&id),
    };
    let url = args.url.unwrap_or_else(|| {
        let listen = settings.listen.replace("0.0.0.0", "127.0.0.1");
        format!("http://{listen}/webhooks/{endpoint}")
    });
    let delivery = client::sign(
        configured.provider.as_ref(),
        &id,
        chrono::Utc::now().timestamp(),
        None,
        body,
    )?;
    let answer = client::post(&reqwest::Client::new(), &url, &delivery).await?;
    println!("POST {url}  (delivery id {id})");
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
