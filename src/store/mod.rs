//! The one store with two backends. Only this module knows which backend it
//! talks to: everything above it sees [`Store`], [`DbConn`] and [`Transaction`],
//! and writes each query once inside [`with_conn!`], which pastes it into one
//! arm per backend so that it is compiled for both.

mod deliveries;
mod error;
mod expired;
mod history;
mod listing;
mod migrate;
pub mod outbox;
mod pipeline;
mod pool;
mod prepared;
pub mod queue;
mod replay_cache;
pub mod schema;

use crate::clock::SharedClock;
use diesel_async::pooled_connection::deadpool::{Object, Pool};
use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
use diesel_async::{AsyncConnection, TransactionManager};
use std::sync::Arc;

pub use deliveries::{COMPLETED, Claimed, DeliveryRow, IN_PROGRESS, NewClaim, StoredResponse};
pub use error::StoreError;
pub use expired::{ExpiredKey, ExpiredKind, Expiry, Scopes};
pub use history::HistoryEntry;
pub use listing::{
    DeliveryDetail, DeliveryFilter, DeliverySummary, ERROR_KINDS, PagePosition, StatusCount,
};
pub use pipeline::Flight;
pub use pool::{DatabaseUrl, StoreOptions};
pub use prepared::Prepared;
pub use replay_cache::{CachedCompletion, ReplayCache, ReplayCacheOptions};

/// The embedded backend's connection: diesel's synchronous SQLite connection,
/// each call run on tokio's blocking pool.
pub type SqliteConn = SyncConnectionWrapper<diesel::SqliteConnection>;
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
    Pg(Pool<PgConn>),
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
    /// SQLite has one writer at a time. Writers of this process queue here,
    /// first come first served, instead of polling the file lock through
    /// SQLite's busy handler, whose sleeps (up to 100 ms each) would be
    /// most of a storm's latency. Other processes (the CLI) still meet the
    /// busy handler.
    write_gate: Option<Arc<tokio::sync::Mutex<()>>>,
    acquire_timeout: std::time::Duration,
    clock: SharedClock,
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

    /// A connection outside any transaction, for reads.
    pub async fn conn(&self) -> Result<DbConn, StoreError> {
        Ok(match &self.pools {
            Pools::Sqlite(pool) => DbConn::Sqlite(pool.get().await?),
            Pools::Pg(pool) => DbConn::Pg(Box::new(pool.get().await?)),
        })
    }

    /// Opens a transaction on a pooled connection. The caller must end it with
    /// [`Transaction::commit`] or [`Transaction::rollback`]; a transaction that
    /// is dropped open takes its connection out of the pool (the pool refuses
    /// connections with an open transaction), so the database rolls it back.
    pub async fn begin(&self) -> Result<Transaction, StoreError> {
        // The gate before the connection: a task waiting at the gate then
        // holds no connection that the gate's holder might need.
        let gate = self.enter_write_gate().await?;
        let mut conn = self.conn().await?;
        with_conn!(&mut conn, |c| begin(c).await)?;
        Ok(Transaction { conn, _gate: gate })
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
        Ok(Transaction { conn, _gate: None })
    }

    async fn enter_write_gate(
        &self,
    ) -> Result<Option<tokio::sync::OwnedMutexGuard<()>>, StoreError> {
        let Some(gate) = &self.shared.write_gate else {
            return Ok(None);
        };
        match tokio::time::timeout(self.shared.acquire_timeout, gate.clone().lock_owned()).await {
            Ok(guard) => Ok(Some(guard)),
            Err(_) => Err(StoreError::Unavailable(format!(
                "no SQLite write slot within {:?}",
                self.shared.acquire_timeout
            ))),
        }
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

    /// How many connections the pool holds and how many callers wait for one.
    pub fn pool_status(&self) -> deadpool::Status {
        match &self.pools {
            Pools::Sqlite(pool) => pool.status(),
            Pools::Pg(pool) => pool.status(),
        }
    }
}

async fn begin<C: AsyncConnection>(c: &mut C) -> diesel::QueryResult<()> {
    C::TransactionManager::begin_transaction(c).await
}

async fn commit<C: AsyncConnection>(c: &mut C) -> diesel::QueryResult<()> {
    C::TransactionManager::commit_transaction(c).await
}

async fn rollback<C: AsyncConnection>(c: &mut C) -> diesel::QueryResult<()> {
    C::TransactionManager::rollback_transaction(c).await
}

/// An open database transaction that owns its connection. It is consumed by
/// the call that ends it, so nothing can write through it afterwards.
pub struct Transaction {
    conn: DbConn,
    /// Dropped after `conn`: the write slot is held until the connection is
    /// back in the pool.
    _gate: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl DbConn {
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
        Transaction { conn, _gate: None }
    }

    pub fn conn(&mut self) -> &mut DbConn {
        &mut self.conn
    }

    pub async fn commit(mut self) -> Result<(), StoreError> {
        with_conn!(&mut self.conn, |c| commit(c).await)?;
        Ok(())
    }

    pub async fn rollback(mut self) -> Result<(), StoreError> {
        with_conn!(&mut self.conn, |c| rollback(c).await)?;
        Ok(())
    }
}
