//! The command line: the clap types and the dispatch. Each command's body is
//! its own module; `anyhow` is used here, at the binary's edge, only.

mod list;
mod maintenance;
mod purge;
mod send;
mod sign;

use anyhow::Context;
use clap::{Parser, Subcommand};
use idempotent_receiver::config::Settings;
use idempotent_receiver::fixtures;
use idempotent_receiver::handlers::Registry;
use idempotent_receiver::startup::{self, Application};
use idempotent_receiver::store::Store;
use idempotent_receiver::telemetry::{self, LogFormat};
use std::path::PathBuf;
use std::process::ExitCode;

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
    Send(send::Args),
    /// Print the exact headers a provider would send for a body (or a curl command, or a fixture).
    Sign(sign::Args),
    /// Find claims abandoned past their lease, ask their handlers what happened, complete or release them.
    Reconcile(maintenance::ReconcileArgs),
    /// Run a stored delivery's handlers again (after a bug fix); recorded in its history.
    Reprocess(maintenance::ReprocessArgs),
    /// List stored deliveries and client keys, newest first, read straight from the database.
    ///
    /// The same listing as GET /admin/deliveries: a terminal table, or with --json
    /// the API's JSON ({"items": [...], "next_cursor": ...}).
    List(list::Args),
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
    Purge(purge::Args),
}

/// Parses the command line and runs the command; the exit code is the
/// command's own (`send` fails on a non-2xx answer).
pub async fn run() -> anyhow::Result<ExitCode> {
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
        Command::Send(args) => return send::run(&settings, args).await,
        Command::Sign(args) => sign::run(&settings, args)?,
        Command::Reconcile(args) => maintenance::reconcile(&settings, args).await?,
        Command::Reprocess(args) => maintenance::reprocess(&settings, args).await?,
        Command::Purge(args) => purge::run(&settings, args).await?,
        Command::List(args) => list::run(&settings, args).await?,
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
