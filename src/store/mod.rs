//! The one store with two backends. Only this module knows which backend it
//! talks to: everything above it sees [`Store`], [`DbConn`] and [`Transaction`],
//! and writes each query once inside [`with_conn!`], which pastes it into one
//! arm per backend so that it is compiled for both.

mod bound_timestamp;
mod claim_batch;
mod claim_batcher;
mod deliveries;
mod effects;
mod error;
mod expired;
mod group_commit;
mod history;
mod lanes;
mod ledger_ids;
mod listing;
mod migrate;
mod one_statement;
pub mod outbox;
mod pipeline;
mod planned_rows;
mod pool;
mod prepared;
pub mod queue;
mod replay_cache;
pub mod schema;
mod sqlite_runtime;
mod statement_ledger;
pub mod traffic;
mod values_list;
mod writer_thread;

use crate::clock::SharedClock;
use diesel_async::pooled_connection::deadpool::{Object, Pool};
use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
use diesel_async::{AsyncConnection, TransactionManager};
use std::sync::Arc;
use std::time::Duration;

pub use bound_timestamp::BoundTimestamp;
pub use claim_batch::BatchMember;
pub use claim_batcher::{Batched, PgGroupCommitOptions};
pub use deliveries::{COMPLETED, Claimed, DeliveryRow, IN_PROGRESS, NewClaim, StoredResponse};
pub use effects::{CreatedPayment, Effects, LedgerEntry, RecordedEvent, RelatedDelivery};
pub use error::StoreError;
pub use expired::{ExpiredKey, ExpiredKind, Expiry, Scopes};
pub use group_commit::{GroupCommitMetrics, GroupCommitOptions};
pub use history::HistoryEntry;
pub use listing::{
    DeliveryDetail, DeliveryFilter, DeliverySummary, ERROR_KINDS, PagePosition, ScannedRow,
    StatusCount,
};
pub use one_statement::{PlannedEvent, PlannedLedgerEntry, PlannedWrite};
pub use pipeline::{AfterClaim, Flight};
pub use planned_rows::event_upsert;
pub use pool::{DatabaseUrl, StoreOptions};
pub use prepared::{FixedStatement, FixedText, Prepared, SqlText, TextSlot};
pub use replay_cache::{CachedCompletion, ReplayCache, ReplayCacheOptions};
use sqlite_runtime::InlineStatements;
pub use sqlite_runtime::{SqliteRuntime, inline_scope};
pub use writer_thread::TaskLost;

/// The embedded backend's connection: diesel's synchronous SQLite connection,
/// each call run on tokio's blocking pool, or inline by the write gate's
/// holder (see `sqlite_runtime`).
pub type SqliteConn = SyncConnectionWrapper<diesel::SqliteConnection, SqliteRuntime>;
/// The PostgreSQL connection (tokio-postgres underneath; no libpq).
pub type PgConn = diesel_async::AsyncPgConnection;

/// A pooled connection of either backend. The PostgreSQL connection is a few
/// hundred bytes and is boxed, so that claims and transactions that carry a
/// connection stay small when they are moved around.
pub enum DbConn {
    Sqlite(Object<SqliteConn>),
    Pg(Box<Object<PgConn>>),
}

/// Runs the same query code against whichever backend `$conn` (a `&mut DbConn`)
/// holds. Inside the body `$c` is `&mut SqliteConn` in one arm and `&mut PgConn`
/// in the other, so the body is written once and type-checked for both.
///
/// ```
/// # async fn demo(conn: &mut idempotent_receiver::store::DbConn) -> diesel::QueryResult<i64> {
/// use diesel::prelude::*;
/// use diesel_async::RunQueryDsl;
/// use idempotent_receiver::store::schema::ledger_entries;
/// idempotent_receiver::with_conn!(conn, |c| {
///     ledger_entries::table.count().get_result::<i64>(c).await
/// })
/// # }
/// ```
#[macro_export]
macro_rules! with_conn {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::store::DbConn::Sqlite($c) => {
                let $c: &mut $crate::store::SqliteConn = &mut *$c;
                $body
            }
            $crate::store::DbConn::Pg($c) => {
                let $c: &mut $crate::store::PgConn = &mut **$c;
                $body
            }
        }
    };
}

