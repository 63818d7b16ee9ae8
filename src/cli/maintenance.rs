//! `reconcile` and `reprocess` (one delivery, or every one a listing
//! filter selects): the operator's repairs of stored deliveries.

use super::progress::Progress;
use idempotent_receiver::admin;
use idempotent_receiver::config::Settings;
use idempotent_receiver::handlers::Registry;
use idempotent_receiver::log_text::escaped;
use idempotent_receiver::maintenance;
use idempotent_receiver::startup;
use idempotent_receiver::webhooks::Webhooks;

#[derive(clap::Args)]
pub struct ReconcileArgs {
    /// How many abandoned claims to examine at most.
    #[arg(long, default_value_t = 1000)]
    limit: i64,
}

#[derive(clap::Args)]
pub struct ReprocessArgs {
    /// The endpoint the delivery was received on; without --delivery, every delivery of it that the filters select.
    #[arg(long)]
    endpoint: String,
    /// The stored delivery's key: the provider's delivery or event id, as `list` shows it.
    #[arg(long)]
    delivery: Option<String>,
    /// Without --delivery: only keys in this status, completed or in_progress.
    #[arg(long, conflicts_with = "delivery")]
    status: Option<String>,
    /// Without --delivery: only this event type.
    #[arg(long, conflicts_with = "delivery")]
    event_type: Option<String>,
    /// Without --delivery: only keys received within this long (24h) or since an RFC 3339 time.
    #[arg(long, conflicts_with = "delivery")]
    since: Option<String>,
    /// Without --delivery: only keys received before this long ago or this RFC 3339 time.
    #[arg(long, conflicts_with = "delivery")]
    until: Option<String>,
    /// Without --delivery: only delivery ids starting with this.
    #[arg(long, conflicts_with = "delivery")]
    id_prefix: Option<String>,
    /// Without --delivery: only count the deliveries that would be reprocessed.
    #[arg(long, conflicts_with = "delivery")]
    dry_run: bool,
    /// Who is doing it, for the history (default: $USER).
    #[arg(long)]
    actor: Option<String>,
}

/// The configured endpoints over a migrated store.
async fn operator_webhooks(settings: &Settings) -> anyhow::Result<Webhooks> {
    let store = startup::open_store(settings).await?;
    Ok(startup::webhooks(settings, store, &Registry::builtin())?)
}

pub async fn reconcile(settings: &Settings, args: ReconcileArgs) -> anyhow::Result<()> {
    let webhooks = operator_webhooks(settings).await?;
    let report = maintenance::reconcile(&webhooks, args.limit).await?;
    println!(
        "examined {} abandoned claim(s): {} completed, {} released, {} unknown, {} skipped",
        report.examined, report.completed, report.released, report.unknown, report.skipped
    );
    Ok(())
}

pub async fn reprocess(settings: &Settings, args: ReprocessArgs) -> anyhow::Result<()> {
    let webhooks = operator_webhooks(settings).await?;
    let actor = super::actor(args.actor.clone());
    let Some(delivery) = &args.delivery else {
        return reprocess_matching(&webhooks, args, &actor).await;
    };
    let response = maintenance::reprocess(&webhooks, &args.endpoint, delivery, &actor).await?;
    println!("HTTP {}", response.status);
    println!("{}", String::from_utf8_lossy(&response.body));
    Ok(())
}

/// Every delivery of the endpoint the listing's filters select: counted
/// first (all a dry run prints), then run one by one through the engine,
/// each recorded in its history; one that fails is counted and the rest
/// still run, and the command fails at the end if any did.
async fn reprocess_matching(
    webhooks: &Webhooks,
    args: ReprocessArgs,
    actor: &str,
) -> anyhow::Result<()> {
    let query = admin::ListQuery {
        endpoint: Some(args.endpoint),
        status: args.status,
        event_type: args.event_type,
        since: args.since,
        until: args.until,
        id_prefix: args.id_prefix,
        ..admin::ListQuery::default()
    };
    let request = query.validate(webhooks.engine().store().clock().naive_now())?;
    let keys = admin::reprocess::matching_keys(webhooks.engine().store(), &request).await?;
    if args.dry_run {
        println!("{} delivery(ies) would be reprocessed", keys.len());
        return Ok(());
    }
    let progress = Progress::start("reprocess", Some(keys.len() as u64));
    let mut failed = 0;
    for (done, (endpoint, delivery_id)) in keys.iter().enumerate() {
        let outcome = match maintenance::reprocess(webhooks, endpoint, delivery_id, actor).await {
            Ok(response) => format!("answered {}", response.status),
            Err(error) => {
                failed += 1;
                format!("not reprocessed: {error}")
            }
        };
        progress.step(
            done as u64 + 1,
            &format!("{}: {outcome}", escaped(delivery_id)),
        );
    }
    progress.finish();
    println!(
        "reprocessed {} of {} matching delivery(ies)",
        keys.len() - failed,
        keys.len()
    );
    if failed > 0 {
        anyhow::bail!("{failed} delivery(ies) were not reprocessed; see the lines above");
    }
    Ok(())
}
