//! Queued mode through the real endpoint, on both backends: the delivery is
//! acknowledged once its job is committed, a redelivery replays that
//! acknowledgement, the handlers run exactly once on a worker, failures are
//! retried with backoff under the injected clock and end `dead`, a paused
//! endpoint still acknowledges, and ordered deliveries run oldest first with
//! stale ones skipped by the payments handler.

use crate::both_backends_with;
use crate::helpers::{SECRET, TestAppBuilder, payment};
use idempotent_receiver::clock::Clock;
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::maintenance::run_due;
use idempotent_receiver::store::DbConn;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Fails its first `n` calls.
pub(crate) struct FailFirst(pub(crate) AtomicUsize);

#[async_trait::async_trait(?Send)]
impl Handler for FailFirst {
    async fn handle(&self, _: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        let left = self.0.load(Ordering::SeqCst);
        if left > 0 {
            self.0.store(left - 1, Ordering::SeqCst);
            return Err(HandlerError::Failed(
                "the fulfilment service is down".into(),
            ));
        }
        Ok(None)
    }
}

/// A queued endpoint `q` whose workers the test drives (`queue_workers =
/// 0`), retrying 10 s, 20 s, ... up to 3 attempts.
fn queued(handlers: &str) -> impl Fn(TestAppBuilder) -> TestAppBuilder {
    let handlers = handlers.to_owned();
    move |builder: TestAppBuilder| {
        builder.top_level("queue_workers = 0\n").endpoints_toml(&format!(
            "[endpoints.q]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [{handlers}]\nmode = \"queued\"\nmax_attempts = 3\nretry_backoff = \"10s\"\nretry_backoff_max = \"1m\"\n"
        ))
    }
}

fn plain(builder: TestAppBuilder) -> TestAppBuilder {
    queued("\"record\", \"payments\"")(builder)
}

fn failing_twice(builder: TestAppBuilder) -> TestAppBuilder {
    queued("\"record\", \"payments\", \"fail-first\"")(
        builder.handler("fail-first", FailFirst(AtomicUsize::new(2))),
    )
}

fn failing_always(builder: TestAppBuilder) -> TestAppBuilder {
    queued("\"record\", \"fail-first\"")(
        builder.handler("fail-first", FailFirst(AtomicUsize::new(usize::MAX))),
    )
}

async fn job_state(app: &crate::helpers::TestApp, id: &str) -> (String, i32, Option<String>) {
    let mut conn = app.store.conn().await.unwrap();
    let job = conn.job("q", id).await.unwrap().expect("a job");
    (job.state, job.attempts, job.last_error)
}

both_backends_with! { plain;
    async fn a_queued_delivery_is_acknowledged_then_processed_once(app) {
        let body = payment("pay_q1", 1200);
        let first = app.deliver_to("q", "msg_q1", &body).await;
        assert_eq!(first.status(), 202);
        let ack = first.bytes().await.unwrap();
        let ack_json: Value = serde_json::from_slice(&ack).unwrap();
        assert_eq!(ack_json["status"], "queued");
        // Acknowledged, committed, not yet processed.
        assert_eq!(app.count("events").await, 0);
        assert_eq!(job_state(app, "msg_q1").await.0, "queued");

        let again = app.deliver_to("q", "msg_q1", &body).await;
        assert_eq!(again.status(), 202);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.bytes().await.unwrap(), ack);

        let report = run_due(&app.webhooks, 100).await.unwrap();
        assert_eq!(report.done, 1);
        assert_eq!(app.count("events").await, 1);
        assert_eq!(app.ledger_rows().await, 1);
        assert_eq!(job_state(app, "msg_q1").await.0, "done");
        // Nothing more is due, and a redelivery still replays the ack.
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().ran(), 0);
        let later = app.deliver_to("q", "msg_q1", &body).await;
        assert_eq!(later.bytes().await.unwrap(), ack);
        assert_eq!(app.ledger_rows().await, 1);
    }
}

