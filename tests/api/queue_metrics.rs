//! The queue's metrics on both backends: attempts by outcome, dead jobs and
//! the receipt-to-completion histogram counted by the workers; depth, the
//! oldest waiting job's age and pauses sampled from the database (by hand
//! here, as `run_due` is, under the injected clock; by the workers' process
//! in `serve`); and `/readyz` ready while a queue grows.
//!
//! The recorder is one per process and other tests use the endpoint `q`,
//! so each test here has endpoints of its own. The test clock runs on with
//! the system's between the moves a test makes, so times are asserted to
//! within a few seconds above what the test moved it by.

use crate::both_backends_with;
use crate::helpers::{SECRET, TestApp, TestAppBuilder, payment};
use crate::observability::{scrape, unique};
use crate::queue::FailFirst;
use idempotent_receiver::clock::Clock;
use idempotent_receiver::maintenance::run_due;
use idempotent_receiver::telemetry::metrics::QueueGauges;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

const JOBS: &str = "ir_queue_jobs";
const OLDEST_AGE: &str = "ir_queue_oldest_age_seconds";
const PAUSED: &str = "ir_queue_paused";
const ATTEMPTS: &str = "ir_queue_attempts_total";
const DEAD: &str = "ir_queue_dead_total";
const COMPLETION: &str = "ir_queue_completion_seconds";

/// How far the running test clock may get beyond the test's own moves.
const SLACK: f64 = 5.0;

/// Asserts `value` is `moved` (what the test advanced the clock by), or up
/// to [`SLACK`] more.
fn assert_about(value: f64, moved: f64, what: &str) {
    assert!(
        (moved..moved + SLACK).contains(&value),
        "{what}: {value}, moved {moved}"
    );
}

/// A queued endpoint named `prefix` and a fresh suffix, running `handler`
/// after `record`: two attempts, retried after 10 s (jittered into 5..10 s).
fn queued_endpoint(prefix: &str, handler: &str) -> String {
    format!(
        "[endpoints.{}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\", \"{handler}\"]\nmode = \"queued\"\nmax_attempts = 2\nretry_backoff = \"10s\"\nretry_backoff_max = \"1m\"\n",
        unique(prefix)
    )
}

/// The configured endpoint whose name starts with `prefix`.
fn named(app: &TestApp, prefix: &str) -> String {
    app.settings
        .endpoints
        .iter()
        .map(|e| e.name.clone())
        .find(|name| name.starts_with(prefix))
        .expect("the test's endpoint")
}

/// `endpoint`'s label and one more.
fn with<'a>(endpoint: &'a str, label: (&'a str, &'a str)) -> [(&'a str, &'a str); 2] {
    [("endpoint", endpoint), label]
}

/// `qe_…`, whose handler fails its first call, and `qd_…`, whose handler
/// always fails; the test drives the workers (`queue_workers = 0`).
fn failing_first_and_always(builder: TestAppBuilder) -> TestAppBuilder {
    builder
        .handler("fail-first", FailFirst(AtomicUsize::new(1)))
        .handler("fail-always", FailFirst(AtomicUsize::new(usize::MAX)))
        .top_level("queue_workers = 0\n")
        .endpoints_toml(&queued_endpoint("qe_", "fail-first"))
        .endpoints_toml(&queued_endpoint("qd_", "fail-always"))
}

