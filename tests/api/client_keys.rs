//! `Idempotency-Key` on client routes: `POST /payments` and test routes, on
//! both backends.

use crate::both_backends;
use crate::helpers::{Backend, TestApp, problem};
use actix_web::{HttpResponse, web};
use diesel::ExpressionMethods;
use futures_util::future::join_all;
use idempotent_receiver::client_keys::{Idempotency, IdempotentTx};
use idempotent_receiver::store::schema::payments;
use idempotent_receiver::with_conn;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};

const KEY: &str = "8e03978e-40d5-43e8-bc93-6894a57f9324";

fn order(amount: i64) -> Value {
    json!({ "order_id": "order_42", "amount": amount, "currency": "EUR" })
}

async fn payments(app: &TestApp) -> i64 {
    app.count("payments").await
}

/// Writes a payment row for `order_id` through the request's transaction.
async fn write_payment(tx: &IdempotentTx, order_id: &str) {
    let mut conn = tx.conn().await.unwrap();
    let row = (
        payments::id.eq(format!("pay_{}", uuid::Uuid::new_v4().simple())),
        payments::order_id.eq(order_id),
        payments::amount.eq(1_i64),
        payments::currency.eq("EUR"),
        payments::status.eq("created"),
        payments::idempotency_key.eq(tx.key()),
        payments::created_at.eq(chrono::Utc::now().naive_utc()),
    );
    with_conn!(&mut *conn, |c| diesel_async::RunQueryDsl::execute(
        diesel::insert_into(payments::table).values(row),
        c
    )
    .await)
    .unwrap();
}
static FLAKY_FAILURES: AtomicUsize = AtomicUsize::new(0);

/// `/orders` (another keyed route) and `/flaky` (writes, then fails with a
/// 500 while `FLAKY_FAILURES` is above zero).
fn test_routes(cfg: &mut web::ServiceConfig, idempotency: Idempotency) {
    async fn orders(tx: IdempotentTx) -> HttpResponse {
        write_payment(&tx, "from-orders").await;
        HttpResponse::Created().json(json!({ "route": "orders" }))
    }
    async fn flaky(tx: IdempotentTx) -> HttpResponse {
        write_payment(&tx, "from-flaky").await;
        if FLAKY_FAILURES
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return HttpResponse::InternalServerError().body("the gateway timed out");
        }
        HttpResponse::Created().json(json!({ "route": "flaky" }))
    }
    cfg.service(
        web::resource("/orders")
            .wrap(idempotency.clone().required())
            .route(web::post().to(orders)),
    )
    .service(
        web::resource("/flaky")
            .wrap(idempotency.required())
            .route(web::post().to(flaky)),
    );
}

async fn app_with(backend: Backend, top_level: &str, tables: &str) -> Option<TestApp> {
    TestApp::builder(backend)
        .top_level(top_level)
        .endpoints_toml(tables)
        .routes(test_routes)
        .spawn_if_available()
        .await
}

/// Sends `copies` identical requests with one key at once: one row, and
/// every answer is the 201 or a 409.
async fn parallel(app: &TestApp, copies: usize) {
    let body = order(1999);
    let answers = join_all((0..copies).map(|_| async {
        let response = app.post_json("/payments", Some(KEY), &[], &body).await;
        (response.status().as_u16(), response.bytes().await.unwrap())
    }))
    .await;
    let created: Vec<_> = answers
        .iter()
        .filter(|(s, _)| *s == 201)
        .map(|(_, b)| b)
        .collect();
    assert!(!created.is_empty());
    assert!(
        created.iter().all(|b| *b == created[0]),
        "every 201 is the stored one"
    );
    assert!(
        answers.iter().all(|(s, _)| *s == 201 || *s == 409),
        "{:?}",
        answers.iter().map(|a| a.0).collect::<Vec<_>>()
    );
    assert_eq!(payments(app).await, 1, "exactly one payment");
}

both_backends! {
    async fn two_parallel_requests_with_one_key_create_one_payment(app) {
        parallel(app, 2).await;
    }
}

both_backends! {
    async fn sixty_four_parallel_requests_with_one_key_create_one_payment(app) {
        parallel(app, 64).await;
    }
}

both_backends! {
    async fn a_sequential_retry_replays_status_location_and_body(app) {
        let first = app.post_json("/payments", Some(KEY), &[], &order(500)).await;
        assert_eq!(first.status(), 201);
        let location = first.headers()["location"].clone();
        let body = first.bytes().await.unwrap();
        // The same object, serialised differently, is the same request.
        let reordered: Value = serde_json::from_str(r#"{ "currency": "EUR", "amount": 500, "order_id": "order_42" }"#).unwrap();
        let again = app.post_json("/payments", Some(KEY), &[], &reordered).await;
        assert_eq!(again.status(), 201);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.headers()["location"], location);
        assert_eq!(again.headers()["content-type"], "application/json");
        assert_eq!(again.bytes().await.unwrap(), body);
        assert_eq!(payments(app).await, 1);

        // GET reads it back; a key sent on GET is ignored.
        let path = location.to_str().unwrap();
        let read = app.client.get(format!("{}{path}", app.address)).header("idempotency-key", "ignored").send().await.unwrap();
        assert_eq!(read.status(), 200);
        let read: Value = read.json().await.unwrap();
        let created: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(read, created);
        assert_eq!(app.count("deliveries").await, 1);
    }
}

