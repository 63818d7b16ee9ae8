//! Keeping `deliveries` bounded: keys are remembered for their scope's
//! retention, then deleted in short batches by [`purge()`] — on demand
//! (`idempotent-receiver purge`) or every `purge_interval` by the
//! [`PurgeTask`] that `serve` runs — and [`short_retentions`] tells at
//! start-up which endpoints forget keys before their provider stops
//! retrying.
//!
//! Only `deliveries` is purged: `events`, `ledger_entries` and `payments`
//! are domain data and stay.

mod policy;
mod purge;
mod report;
mod retention_check;
mod schedule;

pub use policy::RetentionPolicy;
pub use purge::{PurgeError, PurgeOptions, purge};
pub use report::{PurgeReport, ScopeCounts};
pub use retention_check::{ShortRetention, short_retentions};
pub use schedule::PurgeTask;
