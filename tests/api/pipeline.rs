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
use idempotent_receiver::handlers::{Event, Handler, HandlerError, Payments, Record};
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
    AfterClaim, DatabaseUrl, DbConn, Flight, IN_PROGRESS, NewClaim, Store, StoreOptions,
    StoredResponse,
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

/// A store on `app`'s database with a pool of one: every checkout gets the
/// same connection, or a new one where that was dropped.
fn one_connection_store(app: &TestApp) -> Store {
    let url = DatabaseUrl::parse(&app.database_url).expect("the app's URL");
    let options = StoreOptions {
        pool_size: 1,
        ..StoreOptions::default()
    };
    Store::connect(&url, &options).expect("a one-connection store")
}

/// Whether the next checkout is outside a transaction: `SAVEPOINT` is
/// refused there.
async fn checked_out_outside_a_transaction(store: &Store) -> bool {
    let mut conn = store.conn().await.expect("a connection");
    with_conn!(&mut conn, |c| c.batch_execute("SAVEPOINT probe").await).is_err()
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
    let store = one_connection_store(&app);
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

        assert!(
            checked_out_outside_a_transaction(&store).await,
            "round {round}: the pool lent out a connection inside the abandoned transaction"
        );
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

/// The transaction id that last wrote `table`'s row for `id`: the claim's
/// own when the completion ran inside the claim's transaction.
async fn writer_xid(store: &Store, table: &str, id: &str) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct Xid {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        xid: i64,
    }
    let mut conn = store.conn().await.expect("a connection");
    let DbConn::Pg(pg) = &mut conn else {
        panic!("PostgreSQL only")
    };
    let c: &mut idempotent_receiver::store::PgConn = pg;
    diesel::sql_query(format!(
        "SELECT xmin::text::bigint AS xid FROM {table} WHERE delivery_id = $1"
    ))
    .bind::<diesel::sql_types::Text, _>(id)
    .get_result::<Xid>(c)
    .await
    .expect("the row's xmin")
    .xid
}

/// One claim with an effect, completed through
/// `Transaction::complete_claim_in_flight`, or one step after the other
/// where that declines: whether it flew.
async fn claim_effect_complete(store: &Store, id: &str) -> Result<bool, String> {
    let now = store.clock().naive_now();
    let conn = store.conn().await.expect("a connection");
    let (mut tx, inserted) = store
        .begin_claim(conn, &claim(id, "owner", now))
        .await
        .expect("the claim");
    assert!(inserted);
    with_conn!(tx.conn(), |c| {
        diesel::sql_query(format!(
            "INSERT INTO ledger_entries (endpoint, delivery_id, kind, payment_id, amount, currency, created_at) \
             VALUES ('pipeline', '{id}', 'charge', 'pay', 1, 'EUR', CURRENT_TIMESTAMP)"
        ))
        .execute(c)
        .await
    })
    .expect("the effect");
    let remembered = std::cell::Cell::new(false);
    let flown = tx
        .complete_claim_in_flight("pipeline", id, "owner", &answer(), now, || {
            remembered.set(true)
        })
        .await;
    match flown {
        Ok(done) => {
            assert_eq!(
                done.is_ok(),
                remembered.get(),
                "`committed` runs on success only"
            );
            done.map(|()| true).map_err(|e| e.to_string())
        }
        Err(mut tx) => {
            assert!(!remembered.get());
            let completed = tx
                .conn()
                .complete_delivery("pipeline", id, "owner", &answer(), now)
                .await
                .map_err(|e| e.to_string())?;
            assert!(completed);
            tx.commit().await.map_err(|e| e.to_string())?;
            Ok(false)
        }
    }
}

