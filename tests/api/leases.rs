//! Work outside the database: the forward handler, leases, the takeover race
//! with a late completion, reconciliation and operator reprocessing.

use crate::helpers::{Backend, ENDPOINT, TestApp, payment, problem};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use idempotent_receiver::clock::Clock;
use idempotent_receiver::engine::{Claim, ClaimRequest, Engine, EngineError, EngineOptions};
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::maintenance;
use idempotent_receiver::store::{DbConn, NewClaim, StoredResponse};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A downstream that deduplicates on `Idempotency-Key`, as a well-behaved
/// payment or fulfilment API does, and can be told to fail.
#[derive(Clone, Default)]
struct Downstream {
    /// Every request seen: (idempotency key, body).
    seen: Arc<Mutex<Vec<(String, String)>>>,
    /// Answers already given, by key.
    answers: Arc<Mutex<HashMap<String, Value>>>,
    /// How many of the next requests get a 500.
    failures: Arc<AtomicUsize>,
    /// Requests with this key wait for [`Downstream::release`] before they
    /// are answered: an outside call in flight for as long as a test needs.
    held: Arc<Mutex<Option<String>>>,
    /// Told when a held request has arrived.
    arrived: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
}

impl Downstream {
    async fn start(&self) -> String {
        let state = self.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(state.clone()))
                .route("/ingest", web::post().to(ingest))
        })
        .workers(1)
        .bind("127.0.0.1:0")
        .unwrap();
        let port = server.addrs()[0].port();
        tokio::spawn(server.run());
        format!("http://127.0.0.1:{port}/ingest")
    }

    fn requests(&self) -> Vec<(String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

async fn ingest(req: HttpRequest, body: String, downstream: web::Data<Downstream>) -> HttpResponse {
    let key = req
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    downstream
        .seen
        .lock()
        .unwrap()
        .push((key.clone(), body.clone()));
    let held = downstream.held.lock().unwrap().as_deref() == Some(key.as_str());
    if held {
        downstream.arrived.notify_one();
        downstream.release.notified().await;
    }
    if downstream
        .failures
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return HttpResponse::InternalServerError().finish();
    }
    if body.contains("refuse-me") {
        return HttpResponse::UnprocessableEntity().finish();
    }
    let mut answers = downstream.answers.lock().unwrap();
    let n = answers.len() + 1;
    let answer = answers
        .entry(key)
        .or_insert_with(|| json!({ "shipment": format!("shp_{n}") }))
        .clone();
    HttpResponse::Created().json(answer)
}

async fn forwarding_app(backend: Backend, downstream: &Downstream) -> Option<TestApp> {
    forwarding_app_with_timeout(backend, downstream, "2s").await
}

/// A forwarder whose calls may take up to `timeout`.
async fn forwarding_app_with_timeout(
    backend: Backend,
    downstream: &Downstream,
    timeout: &str,
) -> Option<TestApp> {
    let url = downstream.start().await;
    TestApp::builder(backend)
        .endpoints_toml(&format!(
            "[forwarders.downstream]\nurl = {url:?}\ntimeout = {timeout:?}\nretries = 1\n"
        ))
        .handler_name("downstream")
        .spawn_if_available()
        .await
}

async fn history_kinds(app: &TestApp, id: &str) -> Vec<String> {
    let mut conn = app.store.conn().await.unwrap();
    conn.history(ENDPOINT, id)
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.kind)
        .collect()
}