both_backends! {
    async fn the_same_key_with_another_payload_is_a_conflict_and_changes_nothing(app) {
        let first = app.post_json("/payments", Some(KEY), &[], &order(100)).await;
        assert_eq!(first.status(), 201);
        let other = app.post_json("/payments", Some(KEY), &[], &order(101)).await;
        problem(other, 409, "key-reused").await;
        assert_eq!(payments(app).await, 1);
        assert_eq!(app.count("deliveries").await, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_key_can_be_configured_to_get_422() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(app) = app_with(backend, "", "[idempotency]\nmismatch_status = 422\n").await
        else {
            continue;
        };
        app.post_json("/payments", Some(KEY), &[], &order(100))
            .await;
        let other = app
            .post_json("/payments", Some(KEY), &[], &order(101))
            .await;
        problem(other, 422, "key-reused").await;
        assert_eq!(payments(&app).await, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_on_another_route_or_tenant_is_independent() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(app) = app_with(
            backend,
            "",
            "[idempotency]\ntenant_header = \"X-Tenant-Id\"\n",
        )
        .await
        else {
            continue;
        };
        let body = order(700);
        let a = app
            .post_json("/payments", Some(KEY), &[("x-tenant-id", "acme")], &body)
            .await;
        let b = app
            .post_json("/payments", Some(KEY), &[("x-tenant-id", "globex")], &body)
            .await;
        let orders = app
            .post_json("/orders", Some(KEY), &[("x-tenant-id", "acme")], &body)
            .await;
        for response in [&a, &b, &orders] {
            assert_eq!(response.status(), 201);
            assert!(response.headers().get("idempotent-replayed").is_none());
        }
        let (a, b): (Value, Value) = (a.json().await.unwrap(), b.json().await.unwrap());
        assert_ne!(a["id"], b["id"], "no response crosses tenants");
        assert_eq!(a["tenant"], "acme");
        assert_eq!(b["tenant"], "globex");
        assert_eq!(payments(&app).await, 3);
        assert_eq!(app.count("deliveries").await, 3);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failure_releases_the_key_and_the_retry_runs_once() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(app) = app_with(backend, "", "").await else {
            continue;
        };
        FLAKY_FAILURES.store(1, Ordering::SeqCst);
        let body = order(1);
        let failed = app.post_json("/flaky", Some(KEY), &[], &body).await;
        assert_eq!(failed.status(), 500);
        // The handler's write rolled back with the claim; the key is free.
        assert_eq!(payments(&app).await, 0);
        assert_eq!(app.count("deliveries").await, 0);
        let retried = app.post_json("/flaky", Some(KEY), &[], &body).await;
        assert_eq!(retried.status(), 201);
        assert!(retried.headers().get("idempotent-replayed").is_none());
        let again = app.post_json("/flaky", Some(KEY), &[], &body).await;
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(payments(&app).await, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_retention_a_repeat_runs_again() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(app) = app_with(backend, "retention = \"1h\"", "").await else {
            continue;
        };
        let first = app
            .post_json("/payments", Some(KEY), &[], &order(300))
            .await;
        let first: Value = first.json().await.unwrap();
        app.age_key("POST /payments", KEY, chrono::TimeDelta::hours(2))
            .await;
        let later = app
            .post_json("/payments", Some(KEY), &[], &order(300))
            .await;
        assert_eq!(later.status(), 201);
        assert!(later.headers().get("idempotent-replayed").is_none());
        let later: Value = later.json().await.unwrap();
        assert_ne!(later["id"], first["id"]);
        assert_eq!(
            payments(&app).await,
            2,
            "the documented consequence of the retention"
        );
        // And the key is remembered again from now on.
        let again = app
            .post_json("/payments", Some(KEY), &[], &order(300))
            .await;
        assert_eq!(again.headers()["idempotent-replayed"], "true");
    }
}

both_backends! {
    async fn missing_malformed_and_repeated_keys_are_400_and_store_nothing(app) {
        problem(app.post_json("/payments", None, &[], &order(1)).await, 400, "idempotency-key-missing").await;
        for bad in ["\"unterminated", "", "caf\u{e9}-key", &"k".repeat(256)] {
            let response = app
                .client
                .post(format!("{}/payments", app.address))
                .header("idempotency-key", reqwest::header::HeaderValue::from_bytes(bad.as_bytes()).unwrap())
                .body(order(1).to_string())
                .send()
                .await
                .unwrap();
            problem(response, 400, "idempotency-key-malformed").await;
        }
        let repeated = app
            .client
            .post(format!("{}/payments", app.address))
            .header("idempotency-key", "a")
            .header("idempotency-key", "b")
            .body(order(1).to_string())
            .send()
            .await
            .unwrap();
        problem(repeated, 400, "idempotency-key-malformed").await;
        assert_eq!(app.count("deliveries").await, 0);
        assert_eq!(payments(app).await, 0);
    }
}

both_backends! {
    async fn a_validation_error_is_stored_and_replayed(app) {
        let invalid = json!({ "order_id": "", "amount": 12.5, "currency": "eur" });
        let first = app.post_json("/payments", Some(KEY), &[], &invalid).await;
        let body = problem(first, 422, "validation-failed").await;
        assert_eq!(body["errors"].as_array().unwrap().len(), 3);
        let again = app.post_json("/payments", Some(KEY), &[], &invalid).await;
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.json::<Value>().await.unwrap(), body);
        assert_eq!(payments(app).await, 0);
    }
}
