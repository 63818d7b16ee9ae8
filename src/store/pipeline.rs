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
//! - the completion of a claim made in the same transaction, with `COMMIT`
//!   ([`Transaction::complete_claim_in_flight`]), but only on a connection
//!   that has already prepared the completion's statement. A statement that
//!   is not yet in the connection's cache is sent as `Parse`, answered, and
//!   only then executed, while `COMMIT` (a simple query) goes out at once:
//!   a first cut that flew regardless ran the completion after `COMMIT` on
//!   fresh connections, in a transaction of its own, and a crash between
//!   the two left the effects committed without the completion (the crash
//!   suite's PostgreSQL restart caught it as a doubled ledger row). The
//!   connection's `statement_ledger` now says whether the completion is
//!   prepared; where it is not, the two go one after the other. `BEGIN`
//!   first is safe for the same reason: it needs no `Parse`, so nothing
//!   can overtake it.
//!
//! SQLite has no round trips to save: the same calls run the statements one
//! after another there, through the write gate as always.

use super::deliveries::{self, NewClaim, StoredResponse};
use super::{DbConn, Inner, PgConn, Store, StoreError, Transaction, statement_ledger};
use chrono::NaiveDateTime;
use diesel::connection::TransactionDepthChange;
use diesel_async::{
    AnsiTransactionManager, RunQueryDsl, SimpleAsyncConnection, TransactionManager,
};
use std::task::Poll;

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
        deliveries::claim_insert(claim).execute(&mut conn).await
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

impl Transaction {
    /// Completes the claim that this transaction inserted or took over
    /// (fenced by `lease_owner`, as [`DbConn::complete_delivery`]) and
    /// commits, on PostgreSQL in one flight; `committed` runs once both
    /// succeeded, before the connection goes back (as in
    /// [`Transaction::commit_then`]). `Err(self)` where the two cannot
    /// travel together — SQLite, or a connection that has not yet prepared
    /// this completion (see the module's doc) — for the caller to complete
    /// and commit one after the other.
    ///
    /// Only for a claim written by this very transaction: its row is then
    /// locked by it and carries `lease_owner`, so the completion cannot miss
    /// it. `COMMIT` goes out before the completion's row count is known, so
    /// a completion that missed would commit the effects without it.
    pub async fn complete_claim_in_flight(
        mut self,
        endpoint: &str,
        delivery_id: &str,
        lease_owner: &str,
        response: &StoredResponse,
        now: NaiveDateTime,
        committed: impl FnOnce(),
    ) -> Result<Result<(), StoreError>, Transaction> {
        let Inner::Alone {
            conn: DbConn::Pg(pg),
            ..
        } = &mut self.0
        else {
            return Err(self);
        };
        let completion =
            deliveries::completion_update(endpoint, delivery_id, lease_owner, response, now);
        let prepared = completion
            .sql::<diesel::pg::Pg>()
            .is_ok_and(|sql| statement_ledger::has_prepared(pg, sql));
        if !prepared {
            return Err(self);
        }
        let done = complete_and_commit(pg, completion).await;
        if done.is_ok() {
            committed();
        }
        Ok(done)
    }
}

/// The completion and `COMMIT` in one flight, the completion prepared.
async fn complete_and_commit<Q>(c: &mut PgConn, completion: Q) -> Result<(), StoreError>
where
    Q: diesel::query_builder::QueryFragment<diesel::pg::Pg> + diesel::query_builder::QueryId + Send,
{
    let (completed, commit) = fly_completion_then_commit(c, completion).await;
    match (completed, commit) {
        (Ok(1), Some(Ok(()))) => {
            change_depth(c, TransactionDepthChange::DecreaseDepth)?;
            Ok(())
        }
        (Ok(1), None) => Ok(AnsiTransactionManager::commit_transaction(c).await?),
        (Ok(_), Some(Ok(()))) => {
            // The caller's contract says this cannot happen; if it did, the
            // effects are committed and the claim is not completed.
            change_depth(c, TransactionDepthChange::DecreaseDepth)?;
            tracing::error!("a claim made in this transaction was not there to complete");
            Err(claim_missing())
        }
        (completed, commit) => {
            // Ends the transaction if the COMMIT did not (PostgreSQL warns,
            // and no more, when there is none); if even that fails, the
            // manager marks the connection broken and the pool drops it.
            let _ = AnsiTransactionManager::rollback_transaction(c).await;
            Err(match (completed, commit) {
                (Err(e), _) | (_, Some(Err(e))) => StoreError::from(e),
                _ => claim_missing(),
            })
        }
    }
}

/// A completion whose claim row was not there, against the caller's
/// contract.
fn claim_missing() -> StoreError {
    StoreError::Unavailable("the claim was not there to complete".into())
}

/// The flight itself: the completion's row count, and the `COMMIT`'s
/// outcome if it was sent.
async fn fly_completion_then_commit<Q>(
    c: &PgConn,
    completion: Q,
) -> (diesel::QueryResult<usize>, Option<diesel::QueryResult<()>>)
where
    Q: diesel::query_builder::QueryFragment<diesel::pg::Pg> + diesel::query_builder::QueryId + Send,
{
    let complete = async {
        let mut conn = c;
        completion.execute(&mut conn).await
    };
    // A prepared statement queues its execution on its first poll, unless a
    // tokio primitive on the way (the statement cache's lock) defers it
    // because the task has spent its cooperative budget: unconstrained, the
    // first poll queues it, since nothing else holds this connection.
    let mut complete = std::pin::pin!(tokio::task::coop::unconstrained(complete));
    let first = futures_util::poll!(complete.as_mut());
    match first {
        // Failed (or, impossibly, done) before anything was sent: no COMMIT
        // has gone out.
        Poll::Ready(completed) => (completed, None),
        // Queued: `COMMIT` goes behind it. Should the completion fail, the
        // transaction is aborted and PostgreSQL answers the `COMMIT` with a
        // rollback.
        Poll::Pending => {
            let commit = async {
                let mut conn = c;
                conn.batch_execute("COMMIT").await
            };
            let (completed, commit) = futures_util::future::join(complete, commit).await;
            (completed, Some(commit))
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
