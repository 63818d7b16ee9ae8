//! Fewer round trips on the fresh path, on PostgreSQL.
//!
//! A fresh delivery used to wait for the server seven times: a lookup, then
//! `BEGIN`, the claim, each handler's statement, the completion and
//! `COMMIT`. With sixteen deliveries in flight on two cores, each of those
//! waits is a wake-up of a backend and of the receiver, and PostgreSQL's
//! CPU, not its disk, was what ran out. The lookup is gone (the engine
//! claims first), and two groups need no answer in between, so each travels
//! in one flight through tokio-postgres's pipelining (futures on a shared
//! reference to the connection, polled together):
//!
//! - `BEGIN` and the claim ([`Store::begin_claim`]). Diesel's transaction
//!   manager is told of the `BEGIN` it did not send, so that a handler's
//!   nested `transaction()` still becomes a savepoint and the pool still
//!   discards a connection left inside a transaction.
//! - the handlers' statements ([`Flight`]).
//!
//! Not the completion with `COMMIT`: a statement that is not yet in the
//! connection's cache is sent as `Parse`, answered, and only then executed,
//! while `COMMIT` (a simple query) goes out at once — so on a fresh
//! connection the completion ran after `COMMIT`, in a transaction of its
//! own, and a crash between the two left the effects committed without the
//! completion. The crash suite's PostgreSQL restart caught it as a doubled
//! ledger row; `BEGIN` first is safe for the same reason (it needs no
//! `Parse`, so nothing can overtake it).
//!
//! SQLite has no round trips to save: the same calls run the statements one
//! after another there, through the write gate as always.

use super::deliveries::{self, NewClaim};
use super::{DbConn, PgConn, Prepared, Store, StoreError, Transaction};
use diesel::connection::TransactionDepthChange;
use diesel_async::{
    AnsiTransactionManager, RunQueryDsl, SimpleAsyncConnection, TransactionManager,
};

impl Store {
    /// Opens a transaction on `conn` and inserts `claim` in it (`INSERT ...
    /// ON CONFLICT DO NOTHING`): true when this call created the row. On
    /// PostgreSQL `BEGIN` and the insert travel together. An error rolls the
    /// transaction back before it is returned.
    pub async fn begin_claim(
        &self,
        conn: DbConn,
        claim: &NewClaim<'_>,
    ) -> Result<(Transaction, bool), StoreError> {
        match conn {
            DbConn::Pg(mut pg) => {
                let inserted = begin_and_insert(&mut pg, claim).await?;
                Ok((Transaction::on(DbConn::Pg(pg)), inserted))
            }
            sqlite => self.begin_on(sqlite).await?.insert_claim(claim).await,
        }
    }
}

impl Transaction {
    /// Inserts `claim` in this open transaction (`INSERT ... ON CONFLICT DO
    /// NOTHING`): true when it created the row. An error rolls the
    /// transaction back before it is returned.
    pub async fn insert_claim(
        mut self,
        claim: &NewClaim<'_>,
    ) -> Result<(Transaction, bool), StoreError> {
        match self.conn().insert_claim(claim).await {
            Ok(inserted) => Ok((self, inserted)),
            Err(e) => {
                if let Err(error) = self.rollback().await {
                    tracing::warn!(%error, "rollback failed; the connection is discarded");
                }
                Err(e)
            }
        }
    }
}

/// `BEGIN` and the claim's insert in one flight.
async fn begin_and_insert(c: &mut PgConn, claim: &NewClaim<'_>) -> Result<bool, StoreError> {
    // Counted as open before `BEGIN` is sent: should this future be dropped
    // mid-flight, the pool sees a connection inside a transaction and
    // discards it, rather than lend it out with a `BEGIN` still pending.
    change_depth(c, TransactionDepthChange::IncreaseDepth)?;
    let shared: &PgConn = c;
    let begin = async {
        let mut conn = shared;
        conn.batch_execute("BEGIN").await
    };
    let insert = async {
        let mut conn = shared;
        Prepared(deliveries::claim_insert(claim))
            .execute(&mut conn)
            .await
    };
    // `join` polls `begin` first, so `BEGIN` is queued before the insert.
    let (begun, inserted) = futures_util::future::join(begin, insert).await;
    match (begun, inserted) {
        (Ok(()), Ok(n)) => Ok(n == 1),
        (begun, inserted) => {
            // ROLLBACK through the manager ends the transaction whether or
            // not `BEGIN` got through; if even that fails, the manager marks
            // the connection broken and the pool drops it.
            let _ = AnsiTransactionManager::rollback_transaction(c).await;
            Err(begun.err().or(inserted.err()).map_or_else(
                || StoreError::Unavailable("the claim's flight failed".into()),
                StoreError::from,
            ))
        }
    }
}

fn change_depth(c: &mut PgConn, change: TransactionDepthChange) -> Result<(), StoreError> {
    <AnsiTransactionManager as TransactionManager<PgConn>>::transaction_manager_status_mut(c)
        .transaction_state()?
        .change_transaction_depth(change)?;
    Ok(())
}

/// A shared handle on a PostgreSQL transaction's connection, through which
/// several statements travel in one flight: each call returns a future, and
/// futures polled together (`join_all`) are sent without waiting for each
/// other. Their order is not guaranteed (a statement not yet prepared on the
/// connection waits for its `Parse` first), so a flight holds independent
/// statements only. A statement that fails aborts the transaction, so the
/// others fail too or are rolled back with it. The built-in handlers write
/// this way (see `Handler::handle_in_flight`).
#[derive(Clone, Copy)]
pub struct Flight<'c>(&'c PgConn);

impl DbConn {
    /// A [`Flight`] on this connection: PostgreSQL only. `None` on SQLite,
    /// where statements cost no round trip and run one at a time.
    pub fn flight(&self) -> Option<Flight<'_>> {
        match self {
            DbConn::Pg(pg) => Some(Flight(pg)),
            DbConn::Sqlite(_) => None,
        }
    }
}

impl<'c> Flight<'c> {
    /// `query`'s row count.
    pub async fn execute<Q>(self, query: Q) -> Result<usize, StoreError>
    where
        Q: diesel_async::methods::ExecuteDsl<&'c PgConn>,
    {
        let mut conn = self.0;
        Ok(query.execute(&mut conn).await?)
    }

    /// `query`'s one row.
    pub async fn get_result<'q, Q, U>(self, query: Q) -> Result<U, StoreError>
    where
        Q: diesel_async::methods::LoadQuery<'q, &'c PgConn, U> + 'q,
        U: Send,
        'c: 'q,
    {
        let mut conn = self.0;
        Ok(query.get_result(&mut conn).await?)
    }
}
