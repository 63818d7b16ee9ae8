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
use std::net::TcpListener;
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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// One `serve` process, killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Receiver {
    async fn start(dir: &Path, name: &str, database_url: &str) -> Receiver {
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                "workers = 2\npool_size = 8\npurge_interval = \"0\"\nreconcile_interval = \"0\"\n\
                 [endpoints.{ENDPOINT}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\n"
            ),
        )
        .expect("the config is written");
        let log = dir.join(format!("{name}.log"));
        let port = free_port();
        let child = Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .arg("serve")
            .env("IR_LISTEN", format!("127.0.0.1:{port}"))
            .env("DATABASE_URL", database_url)
            .env("IR_DATA_DIR", dir.join(format!("{name}-data")))
            .env_remove("IR_CONFIG")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(&log).expect("the log file is created"),
            ))
            .spawn()
            .expect("the receiver starts");
        let mut receiver = Receiver { child, port, log };
        receiver.wait_ready().await;
        receiver
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
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
            let ready = http
                .get(format!("{}/readyz", self.base_url()))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if matches!(ready, Ok(r) if r.status() == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the receiver was not ready within 30 s"
            );
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
