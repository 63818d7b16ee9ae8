//! More than one instance: the real binary, several processes on one
//! PostgreSQL schema, duplicates sprayed across all of them. (The load
//! generator's own smoke test is `bench/loadgen/tests/smoke.rs`.)

use diesel::prelude::*;
use diesel_async::{AsyncConnection, RunQueryDsl};
use futures_util::StreamExt;
use idempotent_receiver::client;
use idempotent_receiver::providers::{self, ProviderSpec};
use idempotent_receiver::store::PgConn;
use idempotent_receiver::store::schema::ledger_entries;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_idempotent-receiver");
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ENDPOINT: &str = "bench";

#[path = "support/test_schema.rs"]
mod test_schema;

/// A fresh schema in the test database, or `None` (after one printed line)
/// when PostgreSQL is unreachable and not required.
async fn fresh_schema() -> Option<String> {
    match test_schema::create("t_").await {
        Ok(schema) => Some(schema),
        Err(reason) if test_schema::required() => panic!(
            "PostgreSQL is required (IR_REQUIRE_POSTGRES) but unreachable at {}: {reason}",
            test_schema::database_url()
        ),
        Err(reason) => {
            eprintln!(
                "PostgreSQL tests SKIPPED: no server at {} ({reason}); set IR_REQUIRE_POSTGRES=1 to fail instead",
                test_schema::database_url()
            );
            None
        }
    }
}

/// One `serve` process, killed when dropped.
///
/// Each process binds port 0 and the test reads the port it got from its
/// log. Picking a free port here and handing it over raced: the tests of
/// this file start eight processes at once, two could be handed the same
/// port, and the one that lost the bind went unnoticed when `/readyz` was
/// answered by the other test's process, until that test ended and killed
/// it (CI saw "connection reset" in the middle of a spray).
struct Receiver {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Receiver {
    async fn start(dir: &Path, name: &str, database_url: &str) -> Receiver {
        let endpoint = format!(
            "[endpoints.{ENDPOINT}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\n"
        );
        Receiver::start_with(dir, name, database_url, endpoint).await
    }