both_backends_with! { plain;
    async fn parallel_copies_of_a_queued_delivery_enqueue_one_job(app) {
        let body = payment("pay_qp", 500);
        let copies = (0..10).map(|_| app.deliver_to("q", "msg_qp", &body));
        for answer in futures_util::future::join_all(copies).await {
            let status = answer.status().as_u16();
            assert!(status == 202 || status == 409, "{status}");
        }
        assert_eq!(app.count("queue_jobs").await, 1);
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().done, 1);
        assert_eq!(app.ledger_rows().await, 1);
    }
}

both_backends_with! { failing_twice;
    async fn a_failure_is_retried_after_its_backoff_and_then_succeeds_once(app) {
        let body = payment("pay_qr", 800);
        assert_eq!(app.deliver_to("q", "msg_qr", &body).await.status(), 202);

        let first = run_due(&app.webhooks, 100).await.unwrap();
        assert_eq!(first.retrying, 1);
        let (state, attempts, error) = job_state(app, "msg_qr").await;
        assert_eq!((state.as_str(), attempts), ("retrying", 1));
        assert!(error.unwrap().contains("fulfilment service is down"));
        // Its writes were rolled back with the failure.
        assert_eq!(app.ledger_rows().await, 0);

        // Not due before its backoff (10 s, jittered into 5..10 s).
        app.clock.advance(Duration::from_secs(4));
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().ran(), 0);
        app.clock.advance(Duration::from_secs(6));
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().retrying, 1);
        assert_eq!(job_state(app, "msg_qr").await.1, 2);

        // The second backoff is 20 s (10..20 s).
        app.clock.advance(Duration::from_secs(20));
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().done, 1);
        assert_eq!(job_state(app, "msg_qr").await.0, "done");
        assert_eq!(app.ledger_rows().await, 1);
        assert_eq!(app.count("events").await, 1);
    }
}

both_backends_with! { failing_always;
    async fn past_max_attempts_a_delivery_is_dead_with_its_error_and_can_be_retried(app) {
        let body = payment("pay_qd", 300);
        assert_eq!(app.deliver_to("q", "msg_qd", &body).await.status(), 202);
        for _ in 0..3 {
            run_due(&app.webhooks, 100).await.unwrap();
            app.clock.advance(Duration::from_secs(60));
        }
        let (state, attempts, error) = job_state(app, "msg_qd").await;
        assert_eq!((state.as_str(), attempts), ("dead", 3));
        assert!(error.unwrap().contains("fulfilment service is down"));
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().ran(), 0);
        let mut conn = app.store.conn().await.unwrap();
        let history = conn.history("q", "msg_qd").await.unwrap();
        let kinds: Vec<&str> = history.iter().map(|h| h.kind.as_str()).collect();
        assert_eq!(kinds, ["retry-scheduled", "retry-scheduled", "dead"]);

        // An operator retries it: due again, attempts counted afresh.
        let now = app.clock.now().naive_utc();
        assert!(conn.requeue_job("q", "msg_qd", now).await.unwrap());
        drop(conn);
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().retrying, 1);
        assert_eq!(job_state(app, "msg_qd").await.1, 1);
    }
}

both_backends_with! { plain;
    async fn a_paused_endpoint_still_acknowledges_and_runs_once_resumed(app) {
        let now = app.clock.now().naive_utc();
        app.store.conn().await.unwrap().pause("q", "ops", now).await.unwrap();
        let body = payment("pay_qpause", 100);
        assert_eq!(app.deliver_to("q", "msg_qpause", &body).await.status(), 202);
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().ran(), 0);
        assert!(app.store.conn().await.unwrap().resume("q").await.unwrap());
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().done, 1);
        assert_eq!(app.ledger_rows().await, 1);
    }
}

/// Ordered by `/data/object_id`, in the order of `/created` (Unix seconds).
fn ordered(builder: TestAppBuilder) -> TestAppBuilder {
    builder.top_level("queue_workers = 0\n").endpoints_toml(&format!(
        "[endpoints.q]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\", \"payments\"]\nmode = \"queued\"\nordering_key = \"/data/object_id\"\nevent_time = \"/created\"\n"
    ))
}

