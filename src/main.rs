use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use idempotent_receiver::config::Settings;
use idempotent_receiver::handlers::Registry;
use idempotent_receiver::startup::{self, Application};
use idempotent_receiver::telemetry::{self, LogFormat};
use idempotent_receiver::{client, store::Store};
use std::path::PathBuf;

/// Verifies signed webhooks and processes every delivery exactly once.
#[derive(Parser)]
#[command(name = "idempotent-receiver", version)]
struct Cli {
    /// The TOML configuration file (default: $IR_CONFIG, else built-in defaults).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// How log lines are written to stderr.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply migrations, then serve POST /webhooks/{endpoint}, /healthz and /readyz.
    Serve,
    /// Apply the pending database migrations and exit.
    Migrate,
    /// Sign a delivery with an endpoint's configured secret, post it, and print the answer.
    Send {
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
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let settings = Settings::load(cli.config.as_deref())?;
    match cli.command {
        Command::Serve => {
            let app = Application::build(&settings, &Registry::builtin()).await?;
            app.run_until_stopped()
                .await
                .context("the server stopped with an error")?;
        }
        Command::Migrate => {
            let store = Store::connect(&settings.database, &startup::store_options(&settings))?;
            let applied = store.migrate().await?;
            println!(
                "applied {applied} migration(s) to {}",
                settings.database.redacted()
            );
        }
        Command::Send {
            endpoint,
            file,
            url,
            id,
        } => {
            send(&settings, &endpoint, file, url, id).await?;
        }
    }
    Ok(())
}

async fn send(
    settings: &Settings,
    endpoint: &str,
    file: Option<PathBuf>,
    url: Option<String>,
    id: Option<String>,
) -> anyhow::Result<()> {
    let Some(configured) = settings.endpoint(endpoint) else {
        let known: Vec<&str> = settings.endpoints.iter().map(|e| e.name.as_str()).collect();
        bail!(
            "no endpoint named {endpoint:?} in {} (known: {})",
            settings.source,
            known.join(", ")
        );
    };
    let id = id.unwrap_or_else(|| format!("msg_{}", uuid::Uuid::new_v4().simple()));
    let body = match file {
        Some(path) => {
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?
        }
        None => client::sample_payment(&format!("pay_{}", &id.trim_start_matches("msg_"))),
    };
    let url = url.unwrap_or_else(|| {
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
    if !(200..300).contains(&answer.status) {
        std::process::exit(1);
    }
    Ok(())
}
