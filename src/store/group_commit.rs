//! Group commit on SQLite: the writers that queue at the write gate share one
//! database transaction, each inside a savepoint of its own, and one COMMIT
//! (one fsync) makes all of them durable.
//!
//! A member's `begin` passes the gate, takes the group that the previous
//! member parked (or opens one: `BEGIN`), and opens its savepoint. Its
//! `commit` releases the savepoint; its `rollback` rolls back to it, so a
//! failing member's writes go alone. Then, if writers still wait at the gate
//! and the group is below its caps, the member parks the group for the next
//! one, lets the gate go, and waits for the group's outcome; otherwise it
//! leads: COMMIT, and every member learns the result. Nobody returns before
//! the COMMIT that makes its writes durable, including members that rolled
//! back: they may have read an earlier member's uncommitted row (a storm's
//! copy that found the first copy completed answers a replay), and must not
//! answer before that row is durable.
//!
//! Whatever goes wrong, nothing of the group commits: a savepoint that cannot
//! be released or rolled back to, a transaction that SQLite ended by itself,
//! a member dropped mid-transaction. The connection is then closed with its
//! transaction open (SQLite rolls it back), and every member gets an error.

use super::writer_thread::on_writer_thread;
use super::{DbConn, InlineStatements, SqliteConn, StoreError, begin, begin_immediate};
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::{AsyncConnection, TransactionManager};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{OwnedMutexGuard, oneshot};
use tokio::time::Instant;

/// How SQLite's writers of one process share their commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupCommitOptions {
    /// `false`: every transaction commits (and fsyncs) on its own.
    pub enabled: bool,
    /// The most members one COMMIT takes.
    pub max_members: usize,
    /// How long a group stays open for more members after its `BEGIN`: the
    /// longest its first member waits for the members after it.
    pub max_wait: Duration,
    /// How long a member that finds nobody at the gate keeps a group smaller
    /// than the last one open before it commits (`ZERO`: never).
    pub linger: Duration,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        GroupCommitOptions {
            enabled: true,
            max_members: 64,
            max_wait: Duration::from_millis(10),
            linger: Duration::from_micros(250),
        }
    }
}

/// Where the group commits are reported: the telemetry's recording helpers
/// in a server (see `startup::store_options`), nothing by default. Passed
/// in, because the telemetry reads the store and the store must not import
/// it back.
#[derive(Clone, Copy, Debug)]
pub struct GroupCommitMetrics {
    /// One COMMIT made this many members durable.
    pub committed: fn(usize),
    /// A group was rolled back as a whole.
    pub rolled_back: fn(),
    /// One PostgreSQL statement committed this many fresh deliveries
    /// (see `claim_batcher`)...
    pub postgres_committed: fn(usize),
    /// ...or a batch failed, and its members each went alone.
    pub postgres_failed: fn(),
}

impl Default for GroupCommitMetrics {
    fn default() -> Self {
        GroupCommitMetrics {
            committed: |_| {},
            rolled_back: || {},
            postgres_committed: |_| {},
            postgres_failed: || {},
        }
    }
}

/// The savepoint diesel opens for a member, at transaction depth 1.
const MEMBER_SAVEPOINT: &str = "diesel_savepoint_1";

/// What a member waiting for its group's COMMIT hears: `Err` holds why the
/// group did not commit (a `StoreError` is not `Clone`).
type Outcome = Result<(), Arc<str>>;

/// SQLite has one writer at a time. Writers of this process queue here,
/// first come first served, instead of polling the file lock through
/// SQLite's busy handler, whose sleeps (up to 100 ms each) would be most of
/// a storm's latency. Other processes (the CLI) still meet the busy handler.
/// With group commit on, the gate also holds the group between members.
pub(super) struct WriteGate {
    gate: Arc<tokio::sync::Mutex<()>>,
    /// Writers between wanting the gate and holding it: a member parks its
    /// group only when someone will take it.
    waiters: AtomicUsize,
    acquire_timeout: Duration,
    /// SQLite's own wait for another process's write lock.
    busy_timeout: Duration,
    options: GroupCommitOptions,
    metrics: GroupCommitMetrics,
    /// The open group between two members; only the gate's holder touches it.
    parked: Mutex<Option<Group>>,
    next_group: AtomicU64,
    /// How many members the last committed group had: how many writers
    /// were about at once lately.
    last_members: AtomicUsize,
    /// Whether the gate's holder lingers now.
    lingering: AtomicBool,
}