async fn forwarded_once_with_the_key_and_replayed(backend: Backend) {
    let downstream = Downstream::default();
    let Some(app) = forwarding_app(backend, &downstream).await else {
        return;
    };
    let body = payment("pay_fwd", 2500);
    let first = app.deliver("msg_fwd", &body).await;
    assert_eq!(first.status(), 200);
    let first_bytes = first.bytes().await.unwrap();
    let answer: Value = serde_json::from_slice(&first_bytes).unwrap();
    assert_eq!(answer["effects"]["downstream"]["status"], 201);
    assert_eq!(answer["effects"]["downstream"]["body"]["shipment"], "shp_1");
    assert_eq!(answer["effects"]["payments"]["kind"], "charge");

    let again = app.deliver("msg_fwd", &body).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.bytes().await.unwrap(), first_bytes);
    let requests = downstream.requests();
    assert_eq!(requests.len(), 1, "the downstream is called once");
    assert_eq!(requests[0].0, "shop:msg_fwd");
    assert_eq!(
        requests[0].1.as_bytes(),
        body.as_slice(),
        "the verified body is forwarded as received"
    );
    assert_eq!(app.ledger_rows().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_event_reaches_the_downstream_once_with_the_delivery_key_sqlite() {
    forwarded_once_with_the_key_and_replayed(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_event_reaches_the_downstream_once_with_the_delivery_key_postgres() {
    forwarded_once_with_the_key_and_replayed(Backend::Postgres).await;
}

async fn a_failing_downstream_releases_the_key(backend: Backend) {
    let downstream = Downstream::default();
    let Some(app) = forwarding_app(backend, &downstream).await else {
        return;
    };
    downstream.failures.store(2, Ordering::SeqCst);
    let body = payment("pay_down", 100);
    problem(
        app.deliver("msg_down", &body).await,
        500,
        "processing-failed",
    )
    .await;
    // One try and one bounded retry, both with the same key; then released.
    let requests = downstream.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|(key, _)| key == "shop:msg_down"));
    assert!(
        app.delivery("msg_down").await.is_none(),
        "the key is free for the provider's retry"
    );
    assert_eq!(
        app.ledger_rows().await,
        0,
        "no database effect without the downstream's"
    );
    assert_eq!(history_kinds(&app, "msg_down").await, ["released"]);

    let retry = app.deliver("msg_down", &body).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(app.ledger_rows().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_downstream_releases_the_key_after_bounded_retries_sqlite() {
    a_failing_downstream_releases_the_key(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_downstream_releases_the_key_after_bounded_retries_postgres() {
    a_failing_downstream_releases_the_key(Backend::Postgres).await;
}

/// Leaves `id` as an owner that died after the outside work would have run.
async fn abandon(app: &TestApp, id: &str, body: &[u8]) {
    let hash = hex::encode(Sha256::digest(body));
    let mut conn = app.store.conn().await.unwrap();
    let past = app.clock.naive_now() - chrono::TimeDelta::seconds(5);
    let inserted = conn
        .insert_claim(&NewClaim {
            endpoint: ENDPOINT,
            delivery_id: id,
            request_hash: &hash,
            status: "in_progress",
            event_type: Some("payment.succeeded"),
            attempts: 1,
            lease_owner: Some("pid1-dead/0000"),
            lease_expires_at: Some(past),
            received_at: past,
            body_key: None,
            request_body: Some(body),
        })
        .await
        .unwrap();
    assert!(inserted);
}

async fn reconciliation(backend: Backend) {
    let downstream = Downstream::default();
    let Some(app) = forwarding_app(backend, &downstream).await else {
        return;
    };
    // The downstream had acted before the owner died: it knows the key.
    downstream.answers.lock().unwrap().insert(
        "shop:msg_done".into(),
        json!({ "shipment": "shp_before_crash" }),
    );
    let done = payment("pay_done", 700);
    abandon(&app, "msg_done", &done).await;
    // This one the downstream refuses: it never happened.
    let never =
        serde_json::to_vec(&json!({"type": "note", "data": {"text": "refuse-me"}})).unwrap();
    abandon(&app, "msg_never", &never).await;

    let report = maintenance::reconcile(&app.webhooks(), 100).await.unwrap();
    assert_eq!(
        (
            report.examined,
            report.completed,
            report.released,
            report.unknown
        ),
        (2, 1, 1, 0),
        "{report:?}"
    );

    let row = app.delivery("msg_done").await.unwrap();
    assert_eq!(row.status, "completed");
    let stored: Value = serde_json::from_slice(&row.response_body.unwrap()).unwrap();
    assert_eq!(
        stored["effects"]["downstream"]["body"]["shipment"],
        "shp_before_crash"
    );
    assert_eq!(
        app.ledger_rows().await,
        1,
        "the database half ran exactly once"
    );
    assert!(
        history_kinds(&app, "msg_done")
            .await
            .contains(&"reconciled".to_owned())
    );
    assert!(
        app.delivery("msg_never").await.is_none(),
        "released for the provider's retry"
    );

    // The provider's retry of the reconciled one is a replay.
    let retry = app.deliver("msg_done", &done).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(app.ledger_rows().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_completes_what_happened_and_releases_what_did_not_sqlite() {
    reconciliation(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_completes_what_happened_and_releases_what_did_not_postgres() {
    reconciliation(Backend::Postgres).await;
}

/// The background reconciler finds a claim abandoned by the app's clock,
/// completes it, and ends when stopped (it used to run until the process
/// exited, one thread per app).
async fn background_reconciler(backend: Backend) {
    let downstream = Downstream::default();
    let Some(app) = forwarding_app(backend, &downstream).await else {
        return;
    };
    downstream
        .answers
        .lock()
        .unwrap()
        .insert("shop:msg_bg".into(), json!({ "shipment": "shp_bg" }));
    let body = payment("pay_bg", 300);
    abandon(&app, "msg_bg", &body).await;
    // Its lease ended 5 s ago by the app's clock; a minute earlier it is live.
    app.clock
        .set(app.clock.now() - chrono::TimeDelta::minutes(1));
    let live = maintenance::reconcile(&app.webhooks(), 100).await.unwrap();
    assert_eq!(live.examined, 0, "a live lease is not reconciled");
    let task = maintenance::ReconcileTask::new(app.webhooks(), Duration::from_millis(20))
        .expect("a non-zero interval");
    let reconciler = task.spawn().expect("the reconciler starts");
    app.clock.advance(Duration::from_secs(60));
    // Waits for a pass of the reconciler's own timer, not for the clock.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while app.delivery("msg_bg").await.unwrap().status != "completed" {
        assert!(
            std::time::Instant::now() < deadline,
            "the background reconciler did not complete the claim"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::timeout(Duration::from_secs(10), reconciler.stop())
        .await
        .expect("the reconciler stops when told");
    assert_eq!(app.ledger_rows().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_reconciler_follows_the_clock_and_stops_when_told_sqlite() {
    background_reconciler(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_reconciler_follows_the_clock_and_stops_when_told_postgres() {
    background_reconciler(Backend::Postgres).await;
}

fn claim_request() -> ClaimRequest {
    ClaimRequest {
        scope: "race".into(),
        key: "k1".into(),
        fingerprint: "f1".into(),
        event_type: None,
        body_key: None,
        retention: None,
        payload: None,
    }
}

async fn write_ledger_row(conn: &mut DbConn, by: &str) {
    use diesel::ExpressionMethods;
    use idempotent_receiver::store::schema::ledger_entries as l;
    let row = (
        l::endpoint.eq("race"),
        l::delivery_id.eq("k1"),
        l::kind.eq("charge"),
        l::payment_id.eq(by),
        l::amount.eq(1_i64),
        l::currency.eq("EUR"),
        l::created_at.eq(chrono::Utc::now().naive_utc()),
    );
    idempotent_receiver::with_conn!(conn, |c| diesel_async::RunQueryDsl::execute(
        diesel::insert_into(l::table).values(row),
        c
    )
    .await)
    .unwrap();
}

fn answer(by: &str) -> StoredResponse {
    StoredResponse {
        status: 200,
        content_type: "text/plain".into(),
        body: by.as_bytes().to_vec().into(),
        location: None,
    }
}

async fn takeover_race(backend: Backend) {
    let Some(app) = TestApp::spawn_if_available(backend).await else {
        return;
    };
    let options = EngineOptions {
        lease: Duration::from_secs(60),
        in_progress_wait: Duration::from_millis(100),
        ..EngineOptions::default()
    };
    let engine = Engine::new(app.store.clone(), options);

    let Ok(Claim::Fresh(first)) = engine.claim(&claim_request()).await else {
        panic!("the first claim")
    };
    let slow = first.commit_claim().await.unwrap();
    // While the lease is live, another attempt is refused.
    assert!(matches!(
        engine.claim(&claim_request()).await,
        Ok(Claim::InProgress { .. })
    ));

    // The first owner stalls past its lease (no renewal); a retry takes over.
    app.clock.advance(Duration::from_secs(61));
    let Ok(Claim::Fresh(mut second)) = engine.claim(&claim_request()).await else {
        panic!("the takeover")
    };
    assert!(second.claimed().taken_over);
    write_ledger_row(second.conn(), "second").await;
    second.complete(&answer("second")).await.unwrap();

    // The original owner wakes up and tries to finish: fenced out, and its
    // effects roll back.
    let mut late = slow.begin().await.unwrap();
    write_ledger_row(late.conn(), "late").await;
    assert!(matches!(
        late.complete(&answer("late")).await,
        Err(EngineError::LeaseLost)
    ));

    assert_eq!(app.ledger_rows().await, 1, "only the takeover's effect");
    let mut conn = app.store.conn().await.unwrap();
    let row = conn.find_delivery("race", "k1").await.unwrap().unwrap();
    assert_eq!(row.attempts, 2);
    assert_eq!(row.response_body.unwrap(), b"second");
    drop(conn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_completion_after_a_takeover_fails_and_rolls_back_sqlite() {
    takeover_race(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_completion_after_a_takeover_fails_and_rolls_back_postgres() {
    takeover_race(Backend::Postgres).await;
}

async fn renewal(backend: Backend) {
    let Some(app) = TestApp::spawn_if_available(backend).await else {
        return;
    };
    let options = EngineOptions {
        lease: Duration::from_millis(300),
        in_progress_wait: Duration::from_millis(50),
        ..EngineOptions::default()
    };
    let engine = Engine::new(app.store.clone(), options);
    let Ok(Claim::Fresh(first)) = engine.claim(&claim_request()).await else {
        panic!("the first claim")
    };
    let lease = first.commit_claim().await.unwrap();
    let renewal = lease.keep_alive(Duration::from_millis(300));
    // Over three lease lengths pass, in steps shorter than one; after each
    // step the worker renews (every third of its lease, by tokio's timer)
    // from the new now. Without the renewals the lease would have ended at
    // +300 ms.
    for _ in 0..5 {
        app.clock.advance(Duration::from_millis(200));
        let renewed_until = app.clock.naive_now() + chrono::TimeDelta::milliseconds(300);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let mut conn = app.store.conn().await.unwrap();
            let row = conn.find_delivery("race", "k1").await.unwrap().unwrap();
            if row.lease_expires_at >= Some(renewed_until) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the lease was not renewed"
            );
            // Waiting for the renewal task to run, not for time to pass.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert!(matches!(
        engine.claim(&claim_request()).await,
        Ok(Claim::InProgress { .. })
    ));
    renewal.abort();
    lease
        .begin()
        .await
        .unwrap()
        .complete(&answer("done"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_worker_keeps_its_lease_by_renewing_it_sqlite() {
    renewal(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_worker_keeps_its_lease_by_renewing_it_postgres() {
    renewal(Backend::Postgres).await;
}

/// Refuses payments until `fixed` is set: a bug, then its fix.
struct Buggy(Arc<AtomicBool>);

#[async_trait::async_trait(?Send)]
impl Handler for Buggy {
    async fn handle(&self, _: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        if self.0.load(Ordering::SeqCst) {
            Ok(Some(json!({ "fixed": true })))
        } else {
            Err(HandlerError::Rejected("a bug refused a valid event".into()))
        }
    }
}

async fn reprocessing(backend: Backend) {
    let fixed = Arc::new(AtomicBool::new(false));
    let Some(app) = TestApp::builder(backend)
        .handler("buggy", Buggy(fixed.clone()))
        .spawn_if_available()
        .await
    else {
        return;
    };
    let body = payment("pay_bug", 900);
    problem(app.deliver("msg_bug", &body).await, 422, "event-rejected").await;
    assert_eq!(app.ledger_rows().await, 0);

    fixed.store(true, Ordering::SeqCst);
    let response = maintenance::reprocess(&app.webhooks(), ENDPOINT, "msg_bug", "alice")
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(app.ledger_rows().await, 1, "the handlers ran again");
    let replay = app.deliver("msg_bug", &body).await;
    assert_eq!(replay.status(), 200, "redeliveries now get the new answer");
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let row = app.delivery("msg_bug").await.unwrap();
    assert_eq!(row.attempts, 2);
    let mut conn = app.store.conn().await.unwrap();
    let history = conn.history(ENDPOINT, "msg_bug").await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].kind, "reprocessed");
    assert_eq!(history[0].actor.as_deref(), Some("alice"));
    drop(conn);
    assert!(matches!(
        maintenance::reprocess(&app.webhooks(), ENDPOINT, "msg_nope", "alice").await,
        Err(maintenance::ReprocessError::NotFound { .. })
    ));

    // Past the retention, the purge forgets the key and its history together.
    app.age_delivery("msg_bug", chrono::TimeDelta::days(4))
        .await;
    let policy = app.settings.retention_policy();
    let options = maintenance::PurgeOptions::from_settings(&app.settings.purge);
    maintenance::purge(&app.store, &policy, &options)
        .await
        .unwrap();
    assert!(app.delivery("msg_bug").await.is_none());
    assert!(history_kinds(&app, "msg_bug").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_reprocesses_a_delivery_after_a_bug_fix_sqlite() {
    reprocessing(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_reprocesses_a_delivery_after_a_bug_fix_postgres() {
    reprocessing(Backend::Postgres).await;
}

async fn reprocessing_a_forward(backend: Backend) {
    let downstream = Downstream::default();
    // Long enough that the held forward below never times out.
    let Some(app) = forwarding_app_with_timeout(backend, &downstream, "60s").await else {
        return;
    };
    // Not a payment: running it again must not double a ledger entry.
    let body = serde_json::to_vec(&json!({"type": "note", "data": {"text": "again"}})).unwrap();
    let first = app.deliver("msg_again", &body).await;
    assert_eq!(first.status(), 200);
    let first_bytes = first.bytes().await.unwrap();

    // A reprocessing whose forward fails leaves the earlier answer in place
    // and the key free: repeats replay it, and the next reprocessing runs.
    downstream.failures.store(2, Ordering::SeqCst);
    let failed = maintenance::reprocess(&app.webhooks(), ENDPOINT, "msg_again", "alice").await;
    assert!(
        matches!(failed, Err(maintenance::ReprocessError::Failed(_))),
        "{failed:?}"
    );
    let row = app.delivery("msg_again").await.unwrap();
    assert_eq!(row.status, "completed");
    assert_eq!(row.response_body.as_deref(), Some(&first_bytes[..]));
    assert_eq!(row.lease_owner, None, "the reprocessing's lease is gone");
    let repeat = app.deliver("msg_again", &body).await;
    assert_eq!(repeat.headers()["idempotent-replayed"], "true");
    assert_eq!(repeat.bytes().await.unwrap(), first_bytes);

    // While a reprocessing's forward is in flight, nothing of the database
    // is held: a fresh delivery is processed (on SQLite, through the one
    // write slot), a repeat gets the earlier answer, and a second operator
    // is told the key is busy.
    *downstream.held.lock().unwrap() = Some("shop:msg_again".into());
    let webhooks = app.webhooks();
    let reprocessing = maintenance::reprocess(&webhooks, ENDPOINT, "msg_again", "bob");
    let meanwhile = async {
        downstream.arrived.notified().await;
        let fresh = tokio::time::timeout(
            Duration::from_secs(20),
            app.deliver("msg_other", &payment("pay_other", 5)),
        )
        .await
        .expect("a fresh delivery is not held up by a reprocessing");
        assert_eq!(fresh.status(), 200);
        let repeat = app.deliver("msg_again", &body).await;
        assert_eq!(repeat.headers()["idempotent-replayed"], "true");
        assert_eq!(repeat.bytes().await.unwrap(), first_bytes);
        assert!(matches!(
            maintenance::reprocess(&webhooks, ENDPOINT, "msg_again", "carol").await,
            Err(maintenance::ReprocessError::Busy)
        ));
        downstream.release.notify_one();
    };
    let (reprocessed, ()) = tokio::join!(reprocessing, meanwhile);
    let response = reprocessed.unwrap();
    assert_eq!(response.status, 200);
    let answer: Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!(answer["attempt"], 2);
    assert_eq!(answer["effects"]["downstream"]["status"], 201);
    assert_eq!(app.ledger_rows().await, 1, "the fresh delivery's");

    let row = app.delivery("msg_again").await.unwrap();
    assert_eq!(row.attempts, 2);
    assert_eq!(row.lease_owner, None);
    assert_eq!(row.response_body.as_deref(), Some(&response.body[..]));
    let repeat = app.deliver("msg_again", &body).await;
    assert_eq!(repeat.headers()["idempotent-replayed"], "true");
    assert_eq!(repeat.bytes().await.unwrap(), response.body);

    let mut conn = app.store.conn().await.unwrap();
    let history: Vec<_> = conn
        .history(ENDPOINT, "msg_again")
        .await
        .unwrap()
        .into_iter()
        .map(|h| (h.kind, h.actor.unwrap_or_default()))
        .collect();
    assert_eq!(
        history,
        [
            ("reprocess-failed".to_owned(), "alice".to_owned()),
            ("reprocessed".to_owned(), "bob".to_owned()),
        ]
    );
    drop(conn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reprocessing_holds_no_transaction_while_it_forwards_sqlite() {
    reprocessing_a_forward(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reprocessing_holds_no_transaction_while_it_forwards_postgres() {
    reprocessing_a_forward(Backend::Postgres).await;
}
