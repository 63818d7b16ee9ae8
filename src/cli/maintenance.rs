//! `reconcile` and `reprocess`: the operator's repairs of stored deliveries.

use idempotent_receiver::config::Settings;
use idempotent_receiver::handlers::Registry;
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
    /// The endpoint (or client-key scope) the delivery was received on.
    #[arg(long)]
    endpoint: String,
    /// The stored delivery's key: the provider's delivery or event id, as `list` shows it.
    #[arg(long)]
    delivery: String,
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
    let actor = super::actor(args.actor);
    let response =
        maintenance::reprocess(&webhooks, &args.endpoint, &args.delivery, &actor).await?;
    println!("HTTP {}", response.status);
    println!("{}", String::from_utf8_lossy(&response.body));
    Ok(())
}
