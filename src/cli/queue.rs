//! `queue`: the operator's hold on queued endpoints from the command line,
//! straight on the database, through the same functions as the admin API
//! (so each action is recorded the same way, with `--actor`). A retry or a
//! resume tells the serving instances by NOTIFY on PostgreSQL; on SQLite
//! the serving process finds the job at its next poll (`queue_poll`).

use super::actor;
use super::progress::Progress;
use idempotent_receiver::admin::queue::{self, QueueListing, QueueQuery, RetryQuery};
use idempotent_receiver::config::Settings;
use idempotent_receiver::startup;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: QueueCommand,
}

#[derive(clap::Subcommand)]
enum QueueCommand {
    /// List jobs of queued endpoints, newest first, and the paused endpoints.
    List {
        /// Only this endpoint.
        #[arg(long)]
        endpoint: Option<String>,
        /// Only jobs in this state: queued, running, retrying, done, dead or
        /// cancelled (default: the unfinished ones).
        #[arg(long)]
        state: Option<String>,
        /// Only this event type.
        #[arg(long)]
        event_type: Option<String>,
        /// How many jobs at most (1 to 500).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Print the API's JSON ({"jobs": [...], "paused": [...]}) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Make one job due now (--endpoint and --delivery), or every job a filter selects (--all).
    Retry {
        /// The job's endpoint; with --all, only this endpoint's jobs.
        #[arg(long)]
        endpoint: Option<String>,
        /// The job's delivery id, as `queue list` shows it.
        #[arg(long, conflicts_with = "all", required_unless_present = "all")]
        delivery: Option<String>,
        /// Retry every job the filters select.
        #[arg(long)]
        all: bool,
        /// With --all: the jobs in this state (default: dead).
        #[arg(long, requires = "all")]
        state: Option<String>,
        /// With --all: only this event type.
        #[arg(long, requires = "all")]
        event_type: Option<String>,
        /// With --all: only jobs received within this long (24h) or since an RFC 3339 time.
        #[arg(long, requires = "all")]
        since: Option<String>,
        /// With --all: only count the jobs that would be retried.
        #[arg(long, requires = "all")]
        dry_run: bool,
        /// Who is doing it, for the history (default: $USER).
        #[arg(long)]
        actor: Option<String>,
    },
    /// Cancel one job that is not running or finished.
    Cancel {
        #[arg(long)]
        endpoint: String,
        #[arg(long)]
        delivery: String,
        /// Who is doing it, for the history (default: $USER).
        #[arg(long)]
        actor: Option<String>,
    },
    /// Pause an endpoint's processing: its deliveries are still acknowledged and queued.
    Pause {
        #[arg(long)]
        endpoint: String,
        /// Who is doing it, recorded with the pause (default: $USER).
        #[arg(long)]
        actor: Option<String>,
    },
    /// Resume an endpoint's processing.
    Resume {
        #[arg(long)]
        endpoint: String,
        /// Who is doing it, for the log (default: $USER).
        #[arg(long)]
        actor: Option<String>,
    },
}

pub async fn run(settings: &Settings, args: Args) -> anyhow::Result<()> {
    let store = startup::open_store(settings).await?;
    let now = store.clock().naive_now();
    match args.command {
        QueueCommand::List {
            endpoint,
            state,
            event_type,
            limit,
            json,
        } => {
            let query = QueueQuery {
                endpoint,
                state,
                event_type,
                limit: Some(limit.to_string()),
                ..QueueQuery::default()
            };
            let (filter, limit) = query.validate(now)?;
            let listing = queue::list(&store, &filter, limit).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&listing)?);
            } else {
                print!("{}", table(&listing));
            }
        }
        QueueCommand::Retry {
            endpoint,
            delivery,
            all,
            state,
            event_type,
            since,
            dry_run,
            actor: who,
        } => {
            let who = actor(who);
            if all {
                let query = RetryQuery {
                    endpoint,
                    state,
                    event_type,
                    since,
                    until: None,
                    dry_run: Some(dry_run.to_string()),
                };
                let (filter, dry_run) = query.validate(now)?;
                // Counted first: the count is the bar's length (and all a
                // dry run prints).
                let counted = queue::retry_matching(&store, &filter, &who, true).await?;
                if dry_run {
                    println!("{} job(s) would be retried", counted.matched);
                    return Ok(());
                }
                let progress = Progress::start("retry", Some(counted.matched as u64));
                let mut shown = |done: usize, _matched: usize| {
                    progress.step(done as u64, "job(s) retried");
                };
                let outcome =
                    queue::retry_matching_reporting(&store, &filter, &who, false, &mut shown).await;
                progress.finish();
                let outcome = outcome?;
                println!(
                    "retried {} of {} matching job(s)",
                    outcome.retried, outcome.matched
                );
            } else {
                let (Some(endpoint), Some(delivery)) = (endpoint, delivery) else {
                    anyhow::bail!("retry needs --endpoint and --delivery, or --all");
                };
                let job = queue::retry(&store, &endpoint, &delivery, &who).await?;
                println!("{} {}: {}", job.endpoint, job.delivery_id, job.state);
            }
        }
        QueueCommand::Cancel {
            endpoint,
            delivery,
            actor: who,
        } => {
            let job = queue::cancel(&store, &endpoint, &delivery, &actor(who)).await?;
            println!("{} {}: {}", job.endpoint, job.delivery_id, job.state);
        }
        QueueCommand::Pause {
            endpoint,
            actor: who,
        } => {
            let endpoint = queue::name("endpoint", &endpoint)?;
            let state = queue::pause(&store, &endpoint, &actor(who)).await?;
            let already = if state.changed { "" } else { " (already)" };
            println!("{}: paused{already}", state.endpoint);
        }
        QueueCommand::Resume {
            endpoint,
            actor: who,
        } => {
            let endpoint = queue::name("endpoint", &endpoint)?;
            let state = queue::resume(&store, &endpoint, &actor(who)).await?;
            let already = if state.changed {
                ""
            } else {
                " (was not paused)"
            };
            println!("{}: running{already}", state.endpoint);
        }
    }
    Ok(())
}

/// The listing as a terminal table; request-derived text is escaped, so
/// that a delivery id cannot move the cursor or change colours.
fn table(listing: &QueueListing) -> String {
    use idempotent_receiver::log_text::escaped;
    let mut out = String::new();
    for pause in &listing.paused {
        out.push_str(&format!(
            "paused: {} since {} by {}\n",
            escaped(&pause.endpoint),
            pause.paused_at,
            escaped(pause.actor.as_deref().unwrap_or("-"))
        ));
    }
    let rows: Vec<[String; 6]> = listing
        .jobs
        .iter()
        .map(|job| {
            [
                escaped(&job.endpoint).to_string(),
                escaped(&job.delivery_id).to_string(),
                job.state.clone(),
                job.attempts.to_string(),
                job.next_run_at.clone(),
                escaped(job.last_error.as_deref().unwrap_or("")).to_string(),
            ]
        })
        .collect();
    let header = [
        "ENDPOINT",
        "DELIVERY ID",
        "STATE",
        "ATTEMPTS",
        "NEXT RUN (UTC)",
        "LAST ERROR",
    ];
    out.push_str(&idempotent_receiver::admin::aligned(&header, &rows));
    out
}
