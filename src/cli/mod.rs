//! The command line: the clap types and the dispatch. Each command's body is
//! its own module; `anyhow` is used here, at the binary's edge, only.

mod fixtures;
mod list;
mod maintenance;
mod outbox;
mod progress;
mod providers;
mod purge;
mod queue;
mod send;
mod sign;

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use idempotent_receiver::environment;
use idempotent_receiver::handlers::Registry;
use idempotent_receiver::startup::{self, Application};
use idempotent_receiver::store::{DatabaseUrl, Store};
use idempotent_receiver::telemetry::{self, LogFormat, Traces};
use std::path::PathBuf;
use std::process::ExitCode;

/// What the environment sets, for `--help`. The flags show their own
/// variable too; `IR_DATA_DIR`, `IR_ADMIN_TOKENS` and `IR_METRICS_TOKEN` (a
/// token belongs on no command line), the OpenTelemetry variables and
/// `RUST_LOG` have no flag, nor has the allocator's `_RJEM_MALLOC_CONF`, so
/// this is where they are named.
macro_rules! environment {
    ($allocator:expr) => {
        concat!("\
Environment:
  DATABASE_URL     the database, as --database-url (a flag wins over it, it wins over the file)
  IR_CONFIG        the configuration file, as --config
  IR_LISTEN        the listen address, as --listen
  IR_DATA_DIR      the folder of the default SQLite file and of demo.secret (default: data)
  IR_ADMIN_TOKENS  admin tokens, comma-separated, added to the file's admin_tokens
  IR_METRICS_TOKEN the bearer token GET /metrics asks for, instead of the file's metrics_token
  OTEL_EXPORTER_OTLP_ENDPOINT  where serve exports traces (OTLP/HTTP base URL), instead of the file's otlp_endpoint
  OTEL_SERVICE_NAME            the traces' service.name (default: idempotent-receiver)
  RUST_LOG         the log level (default: info)", $allocator)
    };
}
#[cfg(feature = "jemalloc")]
const ENVIRONMENT: &str = environment!(concat!(
    "
  _RJEM_MALLOC_CONF  jemalloc's options, over the compiled-in ",
    jemalloc_options!()
));
#[cfg(not(feature = "jemalloc"))]
const ENVIRONMENT: &str = environment!("");

/// `--version`: the release and the allocator the binary was built with, so
/// that a report or a benchmark says which build it ran.
#[cfg(feature = "jemalloc")]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (allocator: jemalloc)");
#[cfg(not(feature = "jemalloc"))]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (allocator: system)");

/// Verifies signed webhooks and processes every delivery exactly once.
#[derive(Parser)]
#[command(name = "idempotent-receiver", version = VERSION, after_help = ENVIRONMENT)]
struct Cli {
    /// The TOML configuration file (default: built-in defaults and the `demo` endpoint).
    #[arg(long, global = true, env = "IR_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The address `serve` listens on and `send`/`sign` post to (overrides the file's `listen`).
    #[arg(long, global = true, env = "IR_LISTEN", value_name = "ADDRESS", value_parser = parse_listen)]
    listen: Option<String>,
    /// The database, sqlite://PATH or postgres://USER@HOST/DB (overrides the file's `database_url`).
    #[arg(
        long,
        global = true,
        env = "DATABASE_URL",
        hide_env_values = true,
        value_name = "URL",
        value_parser = parse_database_url
    )]
    database_url: Option<String>,
    /// How log lines are written to stderr.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply migrations, then serve the webhook endpoints and the rest of the HTTP surface.
    ///
    /// Routes: POST /webhooks/{endpoint} (each configured endpoint); POST /payments
    /// (Idempotency-Key) and GET /payments/{id}; GET /healthz (the process is up);
    /// GET /readyz (the database answers); GET /metrics (Prometheus text); and, once an
    /// admin token is configured, /admin (the dashboard, /admin/list, /admin/login,
    /// /admin/logout) and its API /admin/deliveries,
    /// /admin/deliveries/{endpoint}/{delivery_id}, /admin/stats, /admin/dashboard.json,
    /// /admin/queue (and its retry, cancel, pause and resume actions), /admin/outbox
    /// (and its retry; a delivery's republish), a delivery's reprocess and /admin/openapi.json,
    /// on `admin_listen` if set.
    #[command(after_help = ENVIRONMENT)]
    Serve,
    /// Apply the pending database migrations and exit.
    Migrate,
    /// Sign a delivery with an endpoint's configured secret, post it, and print the answer.
    Send(send::Args),
    /// Print the exact headers a provider would send for a body (or a curl command, or a fixture).
    Sign(sign::Args),
    /// Find claims abandoned past their lease, ask their handlers what happened, complete or release them.
    Reconcile(maintenance::ReconcileArgs),
    /// Run a stored delivery's handlers again (after a bug fix), or every one a filter selects; recorded in its history.
    ///
    /// With --delivery: that one delivery. Without: every delivery of --endpoint that
    /// --status, --event-type, --since, --until and --id-prefix select (the filters of
    /// `list`), counted first (--dry-run prints only the count), then run one by one,
    /// with a progress bar on a terminal and a line per delivery otherwise.
    Reprocess(maintenance::ReprocessArgs),
    /// List stored deliveries and client keys, newest first, read straight from the database.
    ///
    /// The same listing as GET /admin/deliveries: a terminal table, or with --json
    /// the API's JSON ({"items": [...], "next_cursor": ...}).
    List(list::Args),
    /// Operate the queue of `mode = "queued"` endpoints: list, retry, cancel, pause, resume.
    ///
    /// Straight on the database, as the admin API's /admin/queue routes do; every
    /// retry and cancel is recorded in the delivery's history with --actor.
    Queue(queue::Args),
    /// Operate the outbox of `publish:NAME` handlers: list publications, retry failed ones, republish deliveries.
    ///
    /// Straight on the database, as the admin API's /admin/outbox routes do; every
    /// republish is recorded in the delivery's history with --actor.
    Outbox(outbox::Args),
    /// List every provider name `provider = "..."` accepts, with what it signs, its key,
    /// timestamp, handshake and retry window (a Markdown table, as in the README).
    Providers,
    /// Regenerate the signed request fixtures of every provider, with a fixed clock.
    Fixtures {
        /// The folder to write `<provider>/<case>.json` into (existing files are overwritten).
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
    Purge(purge::Args),
}

