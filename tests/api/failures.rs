use crate::both_backends;
use crate::helpers::{Backend, ENDPOINT, TestApp, payment, problem};
use idempotent_receiver::clock::Clock;
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::store::{DbConn, NewClaim};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Fails its first `n` calls, after `record` and `payments` have written.
struct FailFirst(AtomicUsize);

#[async_trait::async_trait(?Send)]
impl Handler for FailFirst {
    async fn handle(&self, _: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        let left = self.0.load(Ordering::SeqCst);
        if left > 0 {
            self.0.store(left - 1, Ordering::SeqCst);
            return Err(HandlerError::Failed("the downstream ledger said no".into()));
        }
        Ok(None)
    }
}

async fn handler_failure_releases_the_key(backend: Backend) {
    let Some(app) = TestApp::builder(backend)
        .handler("fail-first", FailFirst(AtomicUsize::new(1)))
        .spawn_if_available()
        .await
    else {
        return;
    };
    let body = payment("pay_retry", 700);
    let failed = app.deliver("msg_retry", &body).await;
    let problem = problem(failed, 500, "processing-failed").await;
    assert!(
        !problem.to_string().contains("downstream ledger"),
        "no internals leak"
    );
    // Everything the handlers wrote was rolled back, and the key is free.
    assert_eq!(app.ledger_rows().await, 0);
    assert_eq!(app.count("events").await, 0);
    assert!(app.delivery("msg_retry").await.is_none());

    let retried = app.deliver("msg_retry", &body).await;
    assert_eq!(retried.status(), 200);
    assert!(retried.headers().get("idempotent-replayed").is_none());
    let again = app.deliver("msg_retry", &body).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(app.ledger_rows().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failure_releases_the_key_and_the_retry_succeeds_once_sqlite() {
    handler_failure_releases_the_key(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failure_releases_the_key_and_the_retry_succeeds_once_postgres() {
    handler_failure_releases_the_key(Backend::Postgres).await;
}

/// Leaves a claim as a process that died mid-way would: `in_progress`, owned
/// by someone else, with its lease ending at `lease_end`.
async fn leave_claim(app: &TestApp, id: &str, body: &[u8], lease_end: chrono::NaiveDateTime) {
    let hash = hex::encode(Sha256::digest(body));
    let mut conn = app.store.conn().await.unwrap();
    let inserted = conn
        .insert_claim(&NewClaim {
            endpoint: ENDPOINT,
            delivery_id: id,
            request_hash: &hash,
            status: "in_progress",
            event_type: Some("payment.succeeded"),
            attempts: 1,
            lease_owner: Some("pid1-dead/0000"),
            lease_expires_at: Some(lease_end),
            received_at: app.clock.naive_now() - chrono::TimeDelta::minutes(5),
            body_key: None,
            request_body: Some(body),
        })
        .await
        .unwrap();
    assert!(inserted);
}

both_backends! {
    async fn a_stale_claim_whose_lease_expired_is_taken_over_and_processed_once(app) {
        let body = payment("pay_stale", 800);
        let expired = app.clock.naive_now() - chrono::TimeDelta::seconds(1);
        leave_claim(app, "msg_stale", &body, expired).await;

        let response = app.deliver("msg_stale", &body).await;
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["attempt"], 2);
        let row = app.delivery("msg_stale").await.unwrap();
        assert_eq!(row.status, "completed");
        assert_eq!(row.attempts, 2);
        assert_eq!(app.ledger_rows().await, 1);

        let again = app.deliver("msg_stale", &body).await;
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(app.ledger_rows().await, 1);
    }
}

both_backends! {
    async fn a_claim_with_a_live_lease_gets_409_with_retry_after_and_runs_nothing(app) {
        let body = payment("pay_busy", 800);
        let live = app.clock.naive_now() + chrono::TimeDelta::seconds(30);
        leave_claim(app, "msg_busy", &body, live).await;

        let started = std::time::Instant::now();
        let response = app.deliver("msg_busy", &body).await;
        assert_eq!(response.status(), 409);
        // It waited (in_progress_wait = 500ms in tests) before giving up.
        assert!(started.elapsed() >= std::time::Duration::from_millis(400), "{:?}", started.elapsed());
        let retry_after: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=30).contains(&retry_after), "Retry-After {retry_after}");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["type"], "urn:idempotent-receiver:problem:in-progress");
        assert_eq!(app.ledger_rows().await, 0);
        let row = app.delivery("msg_busy").await.unwrap();
        assert_eq!(row.lease_owner.as_deref(), Some("pid1-dead/0000"));
        assert_eq!(row.attempts, 1);
    }
}

both_backends! {
    async fn a_claim_of_another_payload_is_a_conflict_even_while_in_progress(app) {
        let live = app.clock.naive_now() + chrono::TimeDelta::seconds(30);
        leave_claim(app, "msg_mixed", &payment("pay_a", 1), live).await;
        let response = app.deliver("msg_mixed", &payment("pay_b", 2)).await;
        assert_eq!(response.status(), 409);
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["type"], "urn:idempotent-receiver:problem:key-reused");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_gets_503_with_retry_after() {
    // Nothing listens on port 1: every connection attempt is refused.
    let app = TestApp::builder(Backend::Postgres)
        .database_url("postgres://root@127.0.0.1:1/nothing")
        .spawn()
        .await;
    let response = app.deliver("msg_down", &payment("pay_down", 1)).await;
    assert!(response.headers().contains_key("retry-after"));
    let problem = problem(response, 503, "storage-unavailable").await;
    assert!(
        !problem.to_string().contains("127.0.0.1:1"),
        "no internals leak"
    );

    let ready = app
        .client
        .get(format!("{}/readyz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let alive = app
        .client
        .get(format!("{}/healthz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(alive.status(), 200);
}

both_backends! {
    async fn parallel_retries_racing_for_one_stale_claim_take_it_over_once(app) {
        let body = payment("pay_race", 800);
        let expired = app.clock.naive_now() - chrono::TimeDelta::seconds(1);
        leave_claim(app, "msg_race", &body, expired).await;

        let retries = (0..16).map(|i| {
            let headers = app.signed_headers("msg_race", crate::helpers::now() - i, &body);
            let body = body.clone();
            async move { app.post(&headers, body).await.status().as_u16() }
        });
        let statuses = futures_util::future::join_all(retries).await;
        assert!(statuses.iter().all(|s| *s == 200 || *s == 409), "{statuses:?}");
        assert!(statuses.contains(&200));
        // One takeover: the dead owner's attempt plus exactly one more.
        let row = app.delivery("msg_race").await.unwrap();
        assert_eq!(row.status, "completed");
        assert_eq!(row.attempts, 2);
        assert_eq!(app.ledger_rows().await, 1);
    }
}
