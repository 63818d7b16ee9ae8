//! Retention and purge: what the purge deletes and keeps, per-endpoint
//! retentions, batching, the dry run, the background task and the command,
//! on both backends.

use crate::both_backends;
use crate::helpers::{Backend, ENDPOINT, SECRET, TestApp};
use chrono::{NaiveDateTime, TimeDelta};
use diesel::ExpressionMethods;
use idempotent_receiver::clock::Clock;
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::maintenance::{PurgeOptions, PurgeReport, purge};
use idempotent_receiver::store::DbConn;
use idempotent_receiver::store::schema::deliveries;
use idempotent_receiver::with_conn;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The lease owner the teardown's "nothing left in progress" check ignores:
/// planted claims stand for processes that died.
const DEAD_OWNER: &str = "pid1-dead/0000";

/// What a planted row is.
#[derive(Clone, Copy)]
enum Row {
    Completed,
    /// An `in_progress` claim whose lease ends this far from now (negative:
    /// already expired).
    Claimed {
        lease_left: TimeDelta,
    },
}

/// Inserts `ids` into `scope` as if they had been received `age` ago.
async fn plant(app: &TestApp, scope: &str, ids: &[&str], row: Row, age: TimeDelta) {
    // Here only: its `load` would shadow `AtomicUsize::load` elsewhere.
    use diesel_async::RunQueryDsl;
    let now = app.clock.naive_now();
    let received_at = now - age;
    let mut conn = app.store.conn().await.expect("a connection");
    for id in ids {
        let (status, lease_owner, lease_expires_at, completed_at, response_status, response_body) =
            match row {
                Row::Completed => (
                    "completed",
                    None,
                    None::<NaiveDateTime>,
                    Some(received_at),
                    Some(200),
                    Some(b"{}".to_vec()),
                ),
                Row::Claimed { lease_left } => (
                    "in_progress",
                    Some(DEAD_OWNER),
                    Some(now + lease_left),
                    None,
                    None,
                    None,
                ),
            };
        let values = (
            deliveries::endpoint.eq(scope),
            deliveries::delivery_id.eq(*id),
            deliveries::request_hash.eq("planted"),
            deliveries::status.eq(status),
            deliveries::response_status.eq(response_status),
            deliveries::response_content_type.eq(response_status.map(|_| "application/json")),
            deliveries::response_body.eq(response_body),
            deliveries::attempts.eq(1),
            deliveries::lease_owner.eq(lease_owner),
            deliveries::lease_expires_at.eq(lease_expires_at),
            deliveries::received_at.eq(received_at),
            deliveries::completed_at.eq(completed_at),
        );
        with_conn!(&mut conn, |c| diesel::insert_into(deliveries::table)
            .values(values.clone())
            .execute(c)
            .await)
        .expect("the planted row inserts");
    }
}

async fn exists(app: &TestApp, scope: &str, id: &str) -> bool {
    let mut conn = app.store.conn().await.expect("a connection");
    conn.find_delivery(scope, id)
        .await
        .expect("the read runs")
        .is_some()
}

/// Purges `app`'s database as its settings say, with `batch` rows a batch.
async fn purge_app(app: &TestApp, batch: usize, dry_run: bool) -> PurgeReport {
    let options = PurgeOptions {
        batch,
        pause: Duration::from_millis(5),
        dry_run,
    };
    purge(&app.store, &app.settings.retention_policy(), &options)
        .await
        .expect("the purge runs")
}

fn hours(n: i64) -> TimeDelta {
    TimeDelta::hours(n)
}

/// A delivery that only `record` (and counting handlers) act on: no ledger
/// row, so a second run is not mistaken for a double payment.
fn notice(id: &str) -> Vec<u8> {
    json!({ "type": "customer.updated", "data": { "id": id } })
        .to_string()
        .into_bytes()
}

async fn app_with(backend: Backend, top_level: &str, tables: &str) -> Option<TestApp> {
    TestApp::builder(backend)
        .top_level(top_level)
        .endpoints_toml(tables)
        .spawn_if_available()
        .await
}

