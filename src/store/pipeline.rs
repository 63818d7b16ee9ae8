//! Fewer round trips on the fresh path, on PostgreSQL.
//!
//! A fresh delivery used to wait for the server seven times: a lookup, then
//! `BEGIN`, the claim, each handler's statement, the completion and
//! `COMMIT`. With sixteen deliveries in flight on two cores, each of those
//! waits is a wake-up of a backend and of the receiver, and PostgreSQL's
//! CPU, not its disk, was what ran out. Two pairs need no answer in between:
//! `BEGIN` and the claim, and the completion and `COMMIT`. Each pair is sent
//! in one flight here, through tokio-postgres's pipelining (two futures on a
//! shared reference to the connection, polled together), and diesel's
//! transaction manager is told of the `BEGIN` or `COMMIT` it did not send,
//! so that a handler's nested `transaction()` still becomes a savepoint and
//! the pool still discards a connection left inside a transaction.
//!
//! SQLite has no round trips to save: the same functions run the statements
//! one after another there, through the write gate as always.

use super::deliveries::{self, Completion, IN_PROGRESS, NewClaim, StoredResponse};
use super::{DbConn, PgConn, Prepared, Store, StoreError, Transaction};
use chrono::NaiveDateTime;
use diesel::connection::TransactionDepthChange;
use diesel::prelude::*;
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
        let mut tx = match conn {
            DbConn::Pg(mut pg) => {
                let inserted = begin_and_insert(&mut pg, claim).await?;
                return Ok((Transaction::on(DbConn::Pg(pg)), inserted));
            }
            sqlite => self.begin_on(sqlite).await?,
        };
        match tx.conn().insert_claim(claim).await {
            Ok(inserted) => Ok((tx, inserted)),
            Err(e) => {
                if let Err(error) = tx.rollback().await {
                    tracing::warn!(%error, "rollback failed; the connection is discarded");
                }
                Err(e)
            }
        }
    }
}

impl Transaction {
    /// Completes a claim that THIS transaction inserted or took over, and
    /// commits: true once committed; false when the fence did not match,
    /// and then nothing was committed (SQLite) — see below for PostgreSQL.
    ///
    /// On PostgreSQL the fenced `UPDATE` and `COMMIT` travel together, so
    /// `COMMIT` is sent before the `UPDATE`'s row count is known. That is
    /// only sound because the claim row was written by this transaction:
    /// its row lock keeps every other transaction from changing the owner
    /// until this one ends, so the fence cannot fail. A claim committed
    /// earlier (the two-phase path, reprocessing) must complete through
    /// [`DbConn::complete_delivery`] and [`Transaction::commit`] instead.
    /// Should the impossible happen anyway, the error says so and names the
    /// key; the completion is missing, the effects are not.
    pub async fn commit_own_claim(
        mut self,
        endpoint: &str,
        delivery_id: &str,
        lease_owner: &str,
        response: &StoredResponse,
        now: NaiveDateTime,
    ) -> Result<bool, StoreError> {
        if let DbConn::Pg(pg) = &mut self.conn {
            let updated =
                complete_and_commit(pg, endpoint, delivery_id, lease_owner, response, now).await?;
            if updated != 1 {
                tracing::error!(
                    updated,
                    "a claim written by its own transaction did not match its completion's fence"
                );
                return Err(StoreError::Unavailable(
                    "the completion of a claim did not match its own lease".into(),
                ));
            }
            return Ok(true);
        }
        let completed = self
            .conn()
            .complete_delivery(endpoint, delivery_id, lease_owner, response, now)
            .await;
        match completed {
            Ok(true) => self.commit().await.map(|()| true),
            Ok(false) => {
                self.rollback().await?;
                Ok(false)
            }
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

/// The fenced completion and `COMMIT` in one flight; the completion's row
/// count.
async fn complete_and_commit(
    c: &mut PgConn,
    endpoint: &str,
    delivery_id: &str,
    lease_owner: &str,
    response: &StoredResponse,
    now: NaiveDateTime,
) -> Result<usize, StoreError> {
    use super::schema::deliveries::{self as table, dsl};
    let shared: &PgConn = c;
    let update = async {
        let mut conn = shared;
        Prepared(
            diesel::update(table::table.find((endpoint, delivery_id)))
                .filter(dsl::status.eq(IN_PROGRESS))
                .filter(dsl::lease_owner.eq(lease_owner))
                .set(Completion::of(response, now)),
        )
        .execute(&mut conn)
        .await
    };
    let commit = async {
        let mut conn = shared;
        conn.batch_execute("COMMIT").await
    };
    let (updated, committed) = futures_util::future::join(update, commit).await;
    match committed {
        // The transaction is over either way: committed, or — after a
        // failed UPDATE — rolled back by the server, which answers `COMMIT`
        // in an aborted transaction with a rollback.
        Ok(()) => {
            change_depth(c, TransactionDepthChange::DecreaseDepth)?;
            Ok(updated?)
        }
        // Whether it committed is unknown: the connection is not reused,
        // and the caller answers as for any lost connection.
        Err(e) => {
            <AnsiTransactionManager as TransactionManager<PgConn>>::transaction_manager_status_mut(
                c,
            )
            .set_in_error();
            Err(e.into())
        }
    }
}

fn change_depth(c: &mut PgConn, change: TransactionDepthChange) -> Result<(), StoreError> {
    <AnsiTransactionManager as TransactionManager<PgConn>>::transaction_manager_status_mut(c)
        .transaction_state()?
        .change_transaction_depth(change)?;
    Ok(())
}
