//! The traffic recorder: how many deliveries each endpoint answered, with
//! which outcome and how fast, per minute — what the admin dashboard
//! draws. Rejections and replays write nothing to the database on their
//! own, so they are counted here, in memory, beside the metrics; a
//! background task adds the counts to the `traffic` table every few
//! seconds, one batched statement per flush, never on a request's path.
//!
//! A counter lost to a crash between two flushes is lost: these are
//! figures for a dashboard, not a ledger. A flush that fails keeps its
//! counts for the next one (up to [`MAX_PENDING`] counters).

pub mod latency;

use crate::clock::SharedClock;
use crate::store::traffic::TrafficCount;
use crate::store::{Store, StoreError};
use crossbeam_utils::CachePadded;
use foldhash::fast::RandomState;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How often the background task flushes by default.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);
/// How long the purge keeps the counters: a day past the dashboard's
/// longest window (7 days).
pub const RETENTION: Duration = Duration::from_secs(8 * 24 * 3600);
/// Counters kept in memory at most while the database is unreachable;
/// past that a failed flush's counts are dropped (and said so), so that an
/// outage cannot grow the process without bound.
pub const MAX_PENDING: usize = 200_000;

pub const PROCESSED: &str = "processed";
pub const REPLAYED: &str = "replayed";
pub const FAILED: &str = "failed";

/// How a delivery was answered, as the `traffic.outcome` column names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Outcome(Cow<'static, str>);

impl Outcome {
    pub fn processed() -> Outcome {
        Outcome(Cow::Borrowed(PROCESSED))
    }

    pub fn replayed() -> Outcome {
        Outcome(Cow::Borrowed(REPLAYED))
    }

    /// Not processed: the engine or a handler failed (`reason` is the
    /// metric's: `processing-failed`, `lease-lost`, `storage-unavailable`).
    pub fn failed(reason: &str) -> Outcome {
        Outcome(Cow::Owned(format!("{FAILED}:{reason}")))
    }

    /// Answered 409: the key is in progress elsewhere or was reused.
    pub fn conflict(kind: &str) -> Outcome {
        Outcome(Cow::Owned(format!("conflict:{kind}")))
    }

    /// Refused before the engine, with a problem type's `reason`.
    pub fn rejected(reason: &str) -> Outcome {
        Outcome(Cow::Owned(format!("rejected:{reason}")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Counts of one endpoint not flushed yet, by (minute, outcome, bucket).
// foldhash, not SipHash: both maps are looked up on every answer, their
// keys are configured endpoint names and bounded tuples.
type EndpointCounts = HashMap<(i64, Outcome, i32), i32, RandomState>;

/// Every endpoint's counts not flushed yet.
type Pending = HashMap<String, EndpointCounts, RandomState>;

/// Each thread counts in a shard of its own ([`crate::thread_shard`]): one
/// map behind one lock, updated by every worker on every answer, had each
/// answer write a lock and a count that the other core wrote last. A
/// flush merges the shards.
const SHARDS: usize = 16;

/// Adds `count` to an endpoint's counter for `key`: how an answer is
/// counted, how a flush merges the shards, and how counts that could not
/// be written are put back.
fn add(counts: &mut EndpointCounts, key: (i64, Outcome, i32), count: i32) {
    let slot = counts.entry(key).or_insert(0);
    *slot = slot.saturating_add(count);
}

/// A handle on the in-memory counters. Cheap to clone: every clone (each
/// worker's copy of the webhook face) counts into the same ones.
#[derive(Clone)]
pub struct Traffic {
    pending: Arc<[CachePadded<Mutex<Pending>>; SHARDS]>,
    /// Which minute a delivery is counted in: the store's clock, which
    /// tests move by hand.
    clock: SharedClock,
}

impl std::fmt::Debug for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traffic").finish_non_exhaustive()
    }
}

impl Traffic {
    pub fn new(clock: SharedClock) -> Traffic {
        Traffic {
            pending: Arc::new(std::array::from_fn(|_| CachePadded::default())),
            clock,
        }
    }

    /// Counts one delivery of `endpoint` answered with `outcome` after
    /// `elapsed`. Takes a lock for a map update only.
    pub fn record(&self, endpoint: &str, outcome: Outcome, elapsed: Duration) {
        let minute = self.clock.now().timestamp().div_euclid(60) * 60;
        let bucket = latency::bucket_of(elapsed);
        let mut pending = self.shard(crate::thread_shard::of_current_thread(SHARDS));
        let counts = match pending.get_mut(endpoint) {
            Some(counts) => counts,
            None => pending.entry(endpoint.to_owned()).or_default(),
        };
        add(counts, (minute, outcome, bucket), 1);
    }

    /// Shard `i`'s counts, locked. A panic while holding the lock leaves
    /// the map consistent (one insert is atomic), so a poisoned lock is
    /// used as it is.
    fn shard(&self, i: usize) -> MutexGuard<'_, Pending> {
        self.pending[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the counts gathered so far, leaving none: one counter per
    /// endpoint, minute, outcome and bucket, every thread's counts added
    /// up (the upsert that writes them may touch each row once).
    fn take(&self) -> Vec<TrafficCount> {
        let mut merged = Pending::default();
        for i in 0..SHARDS {
            let taken = std::mem::take(&mut *self.shard(i));
            for (endpoint, counts) in taken {
                let into = merged.entry(endpoint).or_default();
                for (key, count) in counts {
                    add(into, key, count);
                }
            }
        }
        merged
            .into_iter()
            .flat_map(|(endpoint, counts)| {
                counts
                    .into_iter()
                    .map(move |((minute, outcome, bucket), count)| TrafficCount {
                        endpoint: endpoint.clone(),
                        minute,
                        outcome: outcome.as_str().to_owned(),
                        bucket,
                        count,
                    })
            })
            .collect()
    }

    /// Puts counts that could not be written back, unless that would keep
    /// more than [`MAX_PENDING`] counters; `false`: they were dropped.
    fn put_back(&self, counts: Vec<TrafficCount>) -> bool {
        let held: usize = (0..SHARDS)
            .map(|i| self.shard(i).values().map(HashMap::len).sum::<usize>())
            .sum();
        if held + counts.len() > MAX_PENDING {
            return false;
        }
        // Into one shard: the next flush merges them with the rest.
        let mut pending = self.shard(crate::thread_shard::of_current_thread(SHARDS));
        for count in counts {
            add(
                pending.entry(count.endpoint).or_default(),
                (
                    count.minute,
                    Outcome(Cow::Owned(count.outcome)),
                    count.bucket,
                ),
                count.count,
            );
        }
        true
    }

    /// Adds what was counted since the last flush to the `traffic` table;
    /// how many counters were written. Called by the background task, at
    /// shut-down, and by tests that want the figures now.
    pub async fn flush(&self, store: &Store) -> Result<usize, StoreError> {
        let counts = self.take();
        if counts.is_empty() {
            return Ok(0);
        }
        let written = async { store.conn().await?.add_traffic(&counts).await }.await;
        match written {
            Ok(()) => Ok(counts.len()),
            Err(error) => {
                let n = counts.len();
                if !self.put_back(counts) {
                    tracing::warn!(counters = n, "traffic counts dropped: too many unflushed");
                }
                Err(error)
            }
        }
    }

    /// Flushes every `every` until stopped, then once more.
    pub fn spawn_flusher(&self, store: Store, every: Duration) -> Flusher {
        let traffic = self.clone();
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = stopped.notified() => break,
                }
                if let Err(error) = traffic.flush(&store).await {
                    tracing::warn!(%error, "could not write the traffic counts; kept for the next flush");
                }
            }
            if let Err(error) = traffic.flush(&store).await {
                tracing::warn!(%error, "could not write the last traffic counts");
            }
        });
        Flusher { stop, task }
    }
}

