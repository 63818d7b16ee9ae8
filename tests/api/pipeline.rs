//! The fresh path's flights (`store::pipeline`): `BEGIN` with the claim, and
//! the handlers' statements. On PostgreSQL they are pipelined and diesel's
//! transaction manager is told of the `BEGIN` it did not send; on
//! SQLite the same calls run one statement at a time. Either way a claim so
//! begun is a transaction like any other: a handler's nested transaction is
//! a savepoint, a rollback takes the claim away, and a connection is never
//! lent out inside a transaction.

use crate::both_backends;
use crate::helpers::{Backend, TestApp, payment, problem};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection, TransactionManager};
use futures_util::future::LocalBoxFuture;
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use serde_json::Value;

/// What a handler's `conn.transaction(...)` does at its start and on
/// failure, through the connection's own transaction manager.
mod nested {
    use super::*;
    pub async fn begin_transaction<C: AsyncConnection>(c: &mut C) -> diesel::QueryResult<()> {
        C::TransactionManager::begin_transaction(c).await
    }
    pub async fn rollback_transaction<C: AsyncConnection>(c: &mut C) -> diesel::QueryResult<()> {
        C::TransactionManager::rollback_transaction(c).await
    }
}
use futures_util::FutureExt;
use idempotent_receiver::store::schema::{deliveries, ledger_entries};
use idempotent_receiver::store::{
    DatabaseUrl, DbConn, Flight, IN_PROGRESS, NewClaim, Store, StoreOptions, StoredResponse,
};
use idempotent_receiver::with_conn;

fn claim<'a>(id: &'a str, owner: &'a str, now: chrono::NaiveDateTime) -> NewClaim<'a> {
    NewClaim {
        endpoint: "pipeline",
        delivery_id: id,
        request_hash: "hash",
        status: IN_PROGRESS,
        event_type: Some("payment.succeeded"),
        attempts: 1,
        lease_owner: Some(owner),
        lease_expires_at: Some(now + chrono::TimeDelta::seconds(60)),
        received_at: now,
        body_key: None,
        request_body: Some(b"{}"),
    }
}

fn answer() -> StoredResponse {
    StoredResponse {
        status: 200,
        content_type: "application/json".into(),
        body: bytes::Bytes::from_static(b"{\"ok\":true}"),
        location: None,
    }
}

async fn status_of(store: &Store, id: &str) -> Option<String> {
    let mut conn = store.conn().await.expect("a connection");
    with_conn!(&mut conn, |c| {
        deliveries::table
            .filter(deliveries::endpoint.eq("pipeline"))
            .filter(deliveries::delivery_id.eq(id))
            .select(deliveries::status)
            .first::<String>(c)
            .await
            .optional()
    })
    .expect("the status")
}

async fn ledger_rows(store: &Store, id: &str) -> i64 {
    let mut conn = store.conn().await.expect("a connection");
    with_conn!(&mut conn, |c| {
        ledger_entries::table
            .filter(ledger_entries::delivery_id.eq(id))
            .count()
            .get_result::<i64>(c)
            .await
    })
    .expect("the count")
}

both_backends! {
    async fn a_claim_begun_in_one_flight_keeps_nested_transactions_as_savepoints(app) {
        let store = &app.store;
        let now = store.clock().naive_now();
        let id = format!("pipe-{}", uuid::Uuid::new_v4().simple());
        let row = claim(&id, "owner-a", now);

        let conn = store.conn().await.expect("a connection");
        let (mut tx, inserted) = store.begin_claim(conn, &row).await.expect("the claim");
        assert!(inserted, "a new key is inserted");

        // A handler's own transaction inside the claim's, given up: only
        // its write goes. Were the manager unaware of the pipelined BEGIN,
        // this would be a top-level BEGIN/ROLLBACK and take the claim too.
        with_conn!(tx.conn(), |c| {
            async {
                nested::begin_transaction(c).await?;
                diesel::sql_query(format!(
                    "INSERT INTO ledger_entries (endpoint, delivery_id, kind, payment_id, amount, currency, created_at) \
                     VALUES ('pipeline', '{id}', 'charge', 'pay', 1, 'EUR', CURRENT_TIMESTAMP)"
                ))
                .execute(c)
                .await?;
                nested::rollback_transaction(c).await
            }
            .await
        })
        .expect("a savepoint and its rollback");

        assert_eq!(status_of(store, &id).await, None, "uncommitted, invisible elsewhere");
        let mut tx = tx;
        let completed = tx
            .conn()
            .complete_delivery("pipeline", &id, "owner-a", &answer(), now)
            .await
            .expect("the completion");
        assert!(completed);
        tx.commit().await.expect("the commit");
        assert_eq!(status_of(store, &id).await.as_deref(), Some("completed"));
        assert_eq!(ledger_rows(store, &id).await, 0, "the nested write was rolled back alone");

        // The same key again: the claim conflicts and inserts nothing.
        let conn = store.conn().await.expect("a connection");
        let (tx, inserted) = store.begin_claim(conn, &claim(&id, "owner-b", now)).await.expect("the claim");
        assert!(!inserted);
        tx.rollback().await.expect("the rollback");

        // A claim rolled back is gone, and its connection is clean again:
        // a plain statement on the next checkout runs outside a transaction.
        let other = format!("{id}-rolled-back");
        let conn = store.conn().await.expect("a connection");
        let (tx, inserted) = store.begin_claim(conn, &claim(&other, "owner-c", now)).await.expect("the claim");
        assert!(inserted);
        tx.rollback().await.expect("the rollback");
        assert_eq!(status_of(store, &other).await, None);
    }
}

