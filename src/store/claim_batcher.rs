//! Group commit on PostgreSQL: the fresh deliveries that arrive while a
//! batch is at the database wait for the next one, and go together.
//!
//! A delivery whose operation plans (see `claim_batch`) joins its thread's
//! queue and waits. Each queue has at most one drainer, a task spawned by
//! the member that found it idle: it takes what waits (up to
//! `postgres_group_commit_max` members of distinct keys, sorted by key),
//! sends them as one statement on one connection, answers each member, and
//! takes the next batch, until the queue is empty. A delivery that arrives
//! alone waits for nothing but the spawn: its batch is itself. Under load
//! the batches grow by themselves, to about the deliveries in flight per
//! worker, with no timer to wait on.
//!
//! The drainer is a task of its own, not one of the members, so that a
//! member whose request is dropped (its client went away) cannot strand the
//! others. If the batch's statement fails, every member is told to go
//! alone: it sends its own statement, so one member's bad row fails only
//! itself. Whether the failed batch may have committed is passed on (an
//! error the server reported rolled the statement back; a lost connection
//! says nothing), for the ledger ids its rows carry.

use super::Store;
use super::claim_batch::BatchMember;
use super::error::StoreError;
use crossbeam_utils::CachePadded;
use diesel::result::Error as DieselError;
use foldhash::fast::RandomState;
use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use tokio::sync::oneshot;

/// How PostgreSQL's fresh deliveries share their statements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgGroupCommitOptions {
    /// `false`: every delivery sends its own statement.
    pub enabled: bool,
    /// The most members one statement takes.
    pub max_members: usize,
}

impl Default for PgGroupCommitOptions {
    fn default() -> Self {
        PgGroupCommitOptions {
            enabled: true,
            max_members: 64,
        }
    }
}

/// What became of a member's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batched {
    /// Its claim won: its writes and completion committed.
    Won,
    /// Its row (or its body key's) existed: nothing of it was written.
    Lost,
    /// Its batch failed, or never ran: the member sends its own statement.
    /// `maybe_committed`: the batch's outcome is unknown (the connection
    /// was lost with the statement sent), so its rows may exist.
    Alone { maybe_committed: bool },
}

/// The queues, one per thread shard (see `thread_shard`): a worker's
/// members meet on its own thread, and its drainer checks out connections
/// from its own lane.
pub(super) struct ClaimBatcher {
    shards: Box<[CachePadded<Mutex<Queue>>]>,
    max_members: usize,
    /// Where each batch is reported: its size, or its failure.
    committed: fn(usize),
    failed: fn(),
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// A drainer runs for this queue.
    draining: bool,
}

struct Waiting {
    member: BatchMember,
    answer: oneshot::Sender<Batched>,
}

/// How many queues: more than the workers a machine of this kind runs, so
/// that each worker has its own; extra threads share, which stays correct.
const SHARDS: usize = 16;

impl ClaimBatcher {
    pub(super) fn new(
        options: &PgGroupCommitOptions,
        committed: fn(usize),
        failed: fn(),
    ) -> ClaimBatcher {
        ClaimBatcher {
            shards: (0..SHARDS).map(|_| CachePadded::default()).collect(),
            max_members: options.max_members.max(1),
            committed,
            failed,
        }
    }

    fn queue(&self, shard: usize) -> std::sync::MutexGuard<'_, Queue> {
        self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The next batch of `shard`'s queue: at most `max_members` members of
    /// distinct keys (a repeat of a key waits for the next batch, where its
    /// claim finds the first one's row), sorted by key. Empty, with the
    /// queue marked idle, when nothing waits.
    fn take(&self, shard: usize) -> Vec<Waiting> {
        let mut queue = self.queue(shard);
        if queue.waiting.is_empty() {
            queue.draining = false;
            return Vec::new();
        }
        let waiting = std::mem::take(&mut queue.waiting);
        // Which members go, in the order they came: a set of the keys
        // taken, not a search of the batch per member, since a batch may
        // hold up to `postgres_group_commit_max` (1,000) members.
        let mut keys: HashSet<(&str, &str), RandomState> = HashSet::default();
        let goes: Vec<bool> = waiting
            .iter()
            .map(|w| {
                keys.len() < self.max_members
                    && keys.insert((&w.member.endpoint, &w.member.delivery_id))
            })
            .collect();
        drop(keys);
        let mut batch: Vec<Waiting> = Vec::with_capacity(waiting.len().min(self.max_members));
        for (w, goes) in waiting.into_iter().zip(goes) {
            if goes {
                batch.push(w);
            } else {
                queue.waiting.push(w);
            }
        }
        drop(queue);
        // One lock order for every batch: two batches (of this process or
        // another) that share keys wait for each other, never deadlock. Body
        // keys are not in this order; a deadlock over them is broken by
        // PostgreSQL, which refuses one statement, whose members go alone.
        batch.sort_unstable_by(|a, b| {
            (&a.member.endpoint, &a.member.delivery_id)
                .cmp(&(&b.member.endpoint, &b.member.delivery_id))
        });
        batch
    }
}