    /// A receiver whose configuration ends with `tables` (endpoints,
    /// forwarders).
    async fn start_with(dir: &Path, name: &str, database_url: &str, tables: String) -> Receiver {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                "workers = 2\npool_size = 8\npurge_interval = \"0\"\nreconcile_interval = \"0\"\n{tables}"
            ),
        )
        .expect("the config is written");
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .args(["--log-format", "json", "serve"])
            .env("IR_LISTEN", "127.0.0.1:0")
            .env("DATABASE_URL", database_url)
            .env("IR_DATA_DIR", dir.join(format!("{name}-data")))
            .env_remove("IR_CONFIG")
            // Start-up's info lines carry the bound port ("listening").
            .env("RUST_LOG", "warn,idempotent_receiver::startup=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(&log).expect("the log file is created"),
            ))
            .spawn()
            .expect("the receiver starts");
        let mut receiver = Receiver {
            child,
            port: 0,
            log,
        };
        receiver.wait_ready().await;
        receiver
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port from the process's "listening" line, once it is written.
    fn bound_port(&self) -> Option<u16> {
        std::fs::read_to_string(&self.log)
            .ok()?
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find(|line| line["message"] == "listening")
            .and_then(|line| line["port"].as_u64())
            .and_then(|port| u16::try_from(port).ok())
    }

    async fn wait_ready(&mut self) {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the receiver exited before it was ready ({status}): {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the receiver was not ready within 30 s: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            if self.port == 0 {
                match self.bound_port() {
                    Some(port) => self.port = port,
                    None => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
            let ready = http
                .get(format!("{}/readyz", self.base_url()))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if matches!(ready, Ok(r) if r.status() == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_receivers_on_one_schema_run_each_sprayed_duplicate_exactly_once() {
    let Some(schema) = fresh_schema().await else {
        return;
    };
    let url = test_schema::url(&test_schema::database_url(), &schema);
    let dir = tempfile::tempdir().expect("a temporary folder");
    // Started together, so that their migrations race on the advisory lock.
    let (a, b, c) = tokio::join!(
        Receiver::start(dir.path(), "a", &url),
        Receiver::start(dir.path(), "b", &url),
        Receiver::start(dir.path(), "c", &url),
    );
    let receivers = [&a, &b, &c];

    const IDS: usize = 40;
    const COPIES_PER_RECEIVER: usize = 4;
    let provider = providers::build(
        "standard-webhooks",
        &ProviderSpec {
            secrets: vec![SECRET.to_owned()],
            ..ProviderSpec::default()
        },
    )
    .expect("the provider is built");
    let http = reqwest::Client::new();
    let ids: Vec<String> = (0..IDS)
        .map(|n| format!("msg_scale_{n}_{}", &schema[2..10]))
        .collect();
    // Every copy of an id is fired at once, spread round-robin over the three
    // processes, each signed with its own timestamp as a provider's retries are.
    let mut requests = Vec::new();
    for id in &ids {
        for copy in 0..COPIES_PER_RECEIVER * receivers.len() {
            let target = format!(
                "{}/webhooks/{ENDPOINT}",
                receivers[copy % receivers.len()].base_url()
            );
            let delivery = client::sign(
                provider.as_ref(),
                id,
                chrono::Utc::now().timestamp() - copy as i64,
                None,
                client::sample_payment(id),
            )
            .expect("the delivery is signed");
            requests.push((id.clone(), target, delivery));
        }
    }
    let answers: Vec<(String, client::Answer)> =
        futures_util::stream::iter(requests.into_iter().map(|(id, target, delivery)| {
            let http = http.clone();
            async move {
                let answer = client::post(&http, &target, &delivery)
                    .await
                    .expect("the receiver answers");
                (id, answer)
            }
        }))
        .buffer_unordered(64)
        .collect()
        .await;

    let mut bodies: HashMap<&str, HashSet<&str>> = HashMap::new();
    for (id, answer) in &answers {
        assert!(
            (200..300).contains(&answer.status) || answer.status == 409,
            "{id} was answered {}: {}",
            answer.status,
            answer.body
        );
        if (200..300).contains(&answer.status) {
            bodies.entry(id).or_default().insert(&answer.body);
        }
    }
    for id in &ids {
        let seen = bodies.get(id.as_str()).map_or(0, HashSet::len);
        assert_eq!(
            seen, 1,
            "{id}: every 2xx answer must carry the same body, and at least one must be 2xx"
        );
    }

    let mut conn = PgConn::establish(&url).await.expect("a connection");
    let effects: Vec<(String, i64)> = ledger_entries::table
        .filter(ledger_entries::endpoint.eq(ENDPOINT))
        .group_by(ledger_entries::delivery_id)
        .select((ledger_entries::delivery_id, diesel::dsl::count_star()))
        .load(&mut conn)
        .await
        .expect("the ledger is read");
    let effects: HashMap<String, i64> = effects.into_iter().collect();
    for id in &ids {
        assert_eq!(
            effects.get(id),
            Some(&1),
            "{id} must have exactly one effect"
        );
    }
    assert_eq!(effects.len(), IDS, "no effect for an id that was not sent");

    drop((a, b, c));
    test_schema::drop(&schema).await;
}

#[path = "support/slow_downstream.rs"]
mod slow_downstream;

use idempotent_receiver::store::schema::{events, queue_jobs};
use idempotent_receiver::store::{DatabaseUrl, Store, StoreOptions};
use slow_downstream::SlowDownstream;
use std::collections::BTreeMap;

const QUEUED: &str = "queued";

/// A queued endpoint whose first handler forwards to `downstream` as
/// `instance`, run by `workers` queue workers. The workers' fallback poll
/// is short: the test resumes a paused endpoint behind their back.
fn queued_tables(
    downstream: &SlowDownstream,
    instance: &str,
    workers: usize,
    endpoint: &str,
) -> String {
    format!(
        "queue_workers = {workers}\nqueue_poll = \"500ms\"\nlease = \"5s\"\n{}\
         [endpoints.{QUEUED}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\n\
         mode = \"queued\"\n{endpoint}",
        downstream.forwarder_toml("slow", instance)
    )
}

/// Waits until `count` jobs of the queued endpoint are `done`; returns
/// how long that took.
async fn drained(conn: &mut PgConn, count: usize) -> Duration {
    let started = Instant::now();
    loop {
        let done: i64 = queue_jobs::table
            .filter(queue_jobs::endpoint.eq(QUEUED))
            .filter(queue_jobs::state.eq("done"))
            .count()
            .get_result(conn)
            .await
            .expect("the jobs are counted");
        if done as usize == count {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "only {done} of {count} jobs were done within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Posts every `(id, receiver, body)` at once, 16 at a time; returns every
/// answer.
async fn post_all(requests: Vec<(String, String, Vec<u8>)>) -> Vec<(String, client::Answer)> {
    let provider = providers::build(
        "standard-webhooks",
        &ProviderSpec {
            secrets: vec![SECRET.to_owned()],
            ..ProviderSpec::default()
        },
    )
    .expect("the provider is built");
    let http = reqwest::Client::new();
    futures_util::stream::iter(requests.into_iter().map(|(id, base, body)| {
        let delivery = client::sign(
            provider.as_ref(),
            &id,
            chrono::Utc::now().timestamp(),
            None,
            body,
        )
        .expect("the delivery is signed");
        let http = http.clone();
        async move {
            let answer = client::post(&http, &format!("{base}/webhooks/{QUEUED}"), &delivery)
                .await
                .expect("the receiver answers");
            (id, answer)
        }
    }))
    .buffer_unordered(16)
    .collect()
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_receivers_drain_one_queue_running_each_delivery_exactly_once() {
    let Some(schema) = fresh_schema().await else {
        return;
    };
    let url = test_schema::url(&test_schema::database_url(), &schema);
    let dir = tempfile::tempdir().expect("a temporary folder");
    let downstream = SlowDownstream::start(Duration::from_millis(20));
    let handlers = "handlers = [\"slow\", \"record\", \"payments\"]\n";
    let (path, database_url, downstream_ref) = (dir.path(), url.as_str(), &downstream);
    let start = move |name| {
        Receiver::start_with(
            path,
            name,
            database_url,
            queued_tables(downstream_ref, name, 4, handlers),
        )
    };
    let (a, b, c) = tokio::join!(start("a"), start("b"), start("c"));
    let receivers = [&a, &b, &c];

    // Each delivery is posted twice at once, to two different processes:
    // one claims it and queues its job, the other replays or waits.
    const IDS: usize = 90;
    let ids: Vec<String> = (0..IDS)
        .map(|n| format!("msg_queued_{n}_{}", &schema[2..10]))
        .collect();
    let mut requests = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        for copy in 0..2 {
            let base = receivers[(n + copy) % receivers.len()].base_url();
            requests.push((id.clone(), base, client::sample_payment(id)));
        }
    }
    let started = Instant::now();
    let answers = post_all(requests).await;
    let acknowledged = started.elapsed();
    let mut bodies: HashMap<&str, HashSet<&str>> = HashMap::new();
    for (id, answer) in &answers {
        assert!(
            answer.status == 202 || answer.status == 409,
            "{id} was answered {}: {}",
            answer.status,
            answer.body
        );
        if answer.status == 202 {
            bodies.entry(id).or_default().insert(&answer.body);
        }
    }
    for id in &ids {
        assert_eq!(
            bodies.get(id.as_str()).map_or(0, HashSet::len),
            1,
            "{id}: at least one 202, and every 202 the same body"
        );
    }

    let mut conn = PgConn::establish(&url).await.expect("a connection");
    let drain = drained(&mut conn, IDS).await;
    let attempts: Vec<(String, i32)> = queue_jobs::table
        .filter(queue_jobs::endpoint.eq(QUEUED))
        .select((queue_jobs::delivery_id, queue_jobs::attempts))
        .load(&mut conn)
        .await
        .expect("the jobs are read");
    assert_eq!(attempts.len(), IDS, "one job per delivery");
    assert!(
        attempts.iter().all(|(_, n)| *n == 1),
        "every job was taken once: {:?}",
        attempts.iter().filter(|(_, n)| *n != 1).collect::<Vec<_>>()
    );
    let effects: HashMap<String, i64> = ledger_entries::table
        .filter(ledger_entries::endpoint.eq(QUEUED))
        .group_by(ledger_entries::delivery_id)
        .select((ledger_entries::delivery_id, diesel::dsl::count_star()))
        .load::<(String, i64)>(&mut conn)
        .await
        .expect("the ledger is read")
        .into_iter()
        .collect();
    let recorded: i64 = events::table
        .filter(events::endpoint.eq(QUEUED))
        .count()
        .get_result(&mut conn)
        .await
        .expect("the events are counted");
    assert_eq!(recorded, IDS as i64, "one event per delivery");
    for id in &ids {
        assert_eq!(
            effects.get(id),
            Some(&1),
            "{id} must have exactly one effect"
        );
    }
    assert_eq!(effects.len(), IDS, "no effect for an id that was not sent");

    // The handlers ran once per delivery, and every process's workers took
    // a share of the queue.
    let calls = downstream.calls();
    let mut runs: HashMap<&str, usize> = HashMap::new();
    let mut by_instance: BTreeMap<&str, usize> = BTreeMap::new();
    for call in &calls {
        *runs.entry(call.id()).or_default() += 1;
        *by_instance.entry(call.instance.as_str()).or_default() += 1;
    }
    assert!(
        ids.iter().all(|id| runs.get(id.as_str()) == Some(&1)),
        "every delivery's handlers ran exactly once"
    );
    assert_eq!(
        by_instance.len(),
        3,
        "each of the three processes ran jobs: {by_instance:?}"
    );
    eprintln!(
        "scale-out queued: N={IDS} posts={} acknowledged_in={:.2}s drained_after={:.2}s runs_by_instance={by_instance:?}",
        answers.len(),
        acknowledged.as_secs_f64(),
        drain.as_secs_f64()
    );

    drop((a, b, c));
    test_schema::drop(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_receivers_run_one_objects_events_one_at_a_time_oldest_first() {
    let Some(schema) = fresh_schema().await else {
        return;
    };
    let url = test_schema::url(&test_schema::database_url(), &schema);
    let dir = tempfile::tempdir().expect("a temporary folder");
    let downstream = SlowDownstream::start(Duration::from_millis(50));
    let ordered = "ordering_key = \"/data/object_id\"\nevent_time = \"/created\"\n\
                   handlers = [\"slow\", \"record\"]\n";
    // Two workers per process for four objects: one process can never hold
    // every object's next event, so the other one always finds work when
    // it wakes. With four workers each, a process that woke first could take
    // all four heads and keep them (each finished event makes the next one
    // runnable on the same, awake process), and under load the other
    // process ran nothing.
    let (path, database_url, downstream_ref) = (dir.path(), url.as_str(), &downstream);
    let start = move |name| {
        Receiver::start_with(
            path,
            name,
            database_url,
            queued_tables(downstream_ref, name, 2, ordered),
        )
    };
    let (a, b) = tokio::join!(start("a"), start("b"));
    let receivers = [&a, &b];

    // Paused while the events arrive, so that every one is waiting when
    // the workers start: the order they run in is then the queue's choice,
    // not the arrival's.
    let store = Store::connect(
        &DatabaseUrl::parse(&url).expect("the URL parses"),
        &StoreOptions::default(),
    )
    .expect("the store connects");
    let mut db = store.conn().await.expect("a connection");
    db.pause(QUEUED, "test", chrono::Utc::now().naive_utc())
        .await
        .expect("the endpoint is paused");

    // Each object's events are sent newest first, alternating between the
    // two processes.
    const OBJECTS: usize = 4;
    const EVENTS: usize = 6;
    let tag = &schema[2..10];
    let created = chrono::Utc::now().timestamp() - 3600;
    let mut requests = Vec::new();
    for event in (0..EVENTS).rev() {
        for object in 0..OBJECTS {
            let id = format!("msg_order_{object}_{event}_{tag}");
            let body = serde_json::json!({
                "id": id,
                "type": "object.updated",
                "created": created + event as i64,
                "data": { "object_id": format!("obj_{object}_{tag}"), "version": event }
            });
            let base = receivers[(object + event) % receivers.len()].base_url();
            requests.push((id, base, body.to_string().into_bytes()));
        }
    }
    for (id, answer) in post_all(requests).await {
        assert_eq!(answer.status, 202, "{id}: {}", answer.body);
    }
    assert!(
        downstream.calls().is_empty(),
        "nothing runs while the endpoint is paused"
    );
    let started = Instant::now();
    assert!(db.resume(QUEUED).await.expect("the endpoint is resumed"));
    // Wakes both processes' workers through LISTEN at once, instead of
    // their next poll.
    db.notify_queue().await.expect("the workers are notified");

    let mut conn = PgConn::establish(&url).await.expect("a connection");
    let drain = drained(&mut conn, OBJECTS * EVENTS).await;

    // The handler's own log: per object, its runs in the order they
    // started, each ended before the next began, oldest event first.
    let calls = downstream.calls();
    assert_eq!(calls.len(), OBJECTS * EVENTS, "every event ran once");
    let mut by_object: BTreeMap<String, Vec<&slow_downstream::Call>> = BTreeMap::new();
    for call in &calls {
        let object = call.body["data"]["object_id"].as_str().unwrap_or("");
        by_object.entry(object.to_owned()).or_default().push(call);
    }
    assert_eq!(by_object.len(), OBJECTS);
    let mut instances = HashSet::new();
    for (object, runs) in &mut by_object {
        runs.sort_by_key(|call| call.started);
        let versions: Vec<i64> = runs
            .iter()
            .map(|call| call.body["data"]["version"].as_i64().unwrap_or(-1))
            .collect();
        assert_eq!(
            versions,
            (0..EVENTS as i64).collect::<Vec<_>>(),
            "{object}'s events ran oldest first"
        );
        for pair in runs.windows(2) {
            let ended = pair[0].ended.expect("every run ended");
            assert!(
                ended <= pair[1].started,
                "{object}: {} started before {} ended",
                pair[1].id(),
                pair[0].id()
            );
        }
        instances.extend(runs.iter().map(|call| call.instance.as_str()));
    }
    assert_eq!(instances.len(), 2, "both processes ran the objects' events");

    // The database agrees: per object, the jobs finished in event order.
    let finished: Vec<(
        Option<String>,
        Option<chrono::NaiveDateTime>,
        Option<chrono::NaiveDateTime>,
    )> = queue_jobs::table
        .filter(queue_jobs::endpoint.eq(QUEUED))
        .select((
            queue_jobs::ordering_key,
            queue_jobs::event_time,
            queue_jobs::finished_at,
        ))
        .order((queue_jobs::ordering_key, queue_jobs::finished_at))
        .load(&mut conn)
        .await
        .expect("the jobs are read");
    for pair in finished.windows(2) {
        if pair[0].0 == pair[1].0 {
            assert!(
                pair[0].1 < pair[1].1,
                "{:?}: a job finished after a newer event's",
                pair[0].0
            );
        }
    }
    // Different objects did run side by side.
    let overlapping = calls
        .iter()
        .filter(|x| {
            calls.iter().any(|y| {
                x.body["data"]["object_id"] != y.body["data"]["object_id"]
                    && y.started < x.ended.unwrap_or(x.started)
                    && x.started < y.ended.unwrap_or(y.started)
            })
        })
        .count();
    eprintln!(
        "scale-out ordering: objects={OBJECTS} events_each={EVENTS} handler=50ms drained_after={:.2}s (resume to done {:.2}s) runs_overlapping_another_object={overlapping}",
        drain.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    drop((a, b));
    test_schema::drop(&schema).await;
}
