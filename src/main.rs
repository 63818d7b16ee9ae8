use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use idempotent_receiver::admin;
use idempotent_receiver::config::Settings;
use idempotent_receiver::handlers::Registry;
use idempotent_receiver::maintenance::{self, PurgeOptions, RetentionPolicy};
use idempotent_receiver::providers::{self, Provider, ProviderSpec};
use idempotent_receiver::startup::{self, Application};
use idempotent_receiver::telemetry::{self, LogFormat};
use idempotent_receiver::{client, fixtures, store::Store};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
    /// Print the exact headers a provider would send for a body (or a curl command, or a fixture).
    Sign(SignArgs),
    /// Find claims abandoned past their lease, ask their handlers what happened, complete or release them.
    Reconcile {
        /// How many abandoned claims to examine at most.
        #[arg(long, default_value_t = 1000)]
        limit: i64,
    },
    /// Run a stored delivery's handlers again (after a bug fix); recorded in its history.
    Reprocess {
        #[arg(long)]
        endpoint: String,
        #[arg(long)]
        delivery: String,
        /// Who is doing it, for the history (default: $USER).
        #[arg(long)]
        actor: Option<String>,
    },
    /// List stored deliveries and client keys, newest first, read straight from the database.
    ///
    /// The same listing as GET /admin/deliveries: a terminal table, or with --json
    /// the API's JSON ({"items": [...], "next_cursor": ...}).
    List {
        /// Only this endpoint (or client-key scope, e.g. "POST /payments").
        #[arg(long)]
        endpoint: Option<String>,
        /// Only keys in this status: completed or in_progress.
        #[arg(long)]
        status: Option<String>,
        /// Only keys received within this long (e.g. 24h), or since an RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// How many keys at most (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Continue after a previous page (its next_cursor).
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Regenerate the signed request fixtures of every provider, with a fixed clock.
    Fixtures {
        #[arg(long, default_value = "tests/fixtures")]
        dir: PathBuf,
    },
    /// Delete the keys that have outlived their retention, as serve's background purge does.
    ///
    /// Deletes rows of `deliveries` only: completed keys received longer ago than
    /// their scope's retention (an endpoint's own `retention`, else the global one),
    /// and in-progress claims as old whose lease has expired too. A claim with a
    /// live lease is never deleted. Rows go in batches of `purge_batch`, one short
    /// transaction each, `purge_pause` apart. Prints the count per endpoint or
    /// client-key scope, and the total. Applies pending migrations first, as serve
    /// does. events, ledger_entries and payments are never touched. A repeat of a
    /// purged key runs again, exactly as it would once the retention has passed.
    Purge {
        /// Count what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Use this retention for every key, instead of the configured ones (e.g. 72h, 30m).
        #[arg(long, value_name = "DURATION", value_parser = parse_retention)]
        older_than: Option<Duration>,
    },
}

/// `--older-than`: a duration, never zero — zero would forget every key at
/// once, live idempotency included.
fn parse_retention(text: &str) -> Result<Duration, String> {
    match idempotent_receiver::duration_text::parse_duration(text)? {
        zero if zero.is_zero() => {
            Err("0 would delete every key; give a retention such as 72h".into())
        }
        retention => Ok(retention),
    }
}