both_backends! {
    /// The completion travels with `COMMIT` only on a connection that has
    /// prepared it: on a new connection its `Parse` would let `COMMIT`
    /// overtake it. On PostgreSQL each completed row was last written by
    /// the transaction that wrote the effect; a completion overtaken by
    /// `COMMIT` runs in a transaction of its own and fails that.
    async fn the_completion_travels_with_commit_once_its_connection_has_prepared_it(app) {
        // One connection: every round runs on the same one.
        let store = one_connection_store(app);
        let postgres = app.database_url.starts_with("postgres");
        for round in 0..4 {
            let id = format!("pipe-commit-{round}-{}", uuid::Uuid::new_v4().simple());
            let flew = claim_effect_complete(&store, &id).await.expect("completed and committed");
            // PostgreSQL: the first completion prepares the statement, the
            // next ones fly. SQLite has no round trips to save.
            assert_eq!(flew, postgres && round > 0, "round {round}");
            assert_eq!(status_of(&store, &id).await.as_deref(), Some("completed"));
            assert_eq!(ledger_rows(&store, &id).await, 1);
            if postgres {
                assert_eq!(
                    writer_xid(&store, "deliveries", &id).await,
                    writer_xid(&store, "ledger_entries", &id).await,
                    "round {round}: the completion ran in the claim's transaction"
                );
            }
        }
    }
}

/// A completion that fails in the flight: PostgreSQL answers the `COMMIT`
/// behind it with a rollback, so neither the claim nor the effect is kept,
/// the error is the completion's, and the connection goes back clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_failing_in_flight_with_commit_keeps_nothing() {
    let Some(app) = TestApp::spawn_if_available(Backend::Postgres).await else {
        return;
    };
    let store = one_connection_store(&app);
    let mut conn = store.conn().await.expect("a connection");
    with_conn!(&mut conn, |c| {
        c.batch_execute(
            "CREATE FUNCTION refuse_completion() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'completion refused by the test'; END $$; \
             CREATE TRIGGER refuse_completion BEFORE UPDATE ON deliveries FOR EACH ROW \
             WHEN (NEW.delivery_id LIKE 'pipe-refused-%') EXECUTE FUNCTION refuse_completion();",
        )
        .await
    })
    .expect("the trigger");
    drop(conn);
    // Prepares the completion on the one connection.
    let warm = format!("pipe-warm-{}", uuid::Uuid::new_v4().simple());
    assert!(
        !claim_effect_complete(&store, &warm)
            .await
            .expect("completed")
    );

    let id = format!("pipe-refused-{}", uuid::Uuid::new_v4().simple());
    let error = claim_effect_complete(&store, &id)
        .await
        .expect_err("the completion was refused");
    assert!(error.contains("completion refused by the test"), "{error}");
    assert_eq!(status_of(&store, &id).await, None, "the claim was not kept");
    assert_eq!(ledger_rows(&store, &id).await, 0, "nor the effect");

    assert!(
        checked_out_outside_a_transaction(&store).await,
        "the connection came back inside a transaction"
    );
    // And it still flies.
    let after = format!("pipe-after-{}", uuid::Uuid::new_v4().simple());
    assert!(
        claim_effect_complete(&store, &after)
            .await
            .expect("completed")
    );
}

/// A built-in handler that flies with the claim but does not plan, as a
/// handler of one's own written with `handle_in_flight` does: its endpoint's
/// deliveries take the flights, not the one statement that planned
/// handlers get on PostgreSQL (`store::one_statement`).
struct FliesOnly<H>(H);

#[async_trait::async_trait(?Send)]
impl<H: Handler> Handler for FliesOnly<H> {
    async fn handle(
        &self,
        event: &Event,
        conn: &mut DbConn,
    ) -> Result<Option<Value>, HandlerError> {
        self.0.handle(event, conn).await
    }

    fn handle_in_flight<'a>(
        &'a self,
        event: &'a Event,
        flight: Flight<'a>,
    ) -> Option<LocalBoxFuture<'a, Result<Option<Value>, HandlerError>>> {
        self.0.handle_in_flight(event, flight)
    }
}

/// One pooled connection, so that every delivery after the first finds the
/// claim's statement prepared and sends the handlers behind it; `record`
/// and `payments` fly but do not plan.
fn one_connection(builder: crate::helpers::TestAppBuilder) -> crate::helpers::TestAppBuilder {
    builder
        .top_level("pool_size = 1")
        .replace_handler("record", FliesOnly(Record))
        .replace_handler("payments", FliesOnly(Payments))
}

/// The answer's ledger entry id.
async fn ledger_entry_id(response: reqwest::Response) -> (i64, Vec<u8>) {
    assert_eq!(response.status(), 200);
    let body = response.bytes().await.expect("a body").to_vec();
    let answer: Value = serde_json::from_slice(&body).expect("a JSON answer");
    let id = answer["effects"]["payments"]["ledger_entry_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no ledger entry in {answer}"));
    (id, body)
}

