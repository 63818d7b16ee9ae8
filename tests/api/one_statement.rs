//! A fresh delivery whose handlers plan (the defaults, `record` and
//! `payments`) is claimed, written and completed in one statement on
//! PostgreSQL (`store::one_statement`), with its ledger id drawn ahead. On
//! SQLite the claim inserts the row completed and the planned rows follow
//! it in the delivery's savepoint (`store::planned_rows`), with ids
//! reserved ahead from `sqlite_sequence`: every assertion here holds on
//! both.

use crate::admin::plant_in_progress;
use crate::helpers::{ENDPOINT, TestApp, TestAppBuilder, payment};
use crate::{both_backends, both_backends_with};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use idempotent_receiver::handlers::{Event, Handler, HandlerError, Plan};
use idempotent_receiver::store::{DbConn, DeliveryRow};
use idempotent_receiver::store::{PlannedLedgerEntry, PlannedWrite};
use idempotent_receiver::with_conn;
use serde_json::Value;

#[derive(QueryableByName, Debug, PartialEq)]
struct LedgerRow {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    id: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    delivery_id: String,
}

async fn ledger(app: &TestApp) -> Vec<LedgerRow> {
    let mut conn = app.store.conn().await.expect("a connection");
    with_conn!(&mut conn, |c| {
        diesel::sql_query("SELECT id, delivery_id FROM ledger_entries ORDER BY id")
            .load::<LedgerRow>(c)
            .await
    })
    .expect("the ledger")
}

/// A delivery's row, and the request it was claimed with, read through
/// the store's own queries.
async fn stored(app: &TestApp, id: &str) -> (DeliveryRow, Option<Vec<u8>>) {
    let mut conn = app.store.conn().await.expect("a connection");
    let row = conn
        .find_delivery(ENDPOINT, id)
        .await
        .expect("a read")
        .expect("the delivery's row");
    let request = conn.request_body(ENDPOINT, id).await.expect("a read");
    (row, request)
}

/// The ledger id a processed delivery's answer names.
fn answered_ledger_id(body: &[u8]) -> i64 {
    let answer: Value = serde_json::from_slice(body).expect("a JSON answer");
    answer["effects"]["payments"]["ledger_entry_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no ledger id in {answer}"))
}

/// `count` payments of 100 under the ids `{prefix}0`, `{prefix}1`, ...,
/// delivered all at once: the ids, the bodies and the answers, in order.
async fn payments_in_parallel(
    app: &TestApp,
    prefix: &str,
    count: usize,
) -> (Vec<String>, Vec<Vec<u8>>, Vec<reqwest::Response>) {
    let ids: Vec<String> = (0..count).map(|n| format!("{prefix}{n}")).collect();
    let bodies: Vec<Vec<u8>> = ids
        .iter()
        .map(|id| payment(&format!("pay_{id}"), 100))
        .collect();
    let answers = futures_util::future::join_all(
        ids.iter()
            .zip(&bodies)
            .map(|(id, body)| app.deliver(id, body)),
    )
    .await;
    (ids, bodies, answers)
}

both_backends!(
    async fn each_answer_names_the_ledger_row_written_with_it_and_the_row_is_completed_once(app) {
        // In parallel, so that the ids drawn ahead are handed to many
        // deliveries at once.
        let (ids, bodies, answers) = payments_in_parallel(app, "msg_one_", 40).await;
        let mut named = Vec::new();
        for (id, answer) in ids.iter().zip(answers) {
            assert_eq!(answer.status(), 200, "{id}");
            let body = answer.bytes().await.unwrap();
            named.push(LedgerRow {
                id: answered_ledger_id(&body),
                delivery_id: id.clone(),
            });
            let (row, request) = stored(app, id).await;
            assert_eq!(row.status, "completed");
            assert_eq!(row.lease_owner, None);
            assert_eq!(row.attempts, 1);
            assert_eq!(row.response_body.as_deref(), Some(&body[..]), "the stored answer is the one sent");
            assert!(request.is_some(), "the request is kept for reprocessing");
        }
        named.sort_by_key(|row| row.id);
        assert_eq!(ledger(app).await, named, "one row per delivery, each under the id its answer names");
        assert_eq!(app.count("events").await, 40);

        // A repeat is the stored answer, byte for byte, and writes nothing.
        let again = app.deliver(&ids[0], &bodies[0]).await;
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(ledger(app).await.len(), 40);
    }
);