#[derive(clap::Args)]
struct SignArgs {
    /// The signature scheme (stripe, github, standard-webhooks, shopify, slack, paddle).
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
    /// The event type, for schemes that carry it in a header (GitHub, Shopify).
    #[arg(long)]
    event_type: Option<String>,
    #[arg(long, value_enum, default_value = "headers")]
    format: SignFormat,
    /// The URL in `--format curl` (default: the local receiver's endpoint).
    #[arg(long)]
    url: Option<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum SignFormat {
    /// `Name: value` lines.
    Headers,
    /// A runnable curl command.
    Curl,
    /// A fixture object {headers, body}.
    Json,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One line with the cause chain: an operator reads this, not a
            // backtrace.
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let settings = idempotent_receiver::startup::load_settings(cli.config.as_deref())?;
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
        Command::Sign(args) => sign(&settings, args)?,
        Command::Reconcile { limit } => {
            let webhooks = operator_webhooks(&settings).await?;
            let report = maintenance::reconcile(&webhooks, limit).await?;
            println!(
                "examined {} abandoned claim(s): {} completed, {} released, {} unknown, {} skipped",
                report.examined, report.completed, report.released, report.unknown, report.skipped
            );
        }
        Command::Reprocess {
            endpoint,
            delivery,
            actor,
        } => {
            let webhooks = operator_webhooks(&settings).await?;
            let actor = actor
                .or_else(|| std::env::var("USER").ok())
                .unwrap_or_else(|| "cli".into());
            let response = maintenance::reprocess(&webhooks, &endpoint, &delivery, &actor).await?;
            println!("HTTP {}", response.status);
            println!("{}", String::from_utf8_lossy(&response.body));
        }
        Command::Purge {
            dry_run,
            older_than,
        } => purge(&settings, dry_run, older_than).await?,
        Command::List {
            endpoint,
            status,
            since,
            json,
            limit,
            cursor,
        } => {
            let query = admin::ListQuery {
                endpoint,
                status,
                since,
                cursor,
                limit: Some(limit.to_string()),
                ..admin::ListQuery::default()
            };
            list(&settings, &query, json).await?;
        }
        Command::Fixtures { dir } => {
            let written = fixtures::write_all(&dir)?;
            println!(
                "wrote {written} fixtures under {} (signed at {})",
                dir.display(),
                fixtures::NOW
            );
        }
    }
    Ok(())
}

/// The configured endpoints over a migrated store, for operator commands.
async fn operator_webhooks(
    settings: &Settings,
) -> anyhow::Result<idempotent_receiver::webhooks::Webhooks> {
    let store = startup::open_store(settings).await?;
    Ok(startup::webhooks(settings, store, &Registry::builtin())?)
}

async fn list(settings: &Settings, query: &admin::ListQuery, json: bool) -> anyhow::Result<()> {
    let request = query.validate(chrono::Utc::now().naive_utc())?;
    let store = startup::open_store(settings).await?;
    let page = admin::fetch_page(&store, &request).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&admin::DeliveryPage::from(page))?
        );
        return Ok(());
    }
    print!("{}", admin::table(&page.rows));
    if let Some(cursor) = page.next_cursor {
        println!("more keys match: --cursor {cursor}");
    }
    Ok(())
}

async fn purge(
    settings: &Settings,
    dry_run: bool,
    older_than: Option<Duration>,
) -> anyhow::Result<()> {
    let store = startup::open_store(settings).await?;
    let policy = match older_than {
        Some(retention) => RetentionPolicy::uniform(retention),
        None => settings.retention_policy(),
    };
    let options = PurgeOptions {
        dry_run,
        ..PurgeOptions::from_settings(&settings.purge)
    };
    match maintenance::purge(&store, &policy, &options).await {
        Ok(report) => {
            print!("{report}");
            Ok(())
        }
        Err(error) => {
            // What was deleted before the failure is committed: say so.
            print!("{}", error.report);
            Err(error.into())
        }
    }
}

fn sign(settings: &Settings, args: SignArgs) -> anyhow::Result<()> {
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
    let delivery = client::sign(
        provider.as_ref(),
        &id,
        timestamp,
        args.event_type.as_deref(),
        body,
    )?;
    match args.format {
        SignFormat::Headers => {
            for (name, value) in &delivery.headers {
                println!("{name}: {value}");
            }
        }
        SignFormat::Curl => {
            let name = args.endpoint.unwrap_or_else(|| provider.name().to_owned());
            let url = args.url.unwrap_or_else(|| {
                format!(
                    "http://{}/webhooks/{name}",
                    settings.listen.replace("0.0.0.0", "127.0.0.1")
                )
            });
            println!(
                "{}",
                client::curl_command(&url, &delivery, &args.file.to_string_lossy())
            );
        }
        SignFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&client::fixture_json(&delivery))?
        ),
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
        None => client::sample_payment(&id),
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