/// `slow` keeps its keys for 96 h; everything else for the global 1 h.
fn slow_endpoint() -> String {
    format!(
        "[endpoints.slow]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\"]\nretention = \"96h\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_completed_keys_are_deleted_and_young_ones_stay() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(app) = app_with(backend, "retention = \"1h\"", "").await else {
            continue;
        };
        plant(
            &app,
            ENDPOINT,
            &["old_1", "old_2"],
            Row::Completed,
            hours(2),
        )
        .await;
        plant(
            &app,
            ENDPOINT,
            &["young"],
            Row::Completed,
            TimeDelta::minutes(50),
        )
        .await;
        plant(
            &app,
            "POST /payments",
            &["old_key"],
            Row::Completed,
            hours(2),
        )
        .await;

        let report = purge_app(&app, 1000, false).await;

        assert_eq!(report.total(), 3, "{report}");
        assert_eq!(report.deleted_in(ENDPOINT), 2);
        assert_eq!(report.deleted_in("POST /payments"), 1);
        assert!(!exists(&app, ENDPOINT, "old_1").await);
        assert!(!exists(&app, "POST /payments", "old_key").await);
        assert!(exists(&app, ENDPOINT, "young").await);
        assert_eq!(app.count("deliveries").await, 1);
        // A second purge finds nothing left to do.
        assert_eq!(purge_app(&app, 1000, false).await.total(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_claim_with_a_live_lease_stays_and_one_whose_lease_expired_goes() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(app) = app_with(backend, "retention = \"1h\"", "").await else {
            continue;
        };
        let live = Row::Claimed {
            lease_left: TimeDelta::minutes(5),
        };
        let expired = Row::Claimed {
            lease_left: TimeDelta::minutes(-5),
        };
        plant(&app, ENDPOINT, &["running_for_days"], live, hours(100)).await;
        plant(&app, ENDPOINT, &["abandoned"], expired, hours(2)).await;
        // Abandoned, but younger than the retention: a retry may still
        // take it over, so it stays.
        plant(
            &app,
            ENDPOINT,
            &["recently_abandoned"],
            expired,
            TimeDelta::minutes(10),
        )
        .await;

        let dry = purge_app(&app, 1000, true).await;
        assert_eq!(dry.scopes[ENDPOINT].abandoned, 1, "{dry}");
        let report = purge_app(&app, 1000, false).await;

        assert_eq!(report.scopes[ENDPOINT].abandoned, 1, "{report}");
        assert_eq!(report.scopes[ENDPOINT].completed, 0);
        assert!(exists(&app, ENDPOINT, "running_for_days").await);
        assert!(!exists(&app, ENDPOINT, "abandoned").await);
        assert!(exists(&app, ENDPOINT, "recently_abandoned").await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_endpoint_is_purged_and_remembered_with_its_own_retention() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(app) = app_with(backend, "retention = \"1h\"", &slow_endpoint()).await else {
            continue;
        };
        // The engine reads the same retention: two hours on, `slow`
        // still replays while `shop` runs the delivery again.
        for endpoint in ["slow", ENDPOINT] {
            let first = app.deliver_to(endpoint, "msg_aged", &notice("n_1")).await;
            assert_eq!(first.status(), 200, "{endpoint}");
            app.age_key(endpoint, "msg_aged", hours(2)).await;
        }
        let slow = app.deliver_to("slow", "msg_aged", &notice("n_1")).await;
        assert_eq!(slow.status(), 200);
        assert_eq!(slow.headers()["idempotent-replayed"], "true");
        let shop = app.deliver_to(ENDPOINT, "msg_aged", &notice("n_1")).await;
        assert_eq!(shop.status(), 200, "{}", shop.text().await.unwrap());
        assert!(shop.headers().get("idempotent-replayed").is_none());

        plant(&app, "slow", &["slow_2h"], Row::Completed, hours(2)).await;
        plant(&app, "slow", &["slow_100h"], Row::Completed, hours(100)).await;
        plant(&app, "other", &["other_2h"], Row::Completed, hours(2)).await;
        plant(
            &app,
            "POST /payments",
            &["key_2h"],
            Row::Completed,
            hours(2),
        )
        .await;

        let report = purge_app(&app, 1000, false).await;

        assert_eq!(report.deleted_in("slow"), 1, "{report}");
        assert_eq!(
            report.scopes["slow"].retention,
            Duration::from_secs(96 * 3600)
        );
        assert_eq!(report.deleted_in("other"), 1);
        assert_eq!(report.deleted_in("POST /payments"), 1);
        assert_eq!(report.scopes["other"].retention, Duration::from_secs(3600));
        assert!(exists(&app, "slow", "slow_2h").await);
        assert!(exists(&app, "slow", "msg_aged").await);
        assert!(!exists(&app, "slow", "slow_100h").await);
        assert!(!exists(&app, "other", "other_2h").await);
        // `shop`'s re-run above is a fresh key again: young, so it stays.
        assert!(exists(&app, ENDPOINT, "msg_aged").await);
    }
}

both_backends! {
    async fn batches_are_bounded_by_the_batch_size_and_counted(app) {
        let ids: Vec<String> = (0..10).map(|i| format!("expired_{i:02}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        plant(app, ENDPOINT, &ids, Row::Completed, hours(100)).await;
        plant(app, ENDPOINT, &["young"], Row::Completed, hours(1)).await;

        let report = purge_app(app, 3, false).await;

        assert_eq!(report.total(), 10, "{report}");
        assert_eq!(report.batches, 4, "3 + 3 + 3 + 1: {report}");
        assert_eq!(report.largest_batch, 3);
        assert_eq!(app.count("deliveries").await, 1);
        let text = report.to_string();
        assert!(text.starts_with("deleted 10 expired key(s) in 4 batch(es) of at most 3 row(s)"), "{text}");
    }
}

both_backends! {
    async fn a_dry_run_counts_and_deletes_nothing(app) {
        plant(app, ENDPOINT, &["a", "b"], Row::Completed, hours(100)).await;
        plant(app, "POST /payments", &["k"], Row::Completed, hours(100)).await;

        let report = purge_app(app, 1, true).await;

        assert!(report.dry_run);
        assert_eq!(report.total(), 3, "{report}");
        assert_eq!(report.deleted_in(ENDPOINT), 2);
        assert_eq!(report.batches, 0);
        assert!(report.to_string().contains("nothing was deleted"));
        assert_eq!(app.count("deliveries").await, 3);
    }
}

/// Counts how often it runs.
struct Runs(Arc<AtomicUsize>);

#[async_trait::async_trait(?Send)]
impl Handler for Runs {
    async fn handle(&self, _: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(None)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_purge_a_repeat_of_a_purged_key_runs_again() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let runs = Arc::new(AtomicUsize::new(0));
        let Some(app) = TestApp::builder(backend)
            .top_level("retention = \"1h\"")
            .handler("runs", Runs(runs.clone()))
            .spawn_if_available()
            .await
        else {
            continue;
        };
        // A webhook delivery and a client-keyed payment, both purged.
        let body = notice("n_7");
        let first = app.deliver("msg_purged", &body).await;
        assert_eq!(first.status(), 200);
        let order = json!({ "order_id": "order_9", "amount": 500, "currency": "EUR" });
        let key = "5b0c3d7e-purged-key";
        let paid = app.post_json("/payments", Some(key), &[], &order).await;
        assert_eq!(paid.status(), 201);
        let paid: Value = paid.json().await.unwrap();
        app.age_delivery("msg_purged", hours(2)).await;
        app.age_key("POST /payments", key, hours(2)).await;

        let report = purge_app(&app, 1000, false).await;
        assert_eq!(report.total(), 2, "{report}");

        // The documented consequence: each repeat runs again, a new effect.
        let again = app.deliver("msg_purged", &body).await;
        assert_eq!(again.status(), 200, "{}", again.text().await.unwrap());
        assert!(again.headers().get("idempotent-replayed").is_none());
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        let repaid = app.post_json("/payments", Some(key), &[], &order).await;
        assert_eq!(repaid.status(), 201);
        assert!(repaid.headers().get("idempotent-replayed").is_none());
        let repaid: Value = repaid.json().await.unwrap();
        assert_ne!(repaid["id"], paid["id"]);
        assert_eq!(app.count("payments").await, 2);
        // Domain data is never purged: the first payment and the recorded
        // event are still there.
        assert_eq!(app.count("events").await, 1);
        // And both keys are remembered again from now on.
        let replay = app.deliver("msg_purged", &body).await;
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_purges_in_the_background_every_purge_interval() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(app) = app_with(
            backend,
            "retention = \"1h\"\npurge_interval = \"100ms\"\npurge_batch = 2\npurge_pause = \"1ms\"",
            "",
        )
        .await
        else {
            continue;
        };
        plant(&app, ENDPOINT, &["a", "b", "c"], Row::Completed, hours(2)).await;
        plant(
            &app,
            ENDPOINT,
            &["young"],
            Row::Completed,
            TimeDelta::minutes(1),
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while app.count("deliveries").await > 1 {
            assert!(
                Instant::now() < deadline,
                "the background purge did not run"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(exists(&app, ENDPOINT, "young").await);
    }
}

/// Runs the binary against `app`'s database with a configuration of its
/// own: the global retention 1 h, and `slow` with 96 h.
fn run_binary(app: &TestApp, data_dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let config = data_dir.join("receiver.toml");
    std::fs::write(
        &config,
        format!(
            "retention = \"1h\"\npurge_batch = 2\npurge_pause = \"1ms\"\n\
             [endpoints.{ENDPOINT}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\n{}",
            slow_endpoint()
        ),
    )
    .expect("the configuration is written");
    std::process::Command::new(env!("CARGO_BIN_EXE_idempotent-receiver"))
        .arg("--config")
        .arg(&config)
        .args(args)
        .env("DATABASE_URL", &app.database_url)
        .env("IR_DATA_DIR", data_dir)
        .env_remove("IR_CONFIG")
        .output()
        .expect("the binary runs")
}

fn stdout(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Whether `text` has a line whose words are `words`.
fn has_line(text: &str, words: &[&str]) -> bool {
    text.lines()
        .any(|line| line.split_whitespace().collect::<Vec<_>>() == words)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purge_command_prints_counts_per_scope_and_the_total() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(app) = app_with(backend, "", "").await else {
            continue;
        };
        let dir = tempfile::tempdir().expect("a temporary folder");
        let abandoned = Row::Claimed {
            lease_left: TimeDelta::minutes(-1),
        };
        plant(
            &app,
            ENDPOINT,
            &["s1", "s2", "s3"],
            Row::Completed,
            hours(2),
        )
        .await;
        plant(&app, ENDPOINT, &["crashed"], abandoned, hours(2)).await;
        plant(&app, "slow", &["slow_2h"], Row::Completed, hours(2)).await;
        plant(&app, "slow", &["slow_100h"], Row::Completed, hours(100)).await;
        plant(&app, "POST /payments", &["k"], Row::Completed, hours(2)).await;

        let dry = stdout(&run_binary(&app, dir.path(), &["purge", "--dry-run"]));
        assert!(
            dry.starts_with("dry run: 6 expired key(s) would be deleted; nothing was deleted"),
            "{dry}"
        );
        assert!(has_line(&dry, &[ENDPOINT, "4", "3", "1", "1h"]), "{dry}");
        assert!(has_line(&dry, &["slow", "1", "1", "0", "96h"]), "{dry}");
        assert!(
            has_line(&dry, &["POST", "/payments", "1", "1", "0", "1h"]),
            "{dry}"
        );
        assert!(has_line(&dry, &["total", "6"]), "{dry}");
        assert_eq!(
            app.count("deliveries").await,
            7,
            "a dry run deletes nothing"
        );

        let done = stdout(&run_binary(&app, dir.path(), &["purge"]));
        // purge_batch = 2: `slow`'s one row, then the five others in
        // 2 + 2 + 1.
        assert!(
            done.starts_with("deleted 6 expired key(s) in 4 batch(es) of at most 2 row(s)"),
            "{done}"
        );
        assert!(has_line(&done, &[ENDPOINT, "4", "3", "1", "1h"]), "{done}");
        assert!(has_line(&done, &["total", "6"]), "{done}");
        assert_eq!(app.count("deliveries").await, 1);
        assert!(exists(&app, "slow", "slow_2h").await);

        // --older-than overrides every retention for this run.
        let nothing = stdout(&run_binary(&app, dir.path(), &["purge"]));
        assert_eq!(
            nothing,
            "nothing to purge: no key has outlived its retention\n"
        );
        let forced = stdout(&run_binary(
            &app,
            dir.path(),
            &["purge", "--older-than", "30m"],
        ));
        assert!(
            has_line(&forced, &["slow", "1", "1", "0", "30m"]),
            "{forced}"
        );
        assert_eq!(app.count("deliveries").await, 0);

        let zero = run_binary(&app, dir.path(), &["purge", "--older-than", "0"]);
        assert!(!zero.status.success());
        assert!(String::from_utf8_lossy(&zero.stderr).contains("--older-than"));
    }
}

/// Inserts `n` completed keys received `age` ago into `scope`, in one
/// transaction (diesel batches inserts of tuples on PostgreSQL only).
async fn plant_many(app: &TestApp, scope: &str, n: usize, age: TimeDelta) {
    use diesel_async::RunQueryDsl;
    let received_at = app.clock.naive_now() - age;
    let mut tx = app.store.begin().await.expect("a transaction");
    for i in 0..n {
        let id = format!("bulk_{i:07}");
        let row = (
            deliveries::endpoint.eq(scope),
            deliveries::delivery_id.eq(id.as_str()),
            deliveries::request_hash.eq("planted"),
            deliveries::status.eq("completed"),
            deliveries::response_status.eq(200),
            deliveries::response_body.eq(b"{}".as_slice()),
            deliveries::received_at.eq(received_at),
            deliveries::completed_at.eq(received_at),
        );
        with_conn!(tx.conn(), |c| diesel::insert_into(deliveries::table)
            .values(row)
            .execute(c)
            .await)
        .expect("the planted row inserts");
    }
    tx.commit().await.expect("the planted rows commit");
}

/// Delivers fresh ids one after another until `done`, and returns each
/// answer's latency.
async fn deliver_until(app: &TestApp, done: &std::sync::atomic::AtomicBool) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let mut i = 0;
    while !done.load(Ordering::SeqCst) {
        i += 1;
        let id = format!("live_{}_{i}", uuid::Uuid::new_v4().simple());
        let started = Instant::now();
        let response = app.deliver(&id, &notice(&id)).await;
        assert_eq!(response.status(), 200);
        latencies.push(started.elapsed());
    }
    latencies
}

fn summary(latencies: &mut [Duration]) -> String {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    format!(
        "{} deliveries, p50 {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    )
}

/// A measurement, not a check: how long a purge of many rows takes in
/// batches, and how deliveries fare meanwhile, with the default batches and
/// with the largest allowed.
/// `IR_PURGE_ROWS` rows (default 20000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test --test api measure_purge -- --ignored --nocapture"]
async fn measure_purge_of_many_rows_in_batches_beside_live_deliveries() {
    let rows: usize = std::env::var("IR_PURGE_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(app) = app_with(backend, "retention = \"1h\"", "").await else {
            continue;
        };
        let mut idle = {
            let done = std::sync::atomic::AtomicBool::new(false);
            let deliveries = deliver_until(&app, &done);
            let stop = async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                done.store(true, Ordering::SeqCst);
            };
            tokio::join!(deliveries, stop).0
        };
        println!("{backend:?}: no purge: {}", summary(&mut idle));
        for (label, batch, pause) in [
            (
                "batches of 1000, 50 ms apart",
                1000,
                Duration::from_millis(50),
            ),
            ("batches of 10000, no pause", 10_000, Duration::ZERO),
        ] {
            plant_many(&app, "bulk", rows, hours(2)).await;
            let done = std::sync::atomic::AtomicBool::new(false);
            let options = PurgeOptions {
                batch,
                pause,
                dry_run: false,
            };
            let policy = app.settings.retention_policy();
            let purging = async {
                let report = purge(&app.store, &policy, &options)
                    .await
                    .expect("the purge runs");
                done.store(true, Ordering::SeqCst);
                report
            };
            let (report, mut latencies) = tokio::join!(purging, deliver_until(&app, &done));
            assert_eq!(report.deleted_in("bulk"), rows as u64);
            println!(
                "{backend:?}: {rows} rows, {label}: {:.2} s in {} batch(es) ({:.0} rows/s); meanwhile {}",
                report.elapsed.as_secs_f64(),
                report.batches,
                rows as f64 / report.elapsed.as_secs_f64(),
                summary(&mut latencies)
            );
        }
    }
}