impl WriteGate {
    pub(super) fn new(
        acquire_timeout: Duration,
        busy_timeout: Duration,
        options: GroupCommitOptions,
        metrics: GroupCommitMetrics,
    ) -> WriteGate {
        WriteGate {
            gate: Arc::new(tokio::sync::Mutex::new(())),
            waiters: AtomicUsize::new(0),
            acquire_timeout,
            busy_timeout,
            options,
            metrics,
            parked: Mutex::new(None),
            next_group: AtomicU64::new(0),
            last_members: AtomicUsize::new(0),
            lingering: AtomicBool::new(false),
        }
    }

    pub(super) fn busy_timeout(&self) -> Duration {
        self.busy_timeout
    }

    pub(super) fn groups(&self) -> bool {
        self.options.enabled
    }

    /// Writers waiting for the gate now.
    pub(super) fn waiters(&self) -> usize {
        self.waiters.load(Ordering::SeqCst)
    }

    /// Waits for the gate, at most `acquire_timeout`.
    pub(super) async fn enter(&self) -> Result<OwnedMutexGuard<()>, StoreError> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        // Counted down however the wait ends: locked, timed out or cancelled.
        let waiting = Waiting(&self.waiters);
        let locked =
            tokio::time::timeout(self.acquire_timeout, self.gate.clone().lock_owned()).await;
        drop(waiting);
        locked.map_err(|_| {
            StoreError::Unavailable(format!(
                "no SQLite write slot within {:?}",
                self.acquire_timeout
            ))
        })
    }

    /// Makes the gate's holder a member: of the parked group, or of a new
    /// one on a connection from `pool`.
    pub(super) async fn join(
        self: &Arc<Self>,
        gate: OwnedMutexGuard<()>,
        pool: &Pool<SqliteConn>,
    ) -> Result<Member, StoreError> {
        let mut group = match self.take_parked(None) {
            Some(group) => group,
            None => {
                let mut object = pool.get().await?;
                begin_immediate(&mut object, self.busy_timeout).await?;
                let conn = DbConn::Sqlite(object);
                Group {
                    id: self.next_group.fetch_add(1, Ordering::Relaxed),
                    conn: Some(conn),
                    opened: Instant::now(),
                    members: 0,
                    waiting: Vec::new(),
                    expires: false,
                    rolled_back: self.metrics.rolled_back,
                }
            }
        };
        group.members += 1;
        let inline = InlineStatements::on();
        let opened = crate::with_conn!(group.conn(), |c| open_savepoint(c).await);
        if let Err(error) = opened {
            return Err(self.fail(group, error));
        }
        Ok(Member {
            group,
            inline,
            _gate: gate,
            write_gate: self.clone(),
        })
    }

    /// The parked group, if any (and if it is group `id`, when given).
    fn take_parked(&self, id: Option<u64>) -> Option<Group> {
        let mut parked = self.parked.lock().unwrap_or_else(PoisonError::into_inner);
        match (&*parked, id) {
            (Some(group), Some(id)) if group.id != id => None,
            _ => parked.take(),
        }
    }

    fn park(&self, group: Group) {
        let mut parked = self.parked.lock().unwrap_or_else(PoisonError::into_inner);
        // Only the gate's holder parks, and it took any parked group when it
        // entered; a group found here anyway is rolled back (by its `Drop`),
        // never committed by accident.
        if let Some(stray) = parked.replace(group) {
            tracing::error!(
                group = stray.id,
                "a second SQLite group was parked; rolled back"
            );
        }
    }

    /// Whether the gate's holder, done with its member, should leave the
    /// group open for the writers waiting behind it.
    fn should_park(&self, group: &Group) -> bool {
        self.waiters() > 0 && self.has_room(group)
    }

    fn has_room(&self, group: &Group) -> bool {
        group.members < self.options.max_members && group.opened.elapsed() < self.options.max_wait
    }

    /// With nobody at the gate, a group smaller than the last one waits up
    /// to `linger` for a writer to arrive, holding the gate and yielding to
    /// the worker's other tasks, before it commits.
    ///
    /// Without it, under concurrent load, a COMMIT answered a whole group at
    /// once; the first of its writers to come back found the gate free and
    /// nobody behind it (the others still on their way: their answers being
    /// written, their next requests read and verified), and committed alone,
    /// a whole fsync for one delivery, while the rest queued behind that
    /// fsync. In `fresh` (16 connections) a quarter of all groups were such
    /// singletons (1,104 of 4,510). A group as big as the last one, or any
    /// group when writers come one at a time (the last group had one
    /// member), commits without waiting.
    async fn linger(&self, group: &Group) {
        if self.waiters() > 0
            || self.options.linger.is_zero()
            || group.members >= self.last_members.load(Ordering::Relaxed)
            || !self.has_room(group)
        {
            return;
        }
        // Never past the group's own `max_wait`, should `linger` be longer.
        let until =
            (Instant::now() + self.options.linger).min(group.opened + self.options.max_wait);
        self.lingering.store(true, Ordering::SeqCst);
        while self.waiters() == 0 && Instant::now() < until {
            tokio::task::yield_now().await;
        }
        self.lingering.store(false, Ordering::SeqCst);
    }

    /// Whether the gate's holder is lingering for company now.
    pub(super) fn lingering(&self) -> bool {
        self.lingering.load(Ordering::SeqCst)
    }

    /// Ends the member that holds the gate: parks the group and waits for
    /// its outcome, or commits it. The gate goes when this returns, or when
    /// the group is parked.
    async fn settle(self: &Arc<Self>, mut group: Group, gate: OwnedMutexGuard<()>) -> Outcome {
        // On the writer thread the members' statements and the COMMIT run
        // inline, with no await that lets the thread go: deliveries handed
        // to it meanwhile have not been polled yet, so none counts at the
        // gate. One yield lets them queue there before the group is parked
        // or committed; without it every group committed alone (1.0
        // members per COMMIT).
        if self.waiters() == 0 && on_writer_thread() {
            tokio::task::yield_now().await;
        }
        self.linger(&group).await;
        if !self.should_park(&group) {
            let outcome = self.commit(group).await;
            drop(gate);
            return outcome;
        }
        let (answer, outcome) = oneshot::channel();
        group.waiting.push(answer);
        // Should every writer that was waiting go away (cancelled, timed
        // out), a timer still commits the group once its wait is over.
        let expiry = (!group.expires).then_some((group.id, group.opened + self.options.max_wait));
        group.expires = true;
        self.park(group);
        drop(gate);
        if let Some((id, at)) = expiry {
            tokio::spawn(self.clone().expire(id, at));
        }
        // A dropped sender: the group was dropped open, so nothing of it
        // committed.
        outcome.await.unwrap_or_else(|_| {
            Err("the group's transaction was abandoned; nothing of it was committed".into())
        })
    }

    /// Commits group `id` if it is still parked at `at`.
    async fn expire(self: Arc<Self>, id: u64, at: Instant) {
        tokio::time::sleep_until(at).await;
        let gate = self.gate.clone().lock_owned().await;
        if let Some(group) = self.take_parked(Some(id)) {
            if let Err(error) = self.commit(group).await {
                tracing::warn!(%error, "a SQLite commit group failed; its members answer an error");
            }
        }
        drop(gate);
    }

    /// COMMITs the group and tells every member the outcome. The connection
    /// goes back to the pool before the caller lets the gate go.
    ///
    /// On the store's writer thread the COMMIT runs inline, like the
    /// statements before it: the gate is held until it ends, so that thread
    /// could do nothing in the meantime but let new deliveries queue behind
    /// the gate, and a hand-off to the blocking pool and back cost two
    /// wake-ups per group. On any other thread (an HTTP worker's, where
    /// the replay tally may lead a group) the thread has other work, and the
    /// COMMIT goes to the blocking pool; so does any writer outside an
    /// inline scope (a group's expiry timer), whatever its thread.
    async fn commit(&self, mut group: Group) -> Outcome {
        let inline = on_writer_thread().then(InlineStatements::on);
        let committed = match crate::with_conn!(group.conn(), |c| at_depth(c, 1)) {
            Ok(()) => crate::with_conn!(group.conn(), |c| super::commit(c).await)
                .map_err(StoreError::from),
            Err(error) => Err(error),
        };
        drop(inline);
        match committed {
            Ok(()) => {
                (self.metrics.committed)(group.members);
                self.last_members.store(group.members, Ordering::Relaxed);
                for member in group.waiting.drain(..) {
                    let _ = member.send(Ok(()));
                }
                // Committed: the connection is clean and goes back as usual.
                drop(group.conn.take());
                Ok(())
            }
            Err(error) => Err(self.fail(group, error).to_string().into()),
        }
    }

    /// Rolls the whole group back (its connection is closed with the
    /// transaction open) and tells every waiting member why.
    fn fail(&self, mut group: Group, error: StoreError) -> StoreError {
        tracing::warn!(%error, members = group.members, "a SQLite commit group is rolled back");
        let reason: Arc<str> = format!("the group commit failed: {error}").into();
        for member in group.waiting.drain(..) {
            let _ = member.send(Err(reason.clone()));
        }
        // `Group::drop` closes the connection and counts the rollback.
        drop(group);
        error
    }
}