fn versioned(id: &str, created: i64) -> Vec<u8> {
    json!({"type": "payment.succeeded", "created": created,
           "data": {"id": id, "object_id": "sub_1", "order_id": "o1", "amount": 100, "currency": "EUR"}})
    .to_string()
    .into_bytes()
}

both_backends_with! { ordered;
    async fn deliveries_of_one_object_run_oldest_event_first_and_an_older_one_is_stale(app) {
        // The newer event arrives first, then the older one.
        assert_eq!(app.deliver_to("q", "evt_new", &versioned("pay_new", 2000)).await.status(), 202);
        assert_eq!(app.deliver_to("q", "evt_old", &versioned("pay_old", 1000)).await.status(), 202);
        // One at a time, oldest event first.
        let mut conn = app.store.conn().await.unwrap();
        let owner_until = app.clock.now().naive_utc() + chrono::TimeDelta::seconds(60);
        let now = app.clock.now().naive_utc();
        let first = conn.take_due("test", owner_until, now).await.unwrap().unwrap();
        assert_eq!(first.delivery_id, "evt_old");
        // While it runs, the newer one is not due.
        assert!(conn.take_due("test", owner_until, now).await.unwrap().is_none());
        drop(conn);
        // Let the test's lease lapse; the worker takes both, in order.
        app.clock.advance(Duration::from_secs(61));
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().done, 2);
        assert_eq!(app.ledger_rows().await, 2);

        // A third event older than the newest processed is stale: recorded,
        // acknowledged, not booked.
        assert_eq!(app.deliver_to("q", "evt_older", &versioned("pay_older", 1500)).await.status(), 202);
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().done, 1);
        assert_eq!(app.count("events").await, 3);
        assert_eq!(app.ledger_rows().await, 2);
    }
}

/// A queued endpoint with the real workers running.
fn with_workers(builder: TestAppBuilder) -> TestAppBuilder {
    builder.top_level("queue_workers = 2\nqueue_poll = \"1h\"\n").endpoints_toml(&format!(
        "[endpoints.q]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\", \"payments\"]\nmode = \"queued\"\n"
    ))
}

both_backends_with! { with_workers;
    async fn the_workers_wake_on_an_enqueue_without_polling(app) {
        // queue_poll is an hour: only the wake-up can run these in time.
        for n in 0..5 {
            let body = payment(&format!("pay_w{n}"), 100);
            assert_eq!(app.deliver_to("q", &format!("msg_w{n}"), &body).await.status(), 202);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while app.ledger_rows().await < 5 {
            assert!(std::time::Instant::now() < deadline, "the workers did not run the jobs");
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(app.ledger_rows().await, 5);
    }
}

both_backends_with! { plain;
    async fn a_key_whose_job_has_not_run_outlives_its_retention(app) {
        use idempotent_receiver::maintenance::{PurgeOptions, purge};
        let purge_now = || async {
            let options = PurgeOptions { batch: 100, pause: Duration::from_millis(1), dry_run: false };
            purge(&app.store, &app.settings.retention_policy(), &options).await.unwrap()
        };
        let now = app.clock.now().naive_utc();
        app.store.conn().await.unwrap().pause("q", "ops", now).await.unwrap();
        let body = payment("pay_qkeep", 100);
        assert_eq!(app.deliver_to("q", "msg_qkeep", &body).await.status(), 202);
        // Past the 72 h retention with its job still queued (the endpoint
        // is paused): the purge keeps the key, and a redelivery finds the
        // same job (one row per key) rather than a second one.
        app.clock.advance(Duration::from_secs(73 * 3600));
        purge_now().await;
        assert_eq!(app.count("deliveries").await, 1);
        let again = app.deliver_to("q", "msg_qkeep", &body).await;
        assert_eq!(again.status(), 202);
        assert_eq!(app.count("queue_jobs").await, 1);

        // Once run, the key and its job are purged like any other.
        app.store.conn().await.unwrap().resume("q").await.unwrap();
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().done, 1);
        assert_eq!(app.ledger_rows().await, 1);
        app.clock.advance(Duration::from_secs(73 * 3600));
        purge_now().await;
        assert_eq!(app.count("deliveries").await, 0);
        assert_eq!(app.count("queue_jobs").await, 0);
    }
}
