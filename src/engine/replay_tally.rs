//! `deliveries.replays`: how many repeats of a key were answered from what
//! is stored, for operators (the admin listing). Never part of the answer.
//!
//! Counting one replay is a write, and a write per replay would make every
//! redelivery cost a durable commit: the very thing the replay path avoids.
//! So replays are added up in memory and written every few seconds
//! (`replay_count_every`): a key's replays of that time in one count, up to
//! 500 keys in one transaction and, where a key names its row, in one
//! statement. A count can be lost (a crash, a failed
//! write, more distinct keys in one interval than [`MOST_KEYS`]); an answer
//! is never slowed down by it.

use crate::store::Store;
use crossbeam_utils::CachePadded;
// foldhash, not std's SipHash: three hashes of a short key per replay were
// about 1 % of a replay's CPU at SipHash's cost. Its seeds are random per
// process; only keys of verified deliveries reach the tally, and at most
// MOST_KEYS of them at once.
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// Distinct keys held between two writes; beyond it new keys go uncounted,
/// so a storm of distinct ids cannot grow the maps without bound.
const MOST_KEYS: usize = 10_000;
/// Keys per transaction: the write holds SQLite's one write slot briefly.
const KEYS_PER_WRITE: usize = 500;
/// Each thread counts in a shard of its own ([`crate::thread_shard`]), so
/// that workers replaying the same keys never share a lock or a map: a
/// shard chosen by the key's hash was written by every worker in turn,
/// each lock and count an atomic write to a line the other core may hold.
/// Well above the worker count; threads beyond it share shards, which
/// stays correct.
const SHARDS: usize = 32;

/// Scope, key and body key of a replayed request.
type Counted = (String, String, Option<String>);

/// A scope's keys: each with its body key and its replays.
type ScopeCounts = HashMap<String, (Option<String>, i32), RandomState>;

/// One shard's counts: by scope, then by key (looked up by `&str`, so a
/// key already counted costs no allocation), with the body key to write.
#[derive(Default)]
struct Shard {
    scopes: HashMap<String, ScopeCounts, RandomState>,
}

pub(super) struct ReplayTally {
    shards: [CachePadded<Mutex<Shard>>; SHARDS],
    /// Distinct keys held in all shards: written only when a key is new to
    /// its shard, not on each count.
    keys: AtomicUsize,
    writer_started: AtomicBool,
}

impl Default for ReplayTally {
    fn default() -> Self {
        ReplayTally {
            shards: std::array::from_fn(|_| CachePadded::default()),
            keys: AtomicUsize::new(0),
            writer_started: AtomicBool::new(false),
        }
    }
}

impl ReplayTally {
    /// Counts one replay of `key` in `scope` (`body_key`: the row's body
    /// key, where it has one). Starts the writer on first use, on the
    /// caller's tokio runtime.
    pub(super) fn count(
        self: &Arc<Self>,
        store: &Store,
        scope: &str,
        key: &str,
        body_key: Option<&str>,
        every: Duration,
    ) {
        self.add(scope, key, body_key);
        // Read before the swap: a swap writes the flag's line even when
        // it changes nothing, and every replay on every worker would pass
        // that line between the cores.
        if !self.writer_started.load(Ordering::Acquire)
            && !self.writer_started.swap(true, Ordering::AcqRel)
        {
            tokio::spawn(write_counts(Arc::downgrade(self), store.clone(), every));
        }
    }

    fn add(&self, scope: &str, key: &str, body_key: Option<&str>) {
        let Ok(mut shard) = self.shards[crate::thread_shard::of_current_thread(SHARDS)].lock()
        else {
            return;
        };
        if let Some((_, n)) = shard
            .scopes
            .get_mut(scope)
            .and_then(|keys| keys.get_mut(key))
        {
            *n = n.saturating_add(1);
            return;
        }
        // A key counted by another thread is new to this shard: it takes a
        // place of its own until the shards are merged at the write.
        if self.keys.fetch_add(1, Ordering::Relaxed) >= MOST_KEYS {
            self.keys.fetch_sub(1, Ordering::Relaxed);
            // The scope carries a tenant header and the key a client's text.
            tracing::debug!(
                scope = %crate::log_text::escaped(scope),
                key = %crate::log_text::escaped(key),
                "replay not counted: too many keys at once"
            );
            return;
        }
        shard
            .scopes
            .entry(scope.to_owned())
            .or_default()
            .insert(key.to_owned(), (body_key.map(str::to_owned), 1));
    }