async fn payload_of(app: &TestApp, id: &str) -> String {
    let mut conn = app.store.conn().await.expect("a connection");
    #[derive(diesel::QueryableByName)]
    struct Payload {
        #[diesel(sql_type = diesel::sql_types::Text)]
        payload: String,
    }
    with_conn!(&mut conn, |c| {
        diesel::sql_query("SELECT payload FROM events WHERE delivery_id = $1")
            .bind::<diesel::sql_types::Text, _>(id)
            .get_result::<Payload>(c)
            .await
    })
    .expect("the event's row")
    .payload
}

crate::both_backends_with! { one_connection;
    /// On PostgreSQL the handlers' statements travel behind `BEGIN` and the
    /// claim, before anyone knows whether the claim won. A repeat that the
    /// replay cache does not know (another instance's, or one after a
    /// restart) loses the claim: its handlers' writes must be rolled back,
    /// and its answer is the stored one. The ledger's id sequence shows
    /// that they did run: PostgreSQL's `nextval` is not undone by a
    /// rollback, so each repeat's rolled-back insert leaves a gap. SQLite
    /// sends nothing ahead and leaves none.
    async fn a_repeat_whose_handlers_flew_with_a_lost_claim_keeps_nothing_of_them(app) {
        let postgres = app.database_url.starts_with("postgres");
        let body = payment("pay_fly_1", 1200);
        // Prepares the claim's statement on the one connection.
        let (first, _) = ledger_entry_id(app.deliver("msg_fly_1", &body).await).await;
        let body = payment("pay_fly_2", 3400);
        let (second, answer) = ledger_entry_id(app.deliver("msg_fly_2", &body).await).await;
        assert_eq!(second, first + 1);

        // The same delivery again, and its key with another body, each
        // unknown to the cache: the stored answer, and a refusal. Their
        // handlers fly on PostgreSQL unless the claim's answer is in first
        // (see the test above), so they are sent until a fresh delivery's
        // ledger id shows the gap that rolled-back inserts leave.
        let mut last = second;
        let mut fresh = 2;
        let mut gap_seen = false;
        for round in 0..20 {
            app.store.replay_cache().clear();
            let repeat = app.deliver("msg_fly_2", &body).await;
            assert_eq!(repeat.status(), 200);
            assert_eq!(repeat.bytes().await.expect("a body").to_vec(), answer, "byte for byte");
            app.store.replay_cache().clear();
            let other = payment("pay_fly_2", 9999);
            problem(app.deliver("msg_fly_2", &other).await, 409, "key-reused").await;

            let id = format!("msg_fly_next_{round}");
            let (next, _) = ledger_entry_id(app.deliver(&id, &payment(&format!("pay_{id}"), 5600)).await).await;
            fresh += 1;
            assert!(
                (last + 1..=last + 3).contains(&next),
                "at most the two lost claims' inserts used an id: {last} then {next}"
            );
            gap_seen |= next > last + 1;
            last = next;
            if gap_seen {
                break;
            }
        }
        assert_eq!(gap_seen, postgres, "only PostgreSQL's lost claims flew");
        assert_eq!(app.ledger_rows().await, fresh);
        assert_eq!(app.count("events").await, fresh);
        assert_eq!(
            payload_of(app, "msg_fly_2").await.into_bytes(),
            body,
            "the event's row is the first run's"
        );
    }
}

/// An operation's one effect, a ledger row, offered to fly behind a claim.
/// `flew`: its statement was handed to the flight (sent behind the claim).
struct LedgerRowAfter {
    id: String,
    flew: std::cell::Cell<bool>,
}

impl LedgerRowAfter {
    fn new(id: &str) -> LedgerRowAfter {
        LedgerRowAfter {
            id: id.to_owned(),
            flew: std::cell::Cell::new(false),
        }
    }
}

impl AfterClaim for LedgerRowAfter {
    type Landed = Result<usize, idempotent_receiver::store::StoreError>;