both_backends_with! { failing_first_and_always;
    async fn queue_metrics_count_attempts_dead_jobs_completion_times_depth_age_and_pauses(app) {
        let (ok, bad) = (named(app, "qe_"), named(app, "qd_"));
        let mut gauges = QueueGauges::new([ok.clone(), bad.clone()]);
        let now = app.clock.now().naive_utc();
        app.store.conn().await.unwrap().pause(&bad, "ops", now).await.unwrap();
        for (endpoint, id) in [(&ok, "msg_qm1"), (&ok, "msg_qm2"), (&bad, "msg_qm3")] {
            assert_eq!(app.deliver_to(endpoint, id, &payment(id, 100)).await.status(), 202);
        }
        app.clock.advance(Duration::from_secs(20));
        gauges.sample(&app.store).await.unwrap();

        let waiting = scrape(app).await;
        let (of_ok, of_bad) = ([("endpoint", ok.as_str())], [("endpoint", bad.as_str())]);
        let state = |endpoint, state| with(endpoint, ("state", state));
        assert_eq!(waiting.value(JOBS, &state(&ok, "queued")), 2.0);
        assert_eq!(waiting.value(JOBS, &state(&bad, "queued")), 1.0);
        assert!(waiting.has(JOBS, &state(&ok, "retrying")), "every state is set, zero included");
        assert_eq!(waiting.value(JOBS, &state(&ok, "retrying")), 0.0);
        assert_about(waiting.value(OLDEST_AGE, &of_ok), 20.0, "ok's oldest");
        assert_about(waiting.value(OLDEST_AGE, &of_bad), 20.0, "bad's oldest");
        assert_eq!(waiting.value(PAUSED, &of_bad), 1.0);
        assert!(waiting.has(PAUSED, &of_ok));
        assert_eq!(waiting.value(PAUSED, &of_ok), 0.0);
        assert_eq!(waiting.value(ATTEMPTS, &of_ok), 0.0, "nothing ran yet");

        // One of `ok`'s two fails once; `bad` is paused.
        let first = run_due(&app.webhooks, 100).await.unwrap();
        assert_eq!((first.done, first.retrying, first.ran()), (1, 1, 2));
        assert!(app.store.conn().await.unwrap().resume(&bad).await.unwrap());
        // `bad`'s first attempt; `ok`'s retry is not due yet.
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().retrying, 1);
        app.clock.advance(Duration::from_secs(60));
        let last = run_due(&app.webhooks, 100).await.unwrap();
        assert_eq!((last.done, last.dead, last.ran()), (1, 1, 2));
        gauges.sample(&app.store).await.unwrap();

        let after = scrape(app).await;
        let outcome = |endpoint, outcome| with(endpoint, ("outcome", outcome));
        for (endpoint, done, retrying, dead) in [(ok.as_str(), 2.0, 1.0, 0.0), (bad.as_str(), 0.0, 1.0, 1.0)] {
            assert_eq!(after.value(ATTEMPTS, &outcome(endpoint, "done")), done, "{endpoint}");
            assert_eq!(after.value(ATTEMPTS, &outcome(endpoint, "retrying")), retrying, "{endpoint}");
            assert_eq!(after.value(ATTEMPTS, &outcome(endpoint, "dead")), dead, "{endpoint}");
            assert_eq!(after.value(ATTEMPTS, &outcome(endpoint, "lease_lost")), 0.0, "{endpoint}");
            assert_eq!(after.value(DEAD, &[("endpoint", endpoint)]), dead, "{endpoint}");
        }

        // Receipt to done, by the store's clock: 20 s for the first, 80 s
        // for the one retried.
        assert_eq!(after.value(&format!("{COMPLETION}_count"), &of_ok), 2.0);
        assert_about(after.value(&format!("{COMPLETION}_sum"), &of_ok), 100.0, "the sum");
        let bucket = |le| after.value(&format!("{COMPLETION}_bucket"), &with(&ok, ("le", le)));
        assert_eq!((bucket("10"), bucket("30"), bucket("60"), bucket("300"), bucket("+Inf")), (0.0, 1.0, 1.0, 2.0, 2.0));
        assert_eq!(after.value(&format!("{COMPLETION}_count"), &of_bad), 0.0, "a dead job never completes");
        assert!(after.text.contains(&format!("# TYPE {COMPLETION} histogram")));

        // The sample after: `ok` is empty, `bad` holds one dead job, which
        // waits for an operator rather than a worker; zeros are set, not
        // left at their last values.
        for state_name in ["queued", "running", "retrying", "dead"] {
            assert_eq!(after.value(JOBS, &state(&ok, state_name)), 0.0, "{state_name}");
        }
        assert_eq!(after.value(JOBS, &state(&bad, "dead")), 1.0);
        assert_eq!(after.value(JOBS, &state(&bad, "queued")), 0.0);
        assert_eq!(after.value(OLDEST_AGE, &of_ok), 0.0);
        assert_eq!(after.value(OLDEST_AGE, &of_bad), 0.0, "dead is not waiting");
        assert_eq!(after.value(PAUSED, &of_bad), 0.0);
    }
}