    /// Every count since the last call, emptying the shards: one entry per
    /// key, its counts from every thread added up (a statement that
    /// updates many rows from one list applies only one entry per row).
    fn take(&self) -> Vec<(Counted, i32)> {
        let mut merged: HashMap<Counted, i32, RandomState> = HashMap::default();
        for shard in &self.shards {
            let taken = match shard.lock() {
                Ok(mut shard) => std::mem::take(&mut *shard),
                Err(_) => continue,
            };
            let mut keys = 0;
            for (scope, counts) in taken.scopes {
                for (key, (body_key, n)) in counts {
                    keys += 1;
                    let total = merged.entry((scope.clone(), key, body_key)).or_insert(0);
                    *total = total.saturating_add(n);
                }
            }
            self.keys.fetch_sub(keys, Ordering::Relaxed);
        }
        merged.into_iter().collect()
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
        for chunk in counts.chunks(KEYS_PER_WRITE) {
            // On SQLite the write holds the write gate for its whole chunk:
            // its statements run inline, as a delivery's do, rather than
            // one blocking-pool hand-off per key while writers queue.
            let written = crate::store::inline_scope(write_chunk(&store, chunk)).await;
            if let Err(error) = written {
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
    match write_in(&mut tx, chunk).await {
        Ok(()) => tx.commit().await,
        Err(error) => {
            tx.rollback().await?;
            Err(error)
        }
    }
}

/// `chunk`'s counts, in `tx`. Keys without a body key are found by their
/// primary key, all in one statement; a repeat matched by its body under
/// another id is counted on whichever row its key or its body key names,
/// one key at a time. Sorted: where PostgreSQL walks the list in order (a
/// nested loop over the primary key, its plan on a large table), instances
/// writing counts of the same keys at once lock those rows in the same
/// order.
async fn write_in(
    tx: &mut crate::store::Transaction,
    chunk: &[(Counted, i32)],
) -> Result<(), crate::store::StoreError> {
    let mut by_key: Vec<(&str, &str, i32)> = chunk
        .iter()
        .filter(|((_, _, body_key), _)| body_key.is_none())
        .map(|((scope, key, _), n)| (scope.as_str(), key.as_str(), *n))
        .collect();
    by_key.sort_unstable();
    tx.conn().count_replays_by_key(&by_key).await?;
    for ((scope, key, body_key), n) in chunk {
        if let Some(body_key) = body_key {
            tx.conn().count_replays(scope, key, body_key, *n).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One replay of `key`, whose row's body key is `body-KEY`.
    fn replay_of(tally: &ReplayTally, scope: &str, key: &str) {
        tally.add(scope, key, Some(&format!("body-{key}")));
    }

    #[test]
    fn replays_counted_from_many_threads_add_up_per_key() {
        let tally = Arc::new(ReplayTally::default());
        std::thread::scope(|threads| {
            for _ in 0..4 {
                let tally = tally.clone();
                threads.spawn(move || {
                    for n in 0..250 {
                        replay_of(&tally, "shop", &format!("msg_{}", n % 5));
                        replay_of(&tally, "other", "msg_0");
                    }
                });
            }
        });
        let mut counts = tally.take();
        counts.sort();
        assert_eq!(counts.len(), 6);
        assert_eq!(
            counts[0],
            (
                ("other".into(), "msg_0".into(), Some("body-msg_0".into())),
                1000
            )
        );
        assert!(counts[1..].iter().all(|(_, n)| *n == 200), "{counts:?}");
        assert!(tally.take().is_empty(), "taking empties the tally");
    }

    #[test]
    fn distinct_keys_beyond_the_bound_go_uncounted() {
        let tally = ReplayTally::default();
        for n in 0..MOST_KEYS * 2 {
            replay_of(&tally, "shop", &format!("msg_{n}"));
        }
        let counts = tally.take();
        assert!(counts.len() <= MOST_KEYS, "{} keys held", counts.len());
        assert!(counts.len() > MOST_KEYS / 2, "{} keys held", counts.len());
    }
}