#[derive(Clone)]
enum Pools {
    Sqlite(Pool<SqliteConn>),
    /// One lane per HTTP worker and a shared one (see `lanes`).
    Pg(Arc<lanes::Lanes>),
}

/// A handle on the database: a connection pool of one backend. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pools: Pools,
    shared: Arc<Shared>,
}

/// What every clone of a [`Store`] shares besides the pool.
struct Shared {
    url: DatabaseUrl,
    replays: ReplayCache,
    /// SQLite's writers queue here (see [`group_commit::WriteGate`]); none
    /// on PostgreSQL.
    write_gate: Option<Arc<group_commit::WriteGate>>,
    /// Where SQLite's deliveries run; see [`writer_thread`].
    writer: Option<writer_thread::WriterThread>,
    clock: SharedClock,
    /// Ledger ids drawn ahead for deliveries that plan: PostgreSQL's
    /// one-statement deliveries, SQLite's claimed completed.
    ledger_ids: ledger_ids::LedgerIds,
    /// PostgreSQL's group commit: fresh deliveries batched into one
    /// statement (see [`claim_batcher`]); none on SQLite or when off.
    claim_batcher: Option<claim_batcher::ClaimBatcher>,
}

/// Which backend a [`Store`] talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Store {
    pub fn backend(&self) -> Backend {
        match self.pools {
            Pools::Sqlite(_) => Backend::Sqlite,
            Pools::Pg(_) => Backend::Postgres,
        }
    }

    /// Closes the PostgreSQL connections that wait idle in the pool. A
    /// connection's driver task runs on the runtime that opened it: one
    /// opened at start-up, on the main runtime, would make every query of
    /// the request that later borrows it hop to that runtime's threads and
    /// back. Called once start-up is done with the database, so that the
    /// server's workers open their own. SQLite's connections run their
    /// statements on the blocking pool or inline, wherever they were opened.
    /// Returns how many were closed.
    pub fn close_idle(&self) -> usize {
        match &self.pools {
            Pools::Pg(lanes) => lanes.close_idle(),
            Pools::Sqlite(_) => 0,
        }
    }

    /// A connection outside any transaction, for reads.
    pub async fn conn(&self) -> Result<DbConn, StoreError> {
        Ok(match &self.pools {
            Pools::Sqlite(pool) => DbConn::Sqlite(pool.get().await?),
            Pools::Pg(lanes) => DbConn::Pg(Box::new(lanes.get().await?)),
        })
    }

    /// Makes the calling thread, an HTTP worker, take its PostgreSQL
    /// connections from a lane of its own (the one with the fewest live
    /// workers: round robin as they start, and a worker started again
    /// takes the lane its predecessor left), so that every connection it
    /// borrows is driven by its own runtime; see
    /// [`StoreOptions::worker_lanes`]. Called once on each worker thread as
    /// it starts. Returns the lane, or `None` on SQLite and on a store
    /// without worker lanes.
    pub fn join_worker_lane(&self) -> Option<usize> {
        match &self.pools {
            Pools::Pg(lanes) => lanes.join(),
            Pools::Sqlite(_) => None,
        }
    }

    /// The lane the calling thread takes its connections from: 0, the
    /// shared lane, unless it joined a worker lane.
    pub fn lane(&self) -> usize {
        match &self.pools {
            Pools::Pg(lanes) => lanes.home(),
            Pools::Sqlite(_) => 0,
        }
    }

    /// Opens a transaction on a pooled connection. The caller must end it with
    /// [`Transaction::commit`] or [`Transaction::rollback`]; a transaction that
    /// is dropped open takes its connection out of the pool (the pool refuses
    /// connections with an open transaction), so the database rolls it back.
    ///
    /// On SQLite with group commit (the default) the transaction is a
    /// savepoint in a transaction shared with the writers queued with it;
    /// see [`GroupCommitOptions`].
    pub async fn begin(&self) -> Result<Transaction, StoreError> {
        let (Pools::Sqlite(pool), Some(write_gate)) = (&self.pools, &self.shared.write_gate) else {
            let mut conn = self.conn().await?;
            with_conn!(&mut conn, |c| begin(c).await)?;
            return Ok(Transaction::on(conn));
        };
        // The gate before the connection: a task waiting at the gate then
        // holds no connection that the gate's holder might need.
        let gate = write_gate.enter().await?;
        if write_gate.groups() {
            let member = write_gate.join(gate, pool).await?;
            return Ok(Transaction(Inner::Member(member)));
        }
        let mut conn = pool.get().await?;
        begin_immediate(&mut conn, write_gate.busy_timeout()).await?;
        Ok(Transaction(Inner::Alone {
            conn: DbConn::Sqlite(conn),
            inline: Some(InlineStatements::on()),
            _gate: Some(gate),
        }))
    }

    /// Opens a transaction on `conn`, a connection already checked out for
    /// a read, so that a read and the transaction after it cost one pool
    /// checkout. On SQLite the connection goes back first: the write gate
    /// is taken with no connection held.
    pub async fn begin_on(&self, mut conn: DbConn) -> Result<Transaction, StoreError> {
        if self.shared.write_gate.is_some() {
            drop(conn);
            return self.begin().await;
        }
        with_conn!(&mut conn, |c| begin(c).await)?;
        Ok(Transaction::on(conn))
    }

    /// Runs the future `make` builds, a delivery's claim and transaction,
    /// as a task of its own that runs to its end even if the caller goes
    /// away: on SQLite on the store's writer thread (see [`writer_thread`]),
    /// on PostgreSQL on the calling thread, which must be inside a
    /// `LocalSet` (every actix-web worker is).
    pub async fn run_delivery<F, Fut, T>(&self, make: F) -> Result<T, TaskLost>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = T> + 'static,
        T: Send + 'static,
    {
        match &self.shared.writer {
            Some(writer) => writer.run(make).await,
            None => tokio::task::spawn_local(make()).await.map_err(|_| TaskLost),
        }
    }

    /// How many writers wait for SQLite's write gate at this instant (0 on
    /// PostgreSQL, which has none): what a member that is done looks at to
    /// decide whether to leave its group open for them.
    pub fn write_gate_waiters(&self) -> usize {
        self.shared
            .write_gate
            .as_ref()
            .map_or(0, |gate| gate.waiters())
    }

    /// Whether the holder of SQLite's write gate is lingering for another
    /// writer before it commits (`sqlite_group_commit_linger`); never on
    /// PostgreSQL.
    pub fn write_gate_lingering(&self) -> bool {
        self.shared
            .write_gate
            .as_ref()
            .is_some_and(|gate| gate.lingering())
    }

    /// The one source of "now" for everything built on this store: leases,
    /// retention, the replay cache and the timestamps written to rows.
    pub fn clock(&self) -> &SharedClock {
        &self.shared.clock
    }

    /// Completed keys this process has read, to answer repeats from memory.
    pub fn replay_cache(&self) -> &ReplayCache {
        &self.shared.replays
    }

    /// A ledger id for a write planned before its statement (see
    /// `one_statement`), drawn ahead from the sequence on `conn` when none
    /// is left. PostgreSQL only; SQLite's: [`Store::take_ledger_id`].
    pub async fn draw_ledger_id(&self, conn: &mut DbConn) -> Result<i64, StoreError> {
        self.shared.ledger_ids.take(conn).await
    }

    /// A ledger id for a write planned before its statement, on SQLite: a
    /// spare, or one of a hundred reserved in a transaction of their own
    /// (see `ledger_ids`), durable before any is used. A rolled-back
    /// reservation adds none.
    pub async fn take_ledger_id(&self) -> Result<i64, StoreError> {
        self.shared
            .ledger_ids
            .take_or_draw(|| async {
                let mut tx = self.begin().await?;
                match tx.conn().reserve_ledger_ids().await {
                    Ok(reserved) => {
                        tx.commit().await?;
                        Ok(reserved)
                    }
                    Err(e) => {
                        let _ = tx.rollback().await;
                        Err(e)
                    }
                }
            })
            .await
    }

    /// PostgreSQL's batches of fresh deliveries, where they are on.
    fn claim_batcher(&self) -> Option<&claim_batcher::ClaimBatcher> {
        self.shared.claim_batcher.as_ref()
    }

    /// Whether fresh deliveries that plan go in batches
    /// ([`Store::claim_completed_batched`]).
    pub fn batches_claims(&self) -> bool {
        self.claim_batcher().is_some()
    }

    /// A ledger id drawn ahead and not used yet, if there is one.
    pub fn spare_ledger_id(&self) -> Option<i64> {
        self.shared.ledger_ids.spare()
    }

    /// Gives back a ledger id drawn for a statement that did not write it.
    pub fn return_ledger_id(&self, id: i64) {
        self.shared.ledger_ids.give_back(id)
    }

    /// How many connections the pool holds and how many callers wait for
    /// one, all lanes together.
    pub fn pool_status(&self) -> deadpool::Status {
        match &self.pools {
            Pools::Sqlite(pool) => pool.status(),
            Pools::Pg(lanes) => lanes.status(),
        }
    }

    /// [`Store::pool_status`] for each lane, the shared lane first; one
    /// entry when the pool is not split (SQLite always).
    pub fn lane_status(&self) -> Vec<deadpool::Status> {
        match &self.pools {
            Pools::Sqlite(pool) => vec![pool.status()],
            Pools::Pg(lanes) => lanes.each_status(),
        }
    }
}

