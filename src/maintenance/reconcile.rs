//! Claims left `in_progress` past their lease (their owner died between the
//! outside work and the completion): ask each external handler what really
//! happened, then complete the key with that outcome or release it.

use super::event_of;
use crate::engine::{ClaimRequest, EngineError};
use crate::handlers::Reconciled;
use crate::telemetry::metrics;
use crate::webhooks::{RunHandlers, Webhooks};
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    pub examined: usize,
    /// The outside work had happened: the key now holds its outcome.
    pub completed: usize,
    /// The outside work never happened: the key is free for the retry.
    pub released: usize,
    /// The outside system could not tell: asked again on the next pass.
    pub unknown: usize,
    /// Not ours to reconcile (no such endpoint any more, no stored body, or
    /// another attempt got there first).
    pub skipped: usize,
}

/// One pass over up to `limit` abandoned claims.
pub async fn reconcile(webhooks: &Webhooks, limit: i64) -> Result<ReconcileReport, EngineError> {
    let engine = webhooks.engine();
    let now = engine.store().clock().naive_now();
    let stale = engine
        .store()
        .conn()
        .await?
        .stale_claims(now, limit)
        .await?;
    let mut report = ReconcileReport::default();
    for row in stale {
        report.examined += 1;
        let Some(endpoint) = webhooks.endpoint(&row.endpoint).cloned() else {
            report.skipped += 1;
            metrics::reconciled("skipped");
            continue;
        };
        let body = engine
            .store()
            .conn()
            .await?
            .request_body(&row.endpoint, &row.delivery_id)
            .await?;
        let Some(event) = body.and_then(|body| event_of(&endpoint, &row, body)) else {
            report.skipped += 1;
            metrics::reconciled("skipped");
            continue;
        };
        // Take the claim over first, fenced like any retry's takeover, so that
        // a provider's retry arriving now cannot run it a second time.
        let request = ClaimRequest {
            scope: row.endpoint.clone(),
            key: row.delivery_id.clone(),
            fingerprint: row.request_hash.clone(),
            event_type: row.event_type.clone(),
            body_key: row.body_key.clone(),
            retention: None,
            payload: None,
        };
        let Some(lease) = engine.take_over_abandoned(&request).await? else {
            report.skipped += 1;
            metrics::reconciled("skipped");
            continue;
        };
        let operation = RunHandlers::new(endpoint.clone(), event, engine.store().clock().clone());
        let (mut done, mut not_done, mut unknown) = (0, 0, 0);
        for (name, handler) in endpoint.handlers.iter().filter(|(_, h)| h.external()) {
            match handler.reconcile(operation.event()).await {
                Ok(Reconciled::Done(effect)) => {
                    done += 1;
                    operation.set_external(name, effect.unwrap_or_default());
                }
                Ok(Reconciled::NotDone) => not_done += 1,
                Ok(Reconciled::Unknown) | Err(_) => unknown += 1,
            }
        }
        tracing::info!(delivery_id = %row.delivery_id, done, not_done, unknown, "reconciling an abandoned claim");
        let outcome = if unknown > 0 {
            // Our lease expires in turn and the next pass asks again.
            report.unknown += 1;
            "unknown"
        } else if not_done > 0 {
            lease
                .release(Some("reconciled: the outside work never happened"))
                .await?;
            report.released += 1;
            "released"
        } else {
            match lease.finish(&operation).await {
                Ok(_) => {
                    report.completed += 1;
                    "completed"
                }
                Err(error @ EngineError::Store(_)) => return Err(error),
                Err(EngineError::LeaseLost) => {
                    report.skipped += 1;
                    "skipped"
                }
                // The engine released the key and recorded why.
                Err(_) => {
                    report.released += 1;
                    "released"
                }
            }
        };
        metrics::reconciled(outcome);
    }
    Ok(report)
}

/// The background reconciler `serve` runs every `reconcile_interval`, started
/// and stopped with the server like the [`super::PurgeTask`]. Handlers'
/// futures are not `Send` (actix runs each worker on one thread), so the loop
/// is polled on a thread of its own rather than as a task of a
/// multi-threaded runtime.
pub struct ReconcileTask {
    webhooks: Webhooks,
    interval: Duration,
}

/// A running reconciler. Stopping it, or dropping it, ends the loop between
/// two passes: a pass cut short would drop a query in flight, and with it a
/// connection of the pool the server shares.
pub struct Reconciler {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl ReconcileTask {
    /// The task, or `None` when `interval` is zero (reconciling is off).
    pub fn new(webhooks: Webhooks, interval: Duration) -> Option<ReconcileTask> {
        (!interval.is_zero()).then_some(ReconcileTask { webhooks, interval })
    }

    /// Starts the loop on a thread of its own, driven by the caller's tokio
    /// runtime: the connections it opens (a PostgreSQL connection's task, a
    /// SQLite connection's blocking calls) belong to that runtime and stay
    /// usable in the shared pool after the reconciler stops, which they
    /// would not if they belonged to a runtime of the reconciler's own.
    pub fn spawn(self) -> std::io::Result<Reconciler> {
        let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("reconciler".into())
            .spawn(move || runtime.block_on(reconcile_loop(self, stopped)))?;
        Ok(Reconciler { stop, thread })
    }
}

impl Reconciler {
    /// Ends the loop (after the pass in progress, if any) and waits for its
    /// thread to finish.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let thread = self.thread;
        if tokio::task::spawn_blocking(move || thread.join())
            .await
            .is_err()
        {
            tracing::warn!("the reconciler's thread could not be joined");
        }
    }
}

async fn reconcile_loop(task: ReconcileTask, mut stopped: tokio::sync::oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            // First: a runtime that shuts down drops the handle before it
            // stops its timers.
            biased;
            // A stop, or the handle dropped.
            _ = &mut stopped => return,
            () = tokio::time::sleep(task.interval) => {}
        }
        match reconcile(&task.webhooks, 100).await {
            Ok(report) if report.examined > 0 => {
                tracing::info!(?report, "reconciled abandoned claims")
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "reconciliation failed; retrying on the next pass")
            }
        }
    }
}