/// The background flush; [`Flusher::stop`] flushes a last time.
pub struct Flusher {
    stop: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Flusher {
    pub async fn stop(self) {
        self.stop.notify_one();
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn counts_are_kept_per_endpoint_minute_outcome_and_bucket() {
        // A clock that stands still: no minute ends between two records.
        let clock = ManualClock::new(chrono::DateTime::from_timestamp(1_796_000_000, 0).unwrap());
        let traffic = Traffic::new(clock.shared());
        let fast = Duration::from_millis(1);
        traffic.record("shop", Outcome::processed(), fast);
        traffic.record("shop", Outcome::processed(), fast);
        traffic.record("shop", Outcome::rejected("invalid-signature"), fast);
        traffic.record("other", Outcome::replayed(), Duration::from_secs(2));
        clock.advance(Duration::from_secs(60));
        traffic.record("shop", Outcome::processed(), fast);
        let mut counts = traffic.take();
        counts.sort_by(|a, b| {
            (&a.endpoint, a.minute, &a.outcome).cmp(&(&b.endpoint, b.minute, &b.outcome))
        });
        let seen: Vec<(&str, &str, i32, i32)> = counts
            .iter()
            .map(|c| (c.endpoint.as_str(), c.outcome.as_str(), c.bucket, c.count))
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "other",
                    "replayed",
                    latency::bucket_of(Duration::from_secs(2)),
                    1
                ),
                ("shop", "processed", latency::bucket_of(fast), 2),
                (
                    "shop",
                    "rejected:invalid-signature",
                    latency::bucket_of(fast),
                    1
                ),
                ("shop", "processed", latency::bucket_of(fast), 1),
            ]
        );
        assert!(counts.iter().all(|c| c.minute % 60 == 0));
        assert_eq!(counts[3].minute - counts[1].minute, 60);
        assert!(traffic.take().is_empty(), "a flush takes the counts");
    }

    #[test]
    fn counts_from_many_threads_are_one_counter_each() {
        let clock = ManualClock::new(chrono::DateTime::from_timestamp(1_796_000_000, 0).unwrap());
        let traffic = Traffic::new(clock.shared());
        std::thread::scope(|threads| {
            for _ in 0..SHARDS + 3 {
                threads.spawn(|| {
                    for _ in 0..100 {
                        traffic.record("shop", Outcome::replayed(), Duration::ZERO);
                    }
                });
            }
        });
        let counts = traffic.take();
        assert_eq!(counts.len(), 1, "{counts:?}");
        assert_eq!(counts[0].count, 100 * (SHARDS as i32 + 3));
        assert!(traffic.take().is_empty());
    }

    #[test]
    fn counts_put_back_add_up_and_stop_at_the_cap() {
        let clock = ManualClock::new(chrono::DateTime::from_timestamp(1_796_000_000, 0).unwrap());
        let traffic = Traffic::new(clock.shared());
        traffic.record("shop", Outcome::processed(), Duration::ZERO);
        let taken = traffic.take();
        traffic.record("shop", Outcome::processed(), Duration::ZERO);
        assert!(traffic.put_back(taken));
        let again = traffic.take();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].count, 2);
        let many: Vec<TrafficCount> = (0..=MAX_PENDING as i64)
            .map(|minute| TrafficCount {
                endpoint: "shop".into(),
                minute,
                outcome: PROCESSED.into(),
                bucket: 0,
                count: 1,
            })
            .collect();
        assert!(!traffic.put_back(many));
        assert!(traffic.take().is_empty());
    }
}
