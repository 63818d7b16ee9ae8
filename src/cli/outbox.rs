//! `outbox`: the operator's hold on the outbox from the command line,
//! straight on the database, through the same functions as the admin API
//! (so a republish is recorded the same way, with `--actor`). A retry or a
//! republish tells the serving instances by NOTIFY on PostgreSQL; on SQLite
//! their relays find the rows at their next poll (`outbox_poll`).

use super::actor;
use anyhow::Context;
use idempotent_receiver::admin::outbox::{
    self, OutboxListing, OutboxQuery, OutboxRetryQuery, RepublishFilter, RepublishQuery,
};
use idempotent_receiver::config::Settings;
use idempotent_receiver::handlers::Registry;
use idempotent_receiver::log_text::escaped;
use idempotent_receiver::maintenance::{RepublishReport, Republisher};
use idempotent_receiver::startup;
use idempotent_receiver::store::Store;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: OutboxCommand,
}

#[derive(clap::Subcommand)]
enum OutboxCommand {
    /// List publications, newest first (by default the unsent ones), and each publisher's backlog.
    List {
        /// Only this publisher.
        #[arg(long)]
        publisher: Option<String>,
        /// Only this endpoint.
        #[arg(long)]
        endpoint: Option<String>,
        /// Only publications in this state: pending, failed or sent (repeat for several;
        /// default: pending and failed).
        #[arg(long, value_parser = ["pending", "failed", "sent"])]
        state: Vec<String>,
        /// How many publications at most (1 to 500).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Print the API's JSON ({"publications": [...], "backlog": [...]}) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Make failed publications due again, their attempts counted afresh.
    Retry {
        /// Only this publisher's.
        #[arg(long)]
        publisher: Option<String>,
        /// Only this endpoint's.
        #[arg(long)]
        endpoint: Option<String>,
        /// Only this delivery's (its id, as `list` shows it).
        #[arg(long)]
        delivery: Option<String>,
        /// Who is doing it, for the log (default: $USER).
        #[arg(long)]
        actor: Option<String>,
    },
    /// Publish stored deliveries again: a new outbox row per publisher, recorded in each delivery's history.
    ///
    /// The envelope is rebuilt from the stored delivery (its CloudEvents id stays
    /// <endpoint>:<delivery id>); the broker's message id gets `#republish-<n>`, so the
    /// broker's deduplication does not drop it. One delivery (--delivery), or every
    /// delivery of the endpoint the filters select.
    Republish {
        /// The endpoint the deliveries were received on.
        #[arg(long)]
        endpoint: String,
        /// One delivery, by its id as `list` shows it.
        #[arg(long, conflicts_with_all = ["event_type", "since", "until"])]
        delivery: Option<String>,
        /// Only deliveries of this event type.
        #[arg(long)]
        event_type: Option<String>,
        /// Only deliveries received within this long (24h) or since an RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// Only deliveries received before this long ago (1h) or this RFC 3339 time.
        #[arg(long)]
        until: Option<String>,
        /// Only to this publisher (default: every one the endpoint publishes to).
        #[arg(long)]
        publisher: Option<String>,
        /// Only say what would be written.
        #[arg(long)]
        dry_run: bool,
        /// Who is doing it, for the history (default: $USER).
        #[arg(long)]
        actor: Option<String>,
    },
}

/// Tells the serving instances' relays that rows are due (PostgreSQL).
async fn notify(store: &Store) -> anyhow::Result<()> {
    store.conn().await?.notify_outbox().await.context(
        "could not notify the serving instances; their relays find the rows at their next poll",
    )
}

pub async fn run(settings: &Settings, args: Args) -> anyhow::Result<()> {
    let store = startup::open_store(settings).await?;
    match args.command {
        OutboxCommand::List {
            publisher,
            endpoint,
            state,
            limit,
            json,
        } => {
            let query = OutboxQuery {
                publisher,
                endpoint,
                delivery_id: None,
                state: (!state.is_empty()).then(|| state.join(",")),
                limit: Some(limit.to_string()),
            };
            let (filter, limit) = query.validate()?;
            let listing = outbox::list(&store, &filter, limit).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&listing)?);
            } else {
                print!("{}", table(&listing));
            }
        }
        OutboxCommand::Retry {
            publisher,
            endpoint,
            delivery,
            actor: who,
        } => {
            let query = OutboxRetryQuery {
                publisher,
                endpoint,
                delivery_id: delivery,
            };
            let outcome = outbox::retry(&store, &query.validate()?, &actor(who)).await?;
            if outcome.retried > 0 {
                notify(&store).await?;
            }
            println!("{} failed publication(s) are due again", outcome.retried);
        }
        OutboxCommand::Republish {
            endpoint,
            delivery,
            event_type,
            since,
            until,
            publisher,
            dry_run,
            actor: who,
        } => {
            let webhooks = startup::webhooks(settings, store.clone(), &Registry::builtin())?;
            let republisher = Republisher::new(webhooks, &settings.publishers);
            let options = RepublishQuery {
                publisher,
                dry_run: Some(dry_run.to_string()),
            };
            let who = actor(who);
            let report = match delivery {
                Some(delivery) => {
                    let request = options.one(&endpoint, &delivery, &who)?;
                    outbox::republish_one(&republisher, &request).await?
                }
                None => {
                    let filter = RepublishFilter {
                        event_type,
                        since,
                        until,
                    };
                    let now = store.clock().naive_now();
                    let request = options.matching(&endpoint, &filter, &who, now)?;
                    republisher.republish(&request).await?
                }
            };
            if !report.dry_run && !report.republished.is_empty() {
                notify(&store).await?;
            }
            print!("{}", summary(&report));
        }
    }
    Ok(())
}