impl Command {
    fn reads_database(&self) -> bool {
        !matches!(
            self,
            Command::Send(_) | Command::Sign(_) | Command::Fixtures { .. } | Command::Providers
        )
    }
}

/// Who an operator's command is recorded as: `--actor`, else `$USER`, else
/// `cli`.
fn actor(given: Option<String>) -> String {
    given
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "cli".into())
}

/// `--listen` / `IR_LISTEN`: refused here rather than at bind time.
fn parse_listen(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Ok(String::new());
    }
    text.parse::<std::net::SocketAddr>()
        .map(|_| text.to_owned())
        .map_err(|_| format!("{text:?} is not an address such as 127.0.0.1:8080"))
}

/// `--database-url` / `DATABASE_URL`: refused here, naming the flag, rather
/// than later as a settings error. The message never repeats the URL, which
/// may carry a password.
fn parse_database_url(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Ok(String::new());
    }
    DatabaseUrl::parse(text).map(|_| text.to_owned())
}

/// Parses the command line and runs the command; the exit code is the
/// command's own (`send` fails on a non-2xx answer).
pub async fn run() -> anyhow::Result<ExitCode> {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches)?;
    // The flags reach the settings as the variables they stand for, so the
    // order is the file's own: a flag (or its variable) over the file.
    // An empty variable counts as unset, as everywhere in the settings.
    let listen = cli.listen.clone().filter(|v| !v.is_empty());
    let database_url = cli.database_url.clone().filter(|v| !v.is_empty());
    let config_file = cli.config.clone().filter(|v| !v.as_os_str().is_empty());
    let overrides = |name: &str| match name {
        "IR_LISTEN" => listen.clone(),
        "DATABASE_URL" => database_url.clone(),
        _ => environment::process_env(name),
    };
    let settings = startup::load_settings_with(config_file.as_deref(), &overrides);
    // Traces are exported by `serve` alone: the other commands are an
    // operator's, not a delivery's path.
    let traces = match (&settings, &cli.command) {
        (Ok(settings), Command::Serve) => settings
            .traces
            .as_ref()
            .map(|traces| Traces::start(traces, tokio::runtime::Handle::current()))
            .transpose()
            .context("traces")?,
        _ => None,
    };
    // Held to the end of the command, so that every queued line is written
    // before the process exits (and before main's own error line).
    let mut log = telemetry::init(cli.log_format, traces);
    let settings = settings?;
    if let (Command::Serve, Some(traces)) = (&cli.command, &settings.traces) {
        let endpoint = idempotent_receiver::secret::redact_url(&traces.endpoint);
        let service = &traces.service_name;
        tracing::info!(%endpoint, %service, "exporting traces over OTLP/HTTP");
    }
    if cli.command.reads_database() {
        let origin = match (&database_url, matches.value_source("database_url")) {
            (Some(_), Some(ValueSource::CommandLine)) => "--database-url".to_owned(),
            (Some(_), _) => "DATABASE_URL".to_owned(),
            (None, _) if config_file.is_some() => settings.source.clone(),
            (None, _) => "the default; no --config, --database-url or DATABASE_URL".to_owned(),
        };
        // A log line, not a bare one: stderr stays the log's own format
        // (every text line a timestamp and a level, every JSON line one object).
        let database = settings.database.redacted();
        tracing::info!("database: {database} ({origin})");
    }
    match cli.command {
        Command::Serve => {
            let app = Application::build(&settings, &Registry::builtin()).await?;
            let stopped = app.run_until_stopped().await;
            // The spans of the last deliveries, sent before the process ends.
            log.shutdown_traces().await;
            stopped.context("the server stopped with an error")?;
        }
        Command::Migrate => {
            let store = Store::connect(&settings.database, &startup::store_options(&settings))?;
            let applied = store.migrate().await?;
            println!(
                "applied {applied} migration(s) to {}",
                settings.database.redacted()
            );
        }
        Command::Send(args) => return send::run(&settings, args).await,
        Command::Sign(args) => sign::run(&settings, args)?,
        Command::Providers => providers::run(),
        Command::Reconcile(args) => maintenance::reconcile(&settings, args).await?,
        Command::Reprocess(args) => maintenance::reprocess(&settings, args).await?,
        Command::Purge(args) => purge::run(&settings, args).await?,
        Command::List(args) => list::run(&settings, args).await?,
        Command::Queue(args) => queue::run(&settings, args).await?,
        Command::Outbox(args) => outbox::run(&settings, args).await?,
        Command::Fixtures { dir } => {
            let written = fixtures::write_all(&dir)?;
            println!(
                "wrote {written} fixtures under {} (signed at {})",
                dir.display(),
                fixtures::NOW
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