impl Store {
    /// Claims `member`'s key completed and makes its writes in a batch with
    /// the other fresh deliveries waiting on this thread. `Alone` where the
    /// store batches nothing (SQLite, or `postgres_group_commit = false`).
    pub async fn claim_completed_batched(&self, member: BatchMember) -> Batched {
        let Some(batcher) = self.claim_batcher() else {
            return Batched::Alone {
                maybe_committed: false,
            };
        };
        let shard = crate::thread_shard::of_current_thread(SHARDS);
        let (answer, answered) = oneshot::channel();
        let start = {
            let mut queue = batcher.queue(shard);
            queue.waiting.push(Waiting { member, answer });
            !std::mem::replace(&mut queue.draining, true)
        };
        if start {
            tokio::spawn(drain(self.clone(), shard));
        }
        // A drainer that went away with this member's batch (a panic, the
        // runtime shutting down) says nothing of its statement.
        answered.await.unwrap_or(Batched::Alone {
            maybe_committed: true,
        })
    }
}

/// Sends `shard`'s batches until its queue is empty.
async fn drain(store: Store, shard: usize) {
    let Some(batcher) = store.claim_batcher() else {
        return;
    };
    // However this task ends, the queue is not left marked as drained by
    // nobody: the next member starts a drainer of its own.
    let mut idle = Idle {
        store: &store,
        shard,
        done: false,
    };
    loop {
        let batch = batcher.take(shard);
        if batch.is_empty() {
            idle.done = true;
            return;
        }
        let (members, answers): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|w| (w.member, w.answer)).unzip();
        // Err: whether the failed batch may have committed.
        let outcome = match store.conn().await {
            Ok(mut conn) => match conn.claim_completed_batch(&members).await {
                Ok(won) => Ok(won),
                Err(error) if rolled_back(&error) => Err(false),
                // The connection lost the statement's answer (or is
                // broken): it is closed, not handed to the next batch.
                Err(_) => {
                    conn.discard();
                    Err(true)
                }
            },
            // Nothing was sent: each member tries on its own.
            Err(_) => Err(false),
        };
        match outcome {
            Ok(won) => {
                (batcher.committed)(members.len());
                for (answer, won) in answers.into_iter().zip(won) {
                    // A member whose request went away needs no answer.
                    let _ = answer.send(if won { Batched::Won } else { Batched::Lost });
                }
            }
            Err(maybe_committed) => {
                (batcher.failed)();
                for answer in answers {
                    let _ = answer.send(Batched::Alone { maybe_committed });
                }
            }
        }
    }
}

/// Whether `error` says the statement did not commit: the server refused
/// it, and a statement is its own transaction, rolled back whole. A lost
/// connection says nothing either way.
fn rolled_back(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::LockTimeout
            | StoreError::StatementTimeout
            | StoreError::Query(DieselError::DatabaseError(..))
    )
}

/// A drainer's hold on its queue. A drainer that ends before its queue is
/// empty (a panic, the runtime dropping it) marks the queue idle, so that
/// the next member starts a new one, and tells the members still waiting
/// to go alone: none of them was sent.
struct Idle<'s> {
    store: &'s Store,
    shard: usize,
    /// The drainer found its queue empty and marked it idle itself.
    done: bool,
}

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(batcher) = self.store.claim_batcher() {
            let mut queue = batcher.queue(self.shard);
            for w in queue.waiting.drain(..) {
                let _ = w.answer.send(Batched::Alone {
                    maybe_committed: false,
                });
            }
            queue.draining = false;
        }
    }
}