/// One queued endpoint named `prefix`…, booking payments, with `workers`.
fn one_queued(builder: TestAppBuilder, workers: &str, prefix: &str) -> TestAppBuilder {
    builder
        .top_level(workers)
        .endpoints_toml(&queued_endpoint(prefix, "payments"))
}

/// `qr_…`, whose jobs nothing runs.
fn unprocessed(builder: TestAppBuilder) -> TestAppBuilder {
    one_queued(builder, "queue_workers = 0\n", "qr_")
}

both_backends_with! { unprocessed;
    async fn readyz_stays_ready_while_a_queue_grows_unprocessed(app) {
        let endpoint = named(app, "qr_");
        for n in 0..20 {
            let id = format!("msg_qr{n}");
            assert_eq!(app.deliver_to(&endpoint, &id, &payment(&id, 100)).await.status(), 202);
            app.clock.advance(Duration::from_secs(60));
        }
        app.clock.advance(Duration::from_secs(2 * 3600));
        assert_eq!(app.count("events").await, 0, "nothing was processed");

        let ready = app.client.get(format!("{}/readyz", app.address)).send().await.unwrap();
        assert_eq!(ready.status(), 200);
        let body: serde_json::Value = ready.json().await.unwrap();
        assert_eq!(body["status"], "ready");

        // The backlog shows in the metrics instead: alert on those.
        let mut gauges = QueueGauges::new([endpoint.clone()]);
        gauges.sample(&app.store).await.unwrap();
        let scraped = scrape(app).await;
        assert_eq!(scraped.value(JOBS, &[("endpoint", &endpoint), ("state", "queued")]), 20.0);
        let oldest = scraped.value(OLDEST_AGE, &[("endpoint", &endpoint)]);
        assert_about(oldest, (20 * 60 + 2 * 3600) as f64, "the oldest job's age");
    }
}

/// `qw_…`, with a real worker; the poll is an hour, so only the wake-up
/// runs jobs.
fn with_a_worker(builder: TestAppBuilder) -> TestAppBuilder {
    one_queued(builder, "queue_workers = 1\nqueue_poll = \"1h\"\n", "qw_")
}

both_backends_with! { with_a_worker;
    async fn the_workers_process_samples_the_gauges_and_counts_its_attempts(app) {
        let endpoint = named(app, "qw_");
        let of_endpoint = [("endpoint", endpoint.as_str())];
        // The sampler's first pass runs as the workers start: the configured
        // endpoint's gauges appear at zero without anything queued.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let scraped = scrape(app).await;
            if scraped.has(PAUSED, &of_endpoint) {
                assert_eq!(scraped.value(PAUSED, &of_endpoint), 0.0);
                assert_eq!(scraped.value(JOBS, &of_endpoint), 0.0);
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the gauges were never sampled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        assert_eq!(app.deliver_to(&endpoint, "msg_qw", &payment("pay_qw", 100)).await.status(), 202);
        let done = with(&endpoint, ("outcome", "done"));
        while scrape(app).await.value(ATTEMPTS, &done) < 1.0 {
            assert!(std::time::Instant::now() < deadline, "the worker's attempt was not counted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let scraped = scrape(app).await;
        assert_eq!(scraped.value(ATTEMPTS, &done), 1.0);
        assert_eq!(scraped.value(&format!("{COMPLETION}_count"), &of_endpoint), 1.0);
    }
}