/// A ledger row numbered by the database itself, as the CLI or another
/// process writing the same database would insert it.
async fn insert_numbered_by_the_database(app: &TestApp) -> i64 {
    #[derive(QueryableByName)]
    struct Id {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        id: i64,
    }
    let mut conn = app.store.conn().await.expect("a connection");
    let row: Id = with_conn!(&mut conn, |c| {
        diesel::sql_query(
            "INSERT INTO ledger_entries (endpoint, delivery_id, kind, payment_id, amount, currency, created_at) \
             VALUES ('elsewhere', 'msg_elsewhere', 'charge', 'pay_elsewhere', 100, 'EUR', CURRENT_TIMESTAMP) \
             RETURNING id",
        )
        .get_result(c)
        .await
    })
    .expect("the insert runs");
    row.id
}

both_backends!(
    async fn the_ids_drawn_ahead_are_one_block_used_lowest_first_and_no_row_numbered_by_the_database_takes_one(app) {
        // Forty first deliveries at once find no spare id: they share one
        // draw of a hundred rather than each making its own, and use its
        // lowest ids first.
        let (_, _, answers) = payments_in_parallel(app, "msg_block_", 40).await;
        let mut named = Vec::new();
        for answer in answers {
            assert_eq!(answer.status(), 200);
            named.push(answered_ledger_id(&answer.bytes().await.unwrap()));
        }
        named.sort_unstable();
        assert_eq!(named, (1..=40).collect::<Vec<i64>>());
        // A row the database numbers itself goes past the ids drawn ahead,
        // and the deliveries after it keep using those.
        let elsewhere = insert_numbered_by_the_database(app).await;
        assert_eq!(elsewhere, 101, "the next id past the one block drawn ahead");
        let (ids, _, answers) = payments_in_parallel(app, "msg_after_", 10).await;
        let mut after = Vec::new();
        for (id, answer) in ids.iter().zip(answers) {
            assert_eq!(answer.status(), 200, "{id}");
            after.push(LedgerRow {
                id: answered_ledger_id(&answer.bytes().await.unwrap()),
                delivery_id: id.clone(),
            });
        }
        after.sort_by_key(|row| row.id);
        assert_eq!(
            after.iter().map(|row| row.id).collect::<Vec<_>>(),
            (41..=50).collect::<Vec<i64>>()
        );
        let rows = ledger(app).await;
        assert_eq!(rows.len(), 51, "every row written once");
        for row in &after {
            assert!(rows.contains(row), "{row:?} is the row its answer names");
        }
        assert!(rows.contains(&LedgerRow { id: elsewhere, delivery_id: "msg_elsewhere".into() }));
    }
);

both_backends!(
    async fn a_repeat_the_replay_cache_missed_writes_nothing_and_its_ledger_id_goes_to_the_next_delivery(app) {
        let body = payment("pay_missed", 100);
        let first = app.deliver("msg_missed", &body).await;
        assert_eq!(first.status(), 200);
        let first = first.bytes().await.unwrap();
        // As if another instance had processed it: this process does not
        // know the key, so the repeat meets the row in the database.
        app.store.replay_cache().clear();
        let again = app.deliver("msg_missed", &body).await;
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.bytes().await.unwrap(), first);
        assert_eq!(app.ledger_rows().await, 1);
        assert_eq!(app.count("events").await, 1);

        // The same key with another payload: 409, nothing written.
        app.store.replay_cache().clear();
        let other = app.deliver("msg_missed", &payment("pay_other", 100)).await;
        assert_eq!(other.status(), 409);
        assert_eq!(app.ledger_rows().await, 1);

        // The ids those two drew and did not write are handed out again, so
        // the next delivery's row takes the id right after the first one's
        // (on SQLite the column's own sequence gives the same).
        let next = app.deliver("msg_next", &payment("pay_next", 100)).await;
        assert_eq!(next.status(), 200);
        let next = answered_ledger_id(&next.bytes().await.unwrap());
        assert_eq!(next, answered_ledger_id(&first) + 1);
    }
);