async fn begin<C: AsyncConnection>(c: &mut C) -> diesel::QueryResult<()> {
    C::TransactionManager::begin_transaction(c).await
}

/// `BEGIN IMMEDIATE`: takes SQLite's write lock, waiting up to
/// `busy_timeout` while another process (the CLI, a backup) holds it.
///
/// It is tried first on the task's own thread with SQLite's busy handler
/// off, which answers at once: the lock is free, or `database is locked`.
/// Only then does it go to the blocking pool to wait with the handler on.
/// The write gate's holder opens every group this way, and the hand-off to
/// a blocking thread and back cost a group about 120 µs on average (39 µs
/// at the median, the tail when both cores were busy) against about 15 µs
/// for the statements themselves, while every writer behind it waited.
/// Once it holds the lock, the statements after it, run inline, never wait
/// for one.
async fn begin_immediate(c: &mut SqliteConn, busy_timeout: Duration) -> diesel::QueryResult<()> {
    let restore = pool::busy_timeout_pragma(busy_timeout);
    let at_once = {
        let _inline = InlineStatements::on();
        c.spawn_blocking(move |c| {
            use diesel::connection::SimpleConnection;
            c.batch_execute(&pool::busy_timeout_pragma(Duration::ZERO))?;
            let began = begin_immediate_sql(c);
            // Restored however the BEGIN went: every later statement on the
            // connection waits for the lock as configured.
            c.batch_execute(&restore)?;
            began
        })
        .await
    };
    match at_once {
        Err(error) if error::sqlite_locked(&error) => c.spawn_blocking(begin_immediate_sql).await,
        other => other,
    }
}

