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
//! - the handlers' statements ([`Flight`]), and since 2026-12-04 in the
//!   same flight as `BEGIN` and the claim, right behind them
//!   ([`Store::begin_claim_and_fly`]), where the claim's statement is
//!   prepared so that nothing can overtake it. They run before the claim's
//!   answer is known; a claim that lost has its transaction rolled back,
//!   so their writes never stay. A fresh delivery then waits twice.
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
use futures_util::future::LocalBoxFuture;
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
        let (tx, inserted, _) = self
            .begin_claim_and_fly(conn, claim, None::<&NothingAfter>)
            .await?;
        Ok((tx, inserted))
    }
}

/// Statements that may travel right behind a claim, before its answer is
/// known (see [`Store::begin_claim_and_fly`]).
pub trait AfterClaim {
    /// What the statements' futures give once they have landed.
    type Landed;

    /// The statements' future on `flight`, or `None` to send nothing.
    fn fly<'f>(&'f self, flight: Flight<'f>) -> Option<LocalBoxFuture<'f, Self::Landed>>;
}

/// No statements behind a claim: [`Store::begin_claim`].
enum NothingAfter {}

impl AfterClaim for NothingAfter {
    type Landed = std::convert::Infallible;

    fn fly<'f>(&'f self, _: Flight<'f>) -> Option<LocalBoxFuture<'f, Self::Landed>> {
        match *self {}
    }
}

