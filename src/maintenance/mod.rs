//! Work on stored keys outside the request path.
//!
//! Keeping `deliveries` bounded: keys are remembered for their scope's
//! retention, then deleted in short batches by [`purge()`] — on demand
//! (`idempotent-receiver purge`) or every `purge_interval` by the
//! [`PurgeTask`] that `serve` runs — and [`short_retentions`] tells at
//! start-up which endpoints forget keys before their provider stops
//! retrying. Only `deliveries` (and its history) is purged: `events`,
//! `ledger_entries` and `payments` are domain data and stay.
//!
//! Claims abandoned mid-way are reconciled ([`reconcile()`]), and an operator
//! can run a stored delivery again ([`reprocess()`]) or put it on the bus
//! again ([`Republisher`]).

mod policy;
mod purge;
mod queue;
mod reconcile;
mod relay;
mod report;
mod reprocess;
mod republish;
mod retention_check;
mod schedule;
mod wakeups;

pub use policy::RetentionPolicy;
pub use purge::{PurgeError, PurgeOptions, PurgeSettings, purge, purge_reporting};
pub use queue::{DrainReport, QUEUE_SAMPLE_EVERY, QueueWorkers, run_due, spawn_notifier};
pub use reconcile::{ReconcileReport, ReconcileTask, Reconciler, reconcile};
pub use relay::{PublisherRelay, Relay, RelayReport, RelaySettings, relay_due};
pub use report::{PurgeReport, ScopeCounts};
pub use reprocess::{ReprocessError, reprocess};
pub use republish::{
    REPUBLISHED, Republication, RepublishError, RepublishReport, RepublishRequest, Republisher,
    Selection, Skipped,
};
pub use retention_check::{ShortRetention, short_retentions};
pub use schedule::PurgeTask;

use crate::handlers::Event;
use crate::store::DeliveryRow;
use crate::webhooks::Endpoint;

/// The verified event a stored delivery was claimed with.
fn event_of(endpoint: &Endpoint, row: &DeliveryRow, body: Vec<u8>) -> Option<Event> {
    let payload = crate::webhooks::parse_payload(&body).ok()?;
    Some(Event {
        endpoint: row.endpoint.clone(),
        provider: endpoint.provider.name(),
        delivery_id: row.delivery_id.clone(),
        event_type: row.event_type.clone(),
        payload,
        raw: body.into(),
        received_at: row.received_at,
        stale: false,
    })
}