fn begin_immediate_sql(c: &mut diesel::SqliteConnection) -> diesel::QueryResult<()> {
    diesel::connection::AnsiTransactionManager::begin_transaction_sql(c, "BEGIN IMMEDIATE")
}

async fn commit<C: AsyncConnection>(c: &mut C) -> diesel::QueryResult<()> {
    C::TransactionManager::commit_transaction(c).await
}

async fn rollback<C: AsyncConnection>(c: &mut C) -> diesel::QueryResult<()> {
    C::TransactionManager::rollback_transaction(c).await
}

/// An open database transaction that owns its connection. It is consumed by
/// the call that ends it, so nothing can write through it afterwards.
pub struct Transaction(Inner);

enum Inner {
    /// A transaction of its own: PostgreSQL, or SQLite without group commit.
    Alone {
        conn: DbConn,
        /// SQLite: the statements run inline until the COMMIT.
        inline: Option<InlineStatements>,
        /// Dropped after `conn`: the write slot is held until the connection
        /// is back in the pool.
        _gate: Option<tokio::sync::OwnedMutexGuard<()>>,
    },
    /// A savepoint in a SQLite transaction shared with other writers.
    Member(group_commit::Member),
}

impl DbConn {
    /// Closes the connection instead of giving it back to the pool: one in
    /// a state the pool cannot see (a transaction left open, a statement
    /// whose answer was lost) is not handed out again.
    pub(super) fn discard(self) {
        match self {
            DbConn::Sqlite(conn) => drop(Object::take(conn)),
            DbConn::Pg(conn) => drop(Object::take(*conn)),
        }
    }