both_backends!(
    async fn a_key_held_by_a_dead_claim_is_not_written_over_by_the_one_statement(app) {
        // A claim in progress, its lease five minutes from running out: a
        // delivery of the key is refused (409) and writes nothing, and the
        // claim stays as it was.
        plant_in_progress(app, "msg_held").await;
        let answer = app.deliver("msg_held", &payment("pay_held", 100)).await;
        assert_eq!(answer.status(), 409);
        assert_eq!(app.ledger_rows().await, 0);
        assert_eq!(app.count("events").await, 0);
        let (row, _) = stored(app, "msg_held").await;
        assert_eq!(row.status, "in_progress");
        assert_eq!(row.lease_owner.as_deref(), Some("pid1-dead/0000"));
    }
);

both_backends!(
    async fn a_refused_event_is_stored_alone_and_every_repeat_gets_the_same_refusal(app) {
        // A payment without an amount can never succeed: 422, stored, with
        // neither the event nor a ledger row.
        let body = serde_json::json!({
            "type": "payment.succeeded",
            "data": { "id": "pay_no_amount", "currency": "EUR" }
        })
        .to_string()
        .into_bytes();
        let refused = app.deliver("msg_refused", &body).await;
        assert_eq!(refused.status(), 422);
        let refused = refused.bytes().await.unwrap();
        assert_eq!(app.ledger_rows().await, 0);
        assert_eq!(app.count("events").await, 0);
        let (row, _) = stored(app, "msg_refused").await;
        assert_eq!(row.status, "completed");
        assert_eq!(row.response_body.as_deref(), Some(&refused[..]));
        app.store.replay_cache().clear();
        let again = app.deliver("msg_refused", &body).await;
        assert_eq!(again.status(), 422);
        assert_eq!(again.bytes().await.unwrap(), refused);
    }
);

/// Refuses a payment for the order `order_refused`, in its plan as in
/// `handle`, and otherwise answers nothing and writes nothing.
struct RefusesRefused;

fn refusal(event: &Event) -> Result<Option<Value>, HandlerError> {
    match event.payload["data"]["order_id"].as_str() {
        Some("order_refused") => Err(HandlerError::Rejected("refused".into())),
        _ => Ok(None),
    }
}

#[async_trait::async_trait(?Send)]
impl Handler for RefusesRefused {
    async fn handle(&self, event: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        refusal(event)
    }

    fn plan<'a>(
        &'a self,
        event: &'a Event,
        _ledger_id: &mut Option<i64>,
    ) -> Option<Result<Plan<'a>, HandlerError>> {
        Some(refusal(event).map(|answer| Plan {
            write: None,
            answer,
        }))
    }
}

fn with_a_refuser_after_payments(builder: TestAppBuilder) -> TestAppBuilder {
    builder.handler("refuser", RefusesRefused)
}

both_backends_with!(with_a_refuser_after_payments;
    async fn a_refusal_after_payments_planned_its_row_writes_nothing_and_frees_the_id(app) {
        let first = app.deliver("msg_before", &payment("pay_before", 100)).await;
        assert_eq!(first.status(), 200);
        let first = answered_ledger_id(&first.bytes().await.unwrap());
        // `payments` books this one (and takes an id in its plan); the
        // handler after it refuses it: 422, no row of either.
        let refused = serde_json::json!({
            "type": "payment.succeeded",
            "data": { "id": "pay_refused", "order_id": "order_refused", "amount": 100, "currency": "EUR" }
        })
        .to_string()
        .into_bytes();
        let answer = app.deliver("msg_refused_later", &refused).await;
        assert_eq!(answer.status(), 422);
        assert_eq!(app.ledger_rows().await, 1);
        assert_eq!(app.count("events").await, 1);
        let next = app.deliver("msg_after", &payment("pay_after", 100)).await;
        assert_eq!(next.status(), 200);
        assert_eq!(answered_ledger_id(&next.bytes().await.unwrap()), first + 1);
    }
);

