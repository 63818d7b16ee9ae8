//! `deliveries.replays`: how many repeats of a key were answered from what
//! is stored, for operators (the admin listing). Never part of the answer.
//!
//! Counting one replay is a write, and a write per replay would make every
//! redelivery cost a durable commit: the very thing the replay path avoids.
//! So replays are added up in memory and written every few seconds
//! (`replay_count_every`), a key's replays of that time in one update and
//! the keys in few transactions. A count can be lost (a crash, a failed
//! write, more distinct keys in one interval than [`MOST_KEYS`]); an answer
//! is never slowed down by it.

use super::ClaimRequest;
use crate::store::Store;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// Distinct keys held between two writes; beyond it new keys go uncounted,
/// so a storm of distinct ids cannot grow the map without bound.
const MOST_KEYS: usize = 10_000;
/// Keys per transaction: the write holds SQLite's one write slot briefly.
const KEYS_PER_WRITE: usize = 500;

/// Scope, key and body key of a replayed request.
type Counted = (String, String, Option<String>);

#[derive(Default)]
pub(super) struct ReplayTally {
    pending: Mutex<HashMap<Counted, i32>>,
    writer_started: AtomicBool,
}

impl ReplayTally {
    /// Counts one replay of `request`'s key. Starts the writer on first use,
    /// on the caller's tokio runtime.
    pub(super) fn count(self: &Arc<Self>, store: &Store, request: &ClaimRequest, every: Duration) {
        {
            let Ok(mut pending) = self.pending.lock() else {
                return;
            };
            let counted = (
                request.scope.clone(),
                request.key.clone(),
                request.body_key.clone(),
            );
            let full = pending.len() >= MOST_KEYS;
            match pending.get_mut(&counted) {
                Some(n) => *n = n.saturating_add(1),
                None if full => {
                    tracing::debug!(scope = %request.scope, key = %request.key, "replay not counted: too many keys at once");
                }
                None => {
                    pending.insert(counted, 1);
                }
            }
        }
        if !self.writer_started.swap(true, Ordering::AcqRel) {
            tokio::spawn(write_counts(Arc::downgrade(self), store.clone(), every));
        }
    }

    fn take(&self) -> HashMap<Counted, i32> {
        match self.pending.lock() {
            Ok(mut pending) => std::mem::take(&mut *pending),
            Err(_) => HashMap::new(),
        }
    }
}

/// Writes the counts `every` so often until the engine is dropped.
async fn write_counts(tally: Weak<ReplayTally>, store: Store, every: Duration) {
    let mut ticks = tokio::time::interval(every.max(Duration::from_millis(10)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let counts = match tally.upgrade() {
            Some(tally) => tally.take(),
            None => return,
        };
        let counts: Vec<_> = counts.into_iter().collect();
        for chunk in counts.chunks(KEYS_PER_WRITE) {
            if let Err(error) = write_chunk(&store, chunk).await {
                tracing::debug!(%error, keys = chunk.len(), "replays not counted");
            }
        }
    }
}

async fn write_chunk(
    store: &Store,
    chunk: &[(Counted, i32)],
) -> Result<(), crate::store::StoreError> {
    let mut tx = store.begin().await?;
    for ((scope, key, body_key), n) in chunk {
        if let Err(error) = tx
            .conn()
            .count_replays(scope, key, body_key.as_deref(), *n)
            .await
        {
            tx.rollback().await?;
            return Err(error);
        }
    }
    tx.commit().await
}