    /// `NOTIFY channel` on PostgreSQL, delivered to every `LISTEN`ing
    /// instance when the transaction (if any) commits; nothing on SQLite,
    /// whose one process wakes its own tasks.
    pub async fn notify(&mut self, channel: &str) -> Result<(), StoreError> {
        use diesel_async::RunQueryDsl;
        if let DbConn::Pg(c) = self {
            let c: &mut PgConn = c;
            diesel::sql_query(format!("NOTIFY {channel}"))
                .execute(c)
                .await?;
        }
        Ok(())
    }
}

impl Transaction {
    /// A transaction already begun on `conn`, outside the write gate
    /// (PostgreSQL has none).
    fn on(conn: DbConn) -> Transaction {
        Transaction(Inner::Alone {
            conn,
            inline: None,
            _gate: None,
        })
    }

    pub fn conn(&mut self) -> &mut DbConn {
        match &mut self.0 {
            Inner::Alone { conn, .. } => conn,
            Inner::Member(member) => member.conn(),
        }
    }

    /// Makes the transaction's writes durable. On SQLite with group commit
    /// it returns once the shared COMMIT succeeded; if that fails, nothing of
    /// this transaction was kept.
    pub async fn commit(self) -> Result<(), StoreError> {
        self.end(true, || {}).await
    }

    /// [`Transaction::commit`], running `committed` once the COMMIT
    /// succeeded and before the connection goes back to the pool (or the
    /// write gate goes): whoever gets them next sees what it did, such as
    /// the completion put in the replay cache.
    pub async fn commit_then(self, committed: impl FnOnce()) -> Result<(), StoreError> {
        self.end(true, committed).await
    }

    /// Undoes the transaction's writes. On SQLite with group commit it
    /// returns once the shared transaction's outcome is known, and fails if
    /// that did not commit: what this transaction read may have been an
    /// earlier member's write, which is then gone.
    pub async fn rollback(self) -> Result<(), StoreError> {
        self.end(false, || {}).await
    }

    async fn end(self, keep: bool, committed: impl FnOnce()) -> Result<(), StoreError> {
        match self.0 {
            Inner::Alone {
                mut conn,
                inline,
                _gate: gate,
            } => {
                // The COMMIT syncs the file: on the blocking pool.
                drop(inline);
                let ended = if keep {
                    with_conn!(&mut conn, |c| commit(c).await)
                } else {
                    with_conn!(&mut conn, |c| rollback(c).await)
                };
                if keep && ended.is_ok() {
                    committed();
                }
                // The write slot is held until the connection is back.
                drop(conn);
                drop(gate);
                Ok(ended?)
            }
            Inner::Member(member) => {
                member.end(keep).await?;
                if keep {
                    committed();
                }
                Ok(())
            }
        }
    }
}