/// Counts a writer out of [`WriteGate::waiters`] when dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One open outer transaction and the members that wait for its COMMIT.
struct Group {
    id: u64,
    /// `Some` until the group commits; a group dropped with its connection
    /// still here was not committed, and takes it out of the pool.
    conn: Option<DbConn>,
    opened: Instant,
    /// Members so far, the current one included.
    members: usize,
    /// The members that are done and wait for the outcome.
    waiting: Vec<oneshot::Sender<Outcome>>,
    /// Whether a timer commits this group when its wait is over.
    expires: bool,
    /// Reports a group dropped uncommitted.
    rolled_back: fn(),
}

impl Group {
    fn conn(&mut self) -> &mut DbConn {
        match &mut self.conn {
            Some(conn) => conn,
            // Only `WriteGate::commit` takes the connection, and it consumes
            // the group.
            None => unreachable!("an uncommitted SQLite group has its connection"),
        }
    }
}

impl Drop for Group {
    /// An uncommitted group (rolled back, or dropped by a panic or a
    /// cancelled future) closes its connection instead of returning it: the
    /// pool would hand it out again only after its next recycle, holding
    /// SQLite's write lock until then. Closing it rolls the transaction back
    /// at once; the waiting members' senders drop with the group, so each
    /// hears an error.
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            (self.rolled_back)();
            conn.discard();
        }
    }
}