    fn fly<'f>(&'f self, flight: Flight<'f>) -> Option<LocalBoxFuture<'f, Self::Landed>> {
        self.flew.set(true);
        let sql = after_sql(&self.id);
        Some(async move { flight.execute(diesel::sql_query(sql)).await }.boxed_local())
    }
}

both_backends! {
    /// `Store::begin_claim_and_fly` sends the operation's statements behind
    /// the claim only where the claim cannot be overtaken: on PostgreSQL,
    /// once the connection has prepared the claim's statement (its first
    /// claim sends nothing behind it); never on SQLite. What flew ran in the
    /// claim's own transaction. A claim that loses rolls back what flew and
    /// claims again without it, in a transaction that ends like any other.
    async fn an_operations_statements_fly_behind_a_claim_once_its_connection_has_prepared_it(app) {
        let store = one_connection_store(app);
        let postgres = app.database_url.starts_with("postgres");
        let mut ids = Vec::new();
        for round in 0..3 {
            let id = format!("pipe-fly-{round}-{}", uuid::Uuid::new_v4().simple());
            let now = store.clock().naive_now();
            let conn = store.conn().await.expect("a connection");
            let after = LedgerRowAfter::new(&id);
            let (mut tx, inserted, landed) = store
                .begin_claim_and_fly(conn, &claim(&id, "owner", now), Some(&after))
                .await
                .expect("the claim");
            assert!(inserted, "round {round}: a new key's claim was not won");
            assert_eq!(landed.is_some(), after.flew.get(), "round {round}");
            assert_eq!(after.flew.get(), postgres && round > 0, "round {round}");
            match landed {
                Some(inserted) => assert_eq!(inserted.expect("the flown insert"), 1),
                None => {
                    let inserted = with_conn!(tx.conn(), |c| {
                        diesel::sql_query(after_sql(&id)).execute(c).await
                    })
                    .expect("the effect, after the claim");
                    assert_eq!(inserted, 1);
                }
            }
            assert!(tx.conn().complete_delivery("pipeline", &id, "owner", &answer(), now).await.expect("the completion"));
            tx.commit().await.expect("committed");
            assert_eq!(ledger_rows(&store, &id).await, 1);
            if postgres {
                assert_eq!(
                    writer_xid(&store, "deliveries", &id).await,
                    writer_xid(&store, "ledger_entries", &id).await,
                    "round {round}: the effect was written in the claim's transaction"
                );
            }
            ids.push(id);
        }

        // A claim on a key that is there already loses. The flight is sent
        // unless the claim's answer is in before the handlers' statements
        // are made: this thread descheduled right after sending it, while
        // the connection's task ran the round trip. So it is tried until
        // it flies (PostgreSQL), and every try must keep nothing.
        let id = &ids[2];
        let mut rolled_back = 0;
        for _ in 0..20 {
            let now = store.clock().naive_now();
            let conn = store.conn().await.expect("a connection");
            let after = LedgerRowAfter::new(id);
            let (tx, inserted, landed) = store
                .begin_claim_and_fly(conn, &claim(id, "another-owner", now), Some(&after))
                .await
                .expect("the claim");
            assert!(!inserted, "a key that is there was claimed again");
            assert!(landed.is_none(), "a lost claim gives nothing of what flew");
            if after.flew.get() {
                assert!(postgres, "SQLite sends nothing ahead");
                rolled_back += 1;
            }
            tx.rollback().await.expect("rolled back");
            assert_eq!(ledger_rows(&store, id).await, 1, "the lost claim's effect was not kept");
            assert_eq!(status_of(&store, id).await.as_deref(), Some("completed"));
            // (SQLite takes a `SAVEPOINT` outside a transaction as a `BEGIN`.)
            if postgres {
                assert!(
                    checked_out_outside_a_transaction(&store).await,
                    "the connection came back inside a transaction"
                );
            }
            if rolled_back > 0 {
                break;
            }
        }
        assert_eq!(rolled_back > 0, postgres, "a lost claim's flight was rolled back");
    }
}

fn after_sql(id: &str) -> String {
    format!(
        "INSERT INTO ledger_entries (endpoint, delivery_id, kind, payment_id, amount, currency, created_at) \
         VALUES ('pipeline', '{id}', 'charge', 'pay', 1, 'EUR', CURRENT_TIMESTAMP)"
    )
}
