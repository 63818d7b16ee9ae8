use super::{PurgeOptions, PurgeReport, PurgeSettings, RetentionPolicy, purge};
use crate::store::Store;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

/// The background purge `serve` runs every `purge_interval`.
#[derive(Clone)]
pub struct PurgeTask {
    store: Store,
    policy: RetentionPolicy,
    options: PurgeOptions,
    interval: Duration,
}

impl PurgeTask {
    /// The task `settings` ask for, or `None` when `purge_interval = "0"`.
    pub fn new(
        store: Store,
        policy: RetentionPolicy,
        settings: &PurgeSettings,
    ) -> Option<PurgeTask> {
        Some(PurgeTask {
            store,
            policy,
            options: PurgeOptions::from_settings(settings),
            interval: settings.interval?,
        })
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Runs the purge every interval until the handle is aborted. Aborting
    /// mid-batch is safe: the batch's open transaction is dropped, its
    /// connection leaves the pool, and the database rolls the batch back.
    pub fn spawn(self) -> JoinHandle<()> {
        tokio::spawn(self.run())
    }

    async fn run(self) {
        // The first pass waits one interval: start-up (migrations, the first
        // deliveries after a restart) goes first, and a receiver that is
        // restarted in a loop does not purge in a loop.
        let mut ticks = tokio::time::interval_at(Instant::now() + self.interval, self.interval);
        // A purge longer than the interval is followed by a full interval's
        // rest, never by a burst of catch-up runs.
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match purge(&self.store, &self.policy, &self.options).await {
                Ok(report) => log(&report),
                Err(error) => {
                    log(&error.report);
                    tracing::warn!(
                        error = %error.source,
                        "the purge stopped; the next run resumes where it left off"
                    );
                }
            }
        }
    }
}

fn log(report: &PurgeReport) {
    for (scope, counts) in &report.scopes {
        tracing::info!(
            scope = %scope,
            deleted = counts.total(),
            completed = counts.completed,
            abandoned = counts.abandoned,
            retention = %crate::duration_text::format_duration(counts.retention),
            "purged expired keys"
        );
    }
    tracing::info!(
        deleted = report.total(),
        publications = report.publications,
        batches = report.batches,
        elapsed_ms = u64::try_from(report.elapsed.as_millis()).unwrap_or(u64::MAX),
        "purge finished"
    );
}