/// A republish's outcome: one line per row and per skipped delivery, then
/// the counts. Request-derived text is escaped.
fn summary(report: &RepublishReport) -> String {
    let mut out = String::new();
    let verb = if report.dry_run {
        "would republish"
    } else {
        "republished"
    };
    for row in &report.republished {
        out.push_str(&format!(
            "{verb} {} to {} as {} ({})\n",
            escaped(&row.delivery_id),
            row.publisher,
            escaped(&row.message_id),
            escaped(&row.destination)
        ));
    }
    for skipped in &report.skipped {
        out.push_str(&format!(
            "skipped {}: {}\n",
            escaped(&skipped.delivery_id),
            escaped(&skipped.reason)
        ));
    }
    let dry = if report.dry_run {
        " (dry run: nothing was written)"
    } else {
        ""
    };
    out.push_str(&format!(
        "{} delivery(ies) matched, {} outbox row(s) {}, {} skipped{dry}\n",
        report.matched,
        report.republished.len(),
        if report.dry_run {
            "would be written"
        } else {
            "written"
        },
        report.skipped.len()
    ));
    out
}

/// The listing as a terminal table after one line per publisher's backlog.
fn table(listing: &OutboxListing) -> String {
    let mut out = String::new();
    for b in &listing.backlog {
        out.push_str(&format!(
            "backlog: {} pending {} failed {} oldest {}\n",
            b.publisher,
            b.pending,
            b.failed,
            b.oldest.as_deref().unwrap_or("-")
        ));
    }
    let rows: Vec<Vec<String>> = listing
        .publications
        .iter()
        .map(|p| {
            vec![
                p.publisher.clone(),
                escaped(&p.endpoint).to_string(),
                escaped(&p.delivery_id).to_string(),
                escaped(&p.message_id).to_string(),
                p.state.clone(),
                p.attempts.to_string(),
                p.next_attempt_at.clone(),
                escaped(p.last_error.as_deref().unwrap_or("")).to_string(),
            ]
        })
        .collect();
    let header = [
        "PUBLISHER",
        "ENDPOINT",
        "DELIVERY ID",
        "MESSAGE ID",
        "STATE",
        "ATTEMPTS",
        "NEXT ATTEMPT (UTC)",
        "LAST ERROR",
    ];
    out.push_str(&idempotent_receiver::admin::aligned(&header, &rows));
    out
}