/// Books a fee of 1 beside every event (a charge: the ledger's kinds are
/// charges and refunds), under an id of its own (-1 down: SQLite gives a new
/// row the largest id plus one, which a positive id of the fee's would
/// take from `payments`' next row): a third planned write after
/// `record`'s and `payments`'. A list of three writes has no marker of its
/// own, so on PostgreSQL its statement is looked up by its text
/// (`store::one_statement`).
struct Fee(std::sync::atomic::AtomicI64);

impl Fee {
    fn next_id(&self) -> i64 {
        -1 - self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

#[async_trait::async_trait(?Send)]
impl Handler for Fee {
    async fn handle(
        &self,
        event: &Event,
        conn: &mut DbConn,
    ) -> Result<Option<Value>, HandlerError> {
        use idempotent_receiver::store::BoundTimestamp;
        use idempotent_receiver::store::schema::ledger_entries::dsl;
        let id = self.next_id();
        with_conn!(conn, |c| {
            diesel::insert_into(dsl::ledger_entries)
                .values((
                    dsl::id.eq(id),
                    dsl::endpoint.eq(&event.endpoint),
                    dsl::delivery_id.eq(&event.delivery_id),
                    dsl::kind.eq("charge"),
                    dsl::payment_id.eq(format!("fee_{}", event.delivery_id)),
                    dsl::amount.eq(1_i64),
                    dsl::currency.eq("EUR"),
                    dsl::created_at.eq(BoundTimestamp(event.received_at)),
                ))
                .execute(c)
                .await
        })
        .map_err(|e| HandlerError::Failed(Box::new(e)))?;
        Ok(Some(serde_json::json!({ "fee_id": id })))
    }

    fn plan<'a>(
        &'a self,
        event: &'a Event,
        _ledger_id: &mut Option<i64>,
    ) -> Option<Result<Plan<'a>, HandlerError>> {
        let id = self.next_id();
        Some(Ok(Plan {
            write: Some(PlannedWrite::Ledger(PlannedLedgerEntry {
                id,
                kind: "charge",
                payment_id: format!("fee_{}", event.delivery_id).into(),
                order_id: None,
                amount: 1,
                currency: "EUR".into(),
                created_at: event.received_at,
            })),
            answer: Some(serde_json::json!({ "fee_id": id })),
        }))
    }
}

fn with_a_fee_after_payments(builder: TestAppBuilder) -> TestAppBuilder {
    builder.handler("fee", Fee(0.into()))
}

both_backends_with!(with_a_fee_after_payments;
    async fn three_planned_writes_are_each_written_once_with_the_claim(app) {
        let (ids, bodies, answers) = payments_in_parallel(app, "msg_fee_", 16).await;
        let mut named = Vec::new();
        let mut first = None;
        for (id, answer) in ids.iter().zip(answers) {
            let status = answer.status();
            let body = answer.bytes().await.unwrap();
            assert_eq!(status, 200, "{id}: {}", String::from_utf8_lossy(&body));
            let answer: Value = serde_json::from_slice(&body).expect("a JSON answer");
            let fee = answer["effects"]["fee"]["fee_id"].as_i64().unwrap_or_else(|| panic!("no fee in {answer}"));
            for id_named in [answered_ledger_id(&body), fee] {
                named.push(LedgerRow { id: id_named, delivery_id: id.clone() });
            }
            let (row, _) = stored(app, id).await;
            assert_eq!(row.response_body.as_deref(), Some(&body[..]), "the stored answer is the one sent");
            first.get_or_insert(body);
        }
        named.sort_by_key(|row| row.id);
        assert_eq!(ledger(app).await, named, "two rows per delivery, each under the id its answer names");
        assert_eq!(app.count("events").await, 16);

        // A repeat that meets the row writes nothing and gets the answer.
        app.store.replay_cache().clear();
        let again = app.deliver(&ids[0], &bodies[0]).await;
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(Some(again.bytes().await.unwrap()), first);
        assert_eq!(app.ledger_rows().await, 32);
        assert_eq!(app.count("events").await, 16);
    }
);