impl Store {
    /// [`Store::begin_claim`], with `after`'s statements sent in the same
    /// flight, right behind the claim, on PostgreSQL: `BEGIN`, the claim and
    /// an operation's writes then cost one round trip instead of two. What
    /// they gave comes with a claim that this call won (`None`: they did
    /// not fly, and nothing was sent).
    ///
    /// They run before anyone knows whether the claim won. Where it did
    /// not, the transaction is rolled back, so none of their writes stay and
    /// the locks they took are let go, and the key is claimed again in a
    /// new transaction with nothing behind it: the caller gets that one, as
    /// from [`Store::begin_claim`], to find out what the row means.
    ///
    /// They fly only where the claim is sure to reach the server first:
    /// when this connection has prepared the claim's statement for good
    /// (an unprepared one waits for its `Parse` to be answered, and a
    /// statement sent beside it would overtake it, taking row locks before
    /// the claim that the claim's owner may then wait for) and the claim's
    /// execution was queued on its first poll. Otherwise nothing is sent
    /// behind it and the caller runs its statements after the claim, as
    /// before. SQLite sends nothing ahead: it has no round trips to save.
    pub async fn begin_claim_and_fly<A: AfterClaim + ?Sized>(
        &self,
        conn: DbConn,
        claim: &NewClaim<'_>,
        after: Option<&A>,
    ) -> Result<(Transaction, bool, Option<A::Landed>), StoreError> {
        let mut pg = match conn {
            DbConn::Pg(pg) => pg,
            sqlite => {
                let (tx, inserted) = self.begin_on(sqlite).await?.insert_claim(claim).await?;
                return Ok((tx, inserted, None));
            }
        };
        let (inserted, landed) = begin_and_insert(&mut pg, claim, after).await?;
        if !inserted && landed.is_some() {
            // What flew is dropped with the transaction. Should the
            // ROLLBACK fail, the manager marks the connection broken and the
            // pool discards it.
            let c: &mut PgConn = &mut pg;
            AnsiTransactionManager::rollback_transaction(c).await?;
            let (inserted, _) = begin_and_insert(&mut pg, claim, None::<&NothingAfter>).await?;
            return Ok((Transaction::on(DbConn::Pg(pg)), inserted, None));
        }
        Ok((Transaction::on(DbConn::Pg(pg)), inserted, landed))
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

/// `BEGIN`, the claim's insert and, where they can go safely (see
/// [`Store::begin_claim_and_fly`]), `after`'s statements, in one flight:
/// whether the claim inserted its row, and what `after`'s future gave.
async fn begin_and_insert<A: AfterClaim + ?Sized>(
    c: &mut PgConn,
    claim: &NewClaim<'_>,
    after: Option<&A>,
) -> Result<(bool, Option<A::Landed>), StoreError> {
    let insert = deliveries::claim_insert(claim);
    // Asked only where something would fly: the ledger's lookup hashes the
    // statement's text.
    let after = after.filter(|_| {
        insert
            .sql::<diesel::pg::Pg>()
            .is_ok_and(|sql| statement_ledger::has_prepared(c, sql))
    });
    // Counted as open before `BEGIN` is sent: should this future be dropped
    // mid-flight, the pool sees a connection inside a transaction and
    // discards it, rather than lend it out with a `BEGIN` still pending.
    change_depth(c, TransactionDepthChange::IncreaseDepth)?;
    let (begun, inserted, landed) = fly_begin_and_insert(c, insert, after).await;
    match (begun, inserted) {
        (Some(Ok(())), Some(Ok(n))) => Ok((n == 1, landed)),
        (begun, inserted) => {
            // ROLLBACK through the manager ends the transaction whether or
            // not `BEGIN` got through; if even that fails, the manager marks
            // the connection broken and the pool drops it.
            let _ = AnsiTransactionManager::rollback_transaction(c).await;
            Err(begun
                .and_then(Result::err)
                .or(inserted.and_then(Result::err))
                .map_or_else(
                    || StoreError::Unavailable("the claim's flight failed".into()),
                    StoreError::from,
                ))
        }
    }
}

/// The flight of [`begin_and_insert`]: `BEGIN`'s and the insert's
/// outcomes (`None`: not run), and what `after`'s future gave if it flew
/// (`after`: statements whose claim this connection has prepared).
async fn fly_begin_and_insert<A, Q>(
    shared: &PgConn,
    insert: Q,
    after: Option<&A>,
) -> (
    Option<diesel::QueryResult<()>>,
    Option<diesel::QueryResult<usize>>,
    Option<A::Landed>,
)
where
    A: AfterClaim + ?Sized,
    Q: diesel::query_builder::QueryFragment<diesel::pg::Pg> + diesel::query_builder::QueryId + Send,
{
    // Each future sends its request on its first poll; unconstrained, no
    // tokio primitive on the way (the statement cache's lock) can put that
    // off because the task has spent its cooperative budget.
    let begin = tokio::task::coop::unconstrained(async {
        let mut conn = shared;
        conn.batch_execute("BEGIN").await
    });
    let insert = tokio::task::coop::unconstrained(async {
        let mut conn = shared;
        insert.execute(&mut conn).await
    });
    let mut begin = std::pin::pin!(futures_util::future::maybe_done(begin));
    let mut insert = std::pin::pin!(futures_util::future::maybe_done(insert));
    // Pending on their first polls, `BEGIN` and the prepared statement's
    // execution are queued, in that order: what is sent from now on reaches
    // the server after them. Done at once, each was sent and answered
    // already (this thread may have been descheduled in between, while the
    // connection's task on another ran the round trip), which is as good,
    // or failed: then nothing may follow it (without `BEGIN`, each
    // statement would commit on its own), and neither does it where the
    // claim is known to have lost.
    let _ = futures_util::poll!(begin.as_mut());
    let begun = begin.as_mut().output_mut().is_none_or(|r| r.is_ok());
    let queued = begun && {
        let _ = futures_util::poll!(insert.as_mut());
        insert
            .as_mut()
            .output_mut()
            .is_none_or(|r| matches!(r, Ok(1)))
    };
    let flying = after
        .filter(|_| queued)
        .and_then(|after| after.fly(Flight(shared)));
    let landed = match flying {
        Some(flying) => {
            let (_, _, landed) =
                futures_util::future::join3(begin.as_mut(), insert.as_mut(), flying).await;
            Some(landed)
        }
        None => {
            futures_util::future::join(begin.as_mut(), insert.as_mut()).await;
            None
        }
    };
    let begun = begin.as_mut().take_output();
    let inserted = insert.as_mut().take_output();
    (begun, inserted, landed)
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