/// A claim's flight abandoned after `BEGIN` was queued (the request was
/// cancelled): the pool must not lend that connection out again inside the
/// abandoned transaction. With one connection in the pool, the next
/// checkout is either a new connection or that one, cleaned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_flight_dropped_midway_never_lends_out_a_connection_inside_a_transaction() {
    let Some(app) =
        crate::helpers::TestApp::spawn_if_available(crate::helpers::Backend::Postgres).await
    else {
        return;
    };
    let url = DatabaseUrl::parse(&app.database_url).expect("the app's URL");
    let store = Store::connect(
        &url,
        &StoreOptions {
            pool_size: 1,
            ..StoreOptions::default()
        },
    )
    .expect("a one-connection store");
    let now = store.clock().naive_now();
    let mut mid_flight = 0;
    for round in 0..20 {
        let id = format!("pipe-dropped-{round}-{}", uuid::Uuid::new_v4().simple());
        let row = claim(&id, "owner", now);
        let conn = store.conn().await.expect("a connection");
        // Polled once (BEGIN and the insert are queued), then dropped.
        let flight = store.begin_claim(conn, &row);
        // On a quiet machine the server may even have answered both by the
        // time of that one poll: then it is the transaction, begun and
        // dropped open, that is abandoned, which must be safe too.
        if flight.now_or_never().is_none() {
            mid_flight += 1;
        }

        let mut conn = store.conn().await.expect("a connection");
        // SAVEPOINT is refused outside a transaction block.
        let savepoint = with_conn!(&mut conn, |c| c.batch_execute("SAVEPOINT probe").await);
        assert!(
            savepoint.is_err(),
            "round {round}: the pool lent out a connection inside the abandoned transaction"
        );
        drop(conn);
        assert_eq!(
            status_of(&store, &id).await,
            None,
            "the abandoned claim never committed"
        );
    }
    assert!(
        mid_flight > 0,
        "no flight was abandoned before the server answered"
    );
}

/// Fails its first call with a database error, in the flight of the
/// handlers before it where there is one (PostgreSQL), or alone (SQLite).
struct FailingStatement(std::sync::atomic::AtomicUsize);

const BROKEN_SQL: &str = "SELECT * FROM a_table_that_does_not_exist";

impl FailingStatement {
    fn sql(&self) -> &'static str {
        let ordering = std::sync::atomic::Ordering::SeqCst;
        if self
            .0
            .fetch_update(ordering, ordering, |n| n.checked_sub(1))
            .is_ok()
        {
            BROKEN_SQL
        } else {
            "SELECT 1"
        }
    }
}

#[async_trait::async_trait(?Send)]
impl Handler for FailingStatement {
    async fn handle(&self, _: &Event, conn: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        let sql = self.sql();
        with_conn!(conn, |c| diesel::sql_query(sql).execute(c).await)?;
        Ok(None)
    }

    fn handle_in_flight<'a>(
        &'a self,
        _: &'a Event,
        flight: Flight<'a>,
    ) -> Option<LocalBoxFuture<'a, Result<Option<Value>, HandlerError>>> {
        let sql = self.sql();
        Some(
            async move {
                flight.execute(diesel::sql_query(sql)).await?;
                Ok(None)
            }
            .boxed_local(),
        )
    }
}

async fn a_statement_failing_in_the_handlers_flight_rolls_back_all_of_it(backend: Backend) {
    let Some(app) = TestApp::builder(backend)
        .handler("failing-statement", FailingStatement(1.into()))
        .spawn_if_available()
        .await
    else {
        return;
    };
    let body = payment("pay_flight", 900);
    // record and payments were sent in the same flight and ran before it.
    let failed = app.deliver("msg_flight", &body).await;
    problem(failed, 500, "processing-failed").await;
    assert_eq!(app.ledger_rows().await, 0);
    assert_eq!(app.count("events").await, 0);
    assert!(
        app.delivery("msg_flight").await.is_none(),
        "the key is free"
    );

    let retried = app.deliver("msg_flight", &body).await;
    assert_eq!(retried.status(), 200);
    let effects: Value = retried.json().await.expect("a JSON answer");
    assert!(
        effects["effects"]["payments"]["ledger_entry_id"].is_i64(),
        "{effects}"
    );
    assert_eq!(effects["effects"]["record"]["recorded"], true);
    assert_eq!(app.ledger_rows().await, 1);
    assert_eq!(app.count("events").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_failing_in_the_handlers_flight_rolls_back_all_of_it_sqlite() {
    a_statement_failing_in_the_handlers_flight_rolls_back_all_of_it(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_failing_in_the_handlers_flight_rolls_back_all_of_it_postgres() {
    a_statement_failing_in_the_handlers_flight_rolls_back_all_of_it(Backend::Postgres).await;
}