/// A transaction that is a savepoint in a shared SQLite transaction. It
/// holds the write gate until it ends.
pub(super) struct Member {
    /// Dropped before the gate: a member dropped mid-transaction closes the
    /// group's connection before the next writer may begin.
    group: Group,
    /// The member's statements run inline, its savepoint's RELEASE
    /// included; the group's COMMIT does not.
    inline: InlineStatements,
    _gate: OwnedMutexGuard<()>,
    write_gate: Arc<WriteGate>,
}

impl Member {
    pub(super) fn conn(&mut self) -> &mut DbConn {
        self.group.conn()
    }

    /// Keeps (`keep`) or undoes this member's writes, and returns once the
    /// group's COMMIT made them durable. A member that undid its writes
    /// waits for the COMMIT too, and fails if it failed: what it read may
    /// have been an earlier member's uncommitted write.
    pub(super) async fn end(self, keep: bool) -> Result<(), StoreError> {
        let Member {
            mut group,
            inline,
            _gate: gate,
            write_gate,
        } = self;
        let ended = if keep {
            crate::with_conn!(group.conn(), |c| release_savepoint(c).await)
        } else {
            crate::with_conn!(group.conn(), |c| undo_savepoint(c).await)
        };
        drop(inline);
        if let Err(error) = ended {
            return Err(write_gate.fail(group, error));
        }
        write_gate
            .settle(group, gate)
            .await
            .map_err(|reason| StoreError::Unavailable(reason.to_string()))
    }
}

/// Fails unless `c`'s transaction is `depth` deep (1: the group's outer
/// transaction, 2: inside a member's savepoint). diesel's depth is reset
/// when a failing statement finds that SQLite ended the transaction by
/// itself (SQLITE_FULL, an I/O error), so this is also that check.
fn at_depth<C: AsyncConnection>(c: &mut C, depth: u32) -> Result<(), StoreError> {
    let status = C::TransactionManager::transaction_manager_status_mut(c);
    match status.transaction_depth()? {
        Some(d) if d.get() == depth => Ok(()),
        other => Err(StoreError::Unavailable(format!(
            "the SQLite group's transaction is at depth {}, not {depth}",
            other.map_or(0, |d| d.get())
        ))),
    }
}

/// `SAVEPOINT diesel_savepoint_1`: diesel's `begin_transaction` at depth 1.
async fn open_savepoint<C: AsyncConnection>(c: &mut C) -> Result<(), StoreError> {
    at_depth(c, 1)?;
    begin(c).await?;
    Ok(())
}

/// `RELEASE SAVEPOINT diesel_savepoint_1`: diesel's `commit_transaction` at
/// depth 2. A savepoint released means SQLite still had the outer
/// transaction: it drops every savepoint when it rolls a transaction back.
async fn release_savepoint<C: AsyncConnection>(c: &mut C) -> Result<(), StoreError> {
    at_depth(c, 2)?;
    C::TransactionManager::commit_transaction(c).await?;
    at_depth(c, 1)
}

/// diesel's `rollback_transaction` at depth 2 is `ROLLBACK TO SAVEPOINT`
/// alone, which leaves the savepoint on SQLite's stack (diesel 2.3,
/// `AnsiTransactionManager::rollback_transaction`); the RELEASE after it
/// removes it, so that every member's savepoint starts from the group level.
async fn undo_savepoint<C: AsyncConnection>(c: &mut C) -> Result<(), StoreError> {
    at_depth(c, 2)?;
    C::TransactionManager::rollback_transaction(c).await?;
    at_depth(c, 1)?;
    c.batch_execute(&format!("RELEASE SAVEPOINT {MEMBER_SAVEPOINT}"))
        .await?;
    Ok(())
}
