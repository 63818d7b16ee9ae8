//! Observability: `/metrics` after known traffic, request ids on every
//! answer, JSON log lines from the real binary, and no secret in anything
//! the binary prints, even at `RUST_LOG=trace`.
//!
//! The metrics recorder is one per process and the tests run in parallel,
//! so counters labelled by a shared route are compared before and after
//! (they only grow), and per-endpoint counters use an endpoint of the
//! test's own.

use crate::helpers::{Backend, SECRET, TestApp, TestAppBuilder, now, payment, problem};
use crate::{both_backends, both_backends_with};
use base64::Engine as _;
use idempotent_receiver::clock::Clock;
use idempotent_receiver::providers::{self, Provider, ProviderSpec};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_idempotent-receiver");

/// One line of the Prometheus text format.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape of `/metrics`: the text and its samples.
pub(crate) struct Scrape {
    pub(crate) text: String,
    samples: Vec<Sample>,
}

impl Scrape {
    /// The sum of the samples of `name` whose labels include `labels`.
    pub(crate) fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    pub(crate) fn has(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.matching(name, labels).next().is_some()
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }
}

/// Parses the text format: `name{label="value",...} number`, skipping
/// comments. Label values may hold braces (`/payments/{id}`), so they are
/// read as quoted strings.
fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let name_end = line.find(['{', ' ']).expect("a metric name");
        let name = line[..name_end].to_owned();
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices();
            let mut key = String::new();
            loop {
                let (i, c) = chars.next().expect("a closed label set");
                match c {
                    '}' => {
                        rest = &inner[i + 1..];
                        break;
                    }
                    ',' => {}
                    '=' => {
                        assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
                        let mut value = String::new();
                        loop {
                            match chars.next().expect("a closed label value").1 {
                                '\\' => value.push(chars.next().expect("an escape").1),
                                '"' => break,
                                c => value.push(c),
                            }
                        }
                        labels.insert(std::mem::take(&mut key), value);
                    }
                    c => key.push(c),
                }
            }
        }
        let value = rest.trim().parse().expect("a sample value");
        samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    samples
}

pub(crate) async fn scrape(app: &TestApp) -> Scrape {
    let response = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .expect("the receiver answers");
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = response.text().await.expect("a text body");
    Scrape {
        samples: parse_metrics(&text),
        text,
    }
}

pub(crate) fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// `headers` with the Standard Webhooks signature replaced by one made
/// with no configured secret.
fn with_forged_signature(mut headers: Vec<(String, String)>) -> Vec<(String, String)> {
    let forged = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    for (name, value) in &mut headers {
        if name == "webhook-signature" {
            *value = format!("v1,{forged}");
        }
    }
    headers
}

async fn metrics_after_known_traffic(backend: Backend) {
    // An endpoint of this test's own, so that its counters are exact.
    let endpoint = unique("m_");
    let Some(app) = TestApp::builder(backend)
        .endpoints_toml(&format!(
            "[endpoints.{endpoint}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\n"
        ))
        .spawn_if_available()
        .await
    else {
        return;
    };
    let before = scrape(&app).await;
    let id = unique("msg_metrics_");
    let forged_id = unique("msg_forged_");
    let client_key = uuid::Uuid::new_v4().to_string();
    let body = payment("pay_metrics", 1200);

    assert_eq!(app.deliver_to(&endpoint, &id, &body).await.status(), 200);
    let replay = app.deliver_to(&endpoint, &id, &body).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let forged = with_forged_signature(app.signed_headers(&forged_id, now(), &body));
    problem(
        app.post_to(&endpoint, &forged, body.clone()).await,
        401,
        "invalid-signature",
    )
    .await;
    let other_body = payment("pay_metrics_other", 1300);
    problem(
        app.deliver_to(&endpoint, &id, &other_body).await,
        409,
        "key-reused",
    )
    .await;
    let order = json!({ "order_id": "order_metrics", "amount": 1999, "currency": "EUR" });
    let key = format!("\"{client_key}\"");
    assert_eq!(
        app.post_json("/payments", Some(&key), &[], &order)
            .await
            .status(),
        201
    );
    let again = app.post_json("/payments", Some(&key), &[], &order).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");

    let after = scrape(&app).await;
    let provider = "standard-webhooks";
    let ours = [("endpoint", endpoint.as_str()), ("provider", provider)];
    let with = |extra: (&'static str, &'static str)| {
        let mut labels = ours.to_vec();
        labels.push(extra);
        labels
    };
    for (name, expected) in [
        ("ir_webhook_deliveries_received_total", 4.0),
        ("ir_webhook_deliveries_verified_total", 3.0),
        ("ir_webhook_deliveries_processed_total", 1.0),
        ("ir_webhook_deliveries_replayed_total", 1.0),
    ] {
        assert_eq!(after.value(name, &ours), expected, "{name}");
    }
    assert_eq!(
        after.value(
            "ir_webhook_deliveries_rejected_total",
            &with(("reason", "invalid-signature"))
        ),
        1.0
    );
    assert_eq!(
        after.value("ir_webhook_conflicts_total", &with(("kind", "key_reused"))),
        1.0
    );
    assert_eq!(
        after.value("ir_webhook_conflicts_total", &with(("kind", "in_progress"))),
        0.0
    );

    // The histogram: one observation per answer, by outcome, in buckets.
    for outcome in ["processed", "replayed", "rejected", "key_reused"] {
        assert_eq!(
            after.value(
                "ir_webhook_processing_seconds_count",
                &with(("outcome", outcome))
            ),
            1.0,
            "{outcome}"
        );
    }
    let processed = with(("outcome", "processed"));
    assert!(after.value("ir_webhook_processing_seconds_sum", &processed) > 0.0);
    let mut inf = processed.clone();
    inf.push(("le", "+Inf"));
    assert_eq!(
        after.value("ir_webhook_processing_seconds_bucket", &inf),
        1.0
    );
    assert!(
        after
            .text
            .contains("# TYPE ir_webhook_processing_seconds histogram")
    );

    // Shared routes: other tests count there too, so only growth is exact.
    let grew = |name: &str, labels: &[(&str, &str)]| {
        after.value(name, labels) - before.value(name, labels)
    };
    for outcome in ["processed", "replayed"] {
        assert!(
            grew(
                "ir_client_key_requests_total",
                &[("route", "/payments"), ("outcome", outcome)]
            ) >= 1.0,
            "client key {outcome}"
        );
    }
    assert!(
        grew(
            "ir_http_requests_total",
            &[
                ("method", "POST"),
                ("route", "/webhooks/{endpoint}"),
                ("status", "200")
            ]
        ) >= 2.0
    );

    // The pool's gauges, sampled by the scrape itself.
    let backend_label = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    for gauge in [
        "ir_db_pool_size",
        "ir_db_pool_available",
        "ir_db_pool_waiting",
    ] {
        assert!(after.has(gauge, &[("backend", backend_label)]), "{gauge}");
    }
    assert!(after.value("ir_db_pool_max_size", &[("backend", backend_label)]) >= 1.0);
    // Each lane's gauges: on PostgreSQL the shared lane and one per worker
    // (the app runs two), on SQLite one pool. (The registry is the
    // process's, shared with the other tests' apps: the values are checked
    // in pool_lanes.rs, through the store.)
    let lanes: &[&str] = match backend {
        Backend::Sqlite => &["shared"],
        Backend::Postgres => &["shared", "worker-1", "worker-2"],
    };
    for lane in lanes {
        let labels = [("backend", backend_label), ("lane", *lane)];
        for gauge in [
            "ir_db_pool_lane_max_size",
            "ir_db_pool_lane_size",
            "ir_db_pool_lane_waiting",
        ] {
            assert!(after.has(gauge, &labels), "{gauge} {lane}");
        }
    }

    // No label names a delivery, a key or a body: they are unbounded.
    for secret_ish in [&id, &forged_id, &client_key, &"pay_metrics".to_owned()] {
        assert!(!after.text.contains(secret_ish.as_str()), "{secret_ish}");
        for sample in &after.samples {
            assert!(
                sample
                    .labels
                    .values()
                    .all(|v| !v.contains(secret_ish.as_str())),
                "{sample:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_each_kind_of_answer_with_bounded_labels_sqlite() {
    metrics_after_known_traffic(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_each_kind_of_answer_with_bounded_labels_postgres() {
    metrics_after_known_traffic(Backend::Postgres).await;
}

both_backends! {
    async fn a_takeover_a_reconciliation_and_a_purge_are_counted(app) {
        use idempotent_receiver::maintenance::{self, PurgeOptions};
        use idempotent_receiver::store::NewClaim;
        use sha2::{Digest, Sha256};

        let before = scrape(app).await;
        // Two claims whose owner died: a retry takes one over, the
        // reconciler completes the other.
        for id in ["msg_taken_over", "msg_reconciled"] {
            let body = payment(id, 500);
            let past = app.clock.naive_now() - chrono::TimeDelta::seconds(5);
            let hash = hex::encode(Sha256::digest(&body));
            let inserted = app
                .store
                .conn()
                .await
                .unwrap()
                .insert_claim(&NewClaim {
                    endpoint: crate::helpers::ENDPOINT,
                    delivery_id: id,
                    request_hash: &hash,
                    status: "in_progress",
                    event_type: Some("payment.succeeded"),
                    attempts: 1,
                    lease_owner: Some("pid1-dead/0000"),
                    lease_expires_at: Some(past),
                    received_at: past,
                    body_key: None,
                    request_body: Some(&body),
                })
                .await
                .unwrap();
            assert!(inserted);
        }
        let retry = app.deliver("msg_taken_over", &payment("msg_taken_over", 500)).await;
        assert_eq!(retry.status(), 200);
        let report = maintenance::reconcile(&app.webhooks(), 10).await.unwrap();
        assert_eq!(report.completed, 1);

        // A key past its retention, purged.
        assert_eq!(app.deliver("msg_expired", &payment("pay_expired", 1)).await.status(), 200);
        app.age_delivery("msg_expired", chrono::TimeDelta::hours(100)).await;
        let options = PurgeOptions { batch: 100, pause: Duration::ZERO, dry_run: false };
        let purged = maintenance::purge(&app.store, &app.settings.retention_policy(), &options)
            .await
            .unwrap();
        assert!(purged.total() >= 1);

        let after = scrape(app).await;
        let grew = |name: &str, labels: &[(&str, &str)]| after.value(name, labels) - before.value(name, labels);
        assert!(grew("ir_lease_takeovers_total", &[]) >= 2.0, "the retry's and the reconciler's");
        assert!(grew("ir_reconcile_claims_total", &[("outcome", "completed")]) >= 1.0);
        assert!(grew("ir_purge_deleted_keys_total", &[("kind", "completed")]) >= 1.0);
    }
}

both_backends! {
    async fn every_answer_carries_the_callers_request_id_or_a_fresh_one(app) {
        let id_of = |response: &reqwest::Response| {
            response.headers()["x-request-id"].to_str().unwrap().to_owned()
        };
        let body = payment("pay_request_id", 300);
        let delivery = |request_id: &str| {
            let mut headers = app.signed_headers("msg_request_id", now(), &body);
            headers.push(("X-Request-Id".into(), request_id.into()));
            headers
        };

        let processed = app.post(&delivery("req-first-1"), body.clone()).await;
        assert_eq!(processed.status(), 200);
        assert_eq!(id_of(&processed), "req-first-1");
        let replayed = app.post(&delivery("req-second:2"), body.clone()).await;
        assert_eq!(replayed.headers()["idempotent-replayed"], "true");
        assert_eq!(id_of(&replayed), "req-second:2");
        let mut forged = with_forged_signature(app.signed_headers("msg_forged", now(), &body));
        forged.push(("X-Request-Id".into(), "req-forged".into()));
        let refused = app.post(&forged, body.clone()).await;
        assert_eq!(refused.status(), 401);
        assert_eq!(id_of(&refused), "req-forged");
        let keyless = app
            .post_json("/payments", None, &[("X-Request-Id", "req-keyless")], &json!({}))
            .await;
        assert_eq!(keyless.status(), 400);
        assert_eq!(id_of(&keyless), "req-keyless");

        // No id, or one that could break a log line, gets a fresh UUID.
        let long = "x".repeat(129);
        for (path, sent) in [
            ("/nowhere", None),
            ("/healthz", Some("two words")),
            ("/readyz", Some(long.as_str())),
            ("/metrics", Some("")),
        ] {
            let mut request = app.client.get(format!("{}{path}", app.address));
            if let Some(sent) = sent {
                request = request.header("X-Request-Id", sent);
            }
            let response = request.send().await.unwrap();
            let echoed = id_of(&response);
            assert!(uuid::Uuid::parse_str(&echoed).is_ok(), "{path}: {echoed}");
        }
    }
}

const METRICS_TOKEN: &str = "tok_metrics_0123456789abcdef";

fn with_metrics_token(builder: TestAppBuilder) -> TestAppBuilder {
    builder.top_level(&format!("metrics_token = \"{METRICS_TOKEN}\""))
}

async fn get_metrics(app: &TestApp, authorization: Option<&str>) -> reqwest::Response {
    let mut request = app.client.get(format!("{}/metrics", app.address));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    request.send().await.expect("the receiver answers")
}

both_backends! {
    async fn metrics_are_open_without_a_metrics_token(app) {
        let response = get_metrics(app, None).await;
        assert_eq!(response.status(), 200);
        assert!(response.text().await.unwrap().contains("ir_db_pool_max_size"));
        // A token nobody asked for changes nothing.
        assert_eq!(get_metrics(app, Some("Bearer whatever")).await.status(), 200);
    }
}

both_backends_with! {with_metrics_token;
    async fn with_a_metrics_token_a_scrape_without_it_gets_401_and_with_it_200(app) {
        let longer = format!("Bearer {METRICS_TOKEN}x");
        let shorter = format!("Bearer {}", &METRICS_TOKEN[..METRICS_TOKEN.len() - 1]);
        let basic = format!("Basic {METRICS_TOKEN}");
        for refused in [None, Some("Bearer tok_wrong_0123456789abcdef"), Some(longer.as_str()), Some(shorter.as_str()), Some(basic.as_str())] {
            let response = get_metrics(app, refused).await;
            let challenge = response.headers()["www-authenticate"].to_str().unwrap().to_owned();
            assert!(challenge.starts_with("Bearer"), "{challenge}");
            let body = problem(response, 401, "unauthorized").await;
            assert!(!body.to_string().contains("ir_db_pool"), "{body}");
        }
        let response = get_metrics(app, Some(&format!("Bearer {METRICS_TOKEN}"))).await;
        assert_eq!(response.status(), 200);
        assert!(response.text().await.unwrap().contains("ir_db_pool_max_size"));
    }
}

/// A `serve` process whose stdout and stderr go to files, killed on drop.
pub(crate) struct Served {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Served {
    /// Starts `serve` in `dir` with `args` before the command and `env`
    /// on top of a clean environment, and waits until it is ready.
    pub(crate) async fn start(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Served, String) {
        let port = crate::cli::free_port();
        let listen = format!("127.0.0.1:{port}");
        let stdout = dir.join("serve.stdout");
        let stderr = dir.join("serve.stderr");
        let child = Command::new(BIN)
            .args(args)
            .arg("serve")
            .current_dir(dir)
            .env_remove("DATABASE_URL")
            .env_remove("IR_CONFIG")
            .env_remove("IR_DATA_DIR")
            .env_remove("RUST_LOG")
            .env("IR_LISTEN", &listen)
            .envs(env.iter().copied())
            .stdout(Stdio::from(File::create(&stdout).unwrap()))
            .stderr(Stdio::from(File::create(&stderr).unwrap()))
            .spawn()
            .unwrap();
        let served = Served {
            child,
            stdout,
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let ready = format!("http://{listen}/readyz");
        loop {
            if reqwest::get(&ready).await.is_ok_and(|r| r.status() == 200) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "serve did not become ready: {}",
                served.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (served, listen)
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits up to 10 s for the log to satisfy `done`: lines are written
    /// as the answers go out, by the log's own writer thread, so the file
    /// may lag the answer by a moment. Fails with `what` and the log.
    pub(crate) async fn await_stderr(&self, done: impl Fn(&str) -> bool, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.stderr();
            if done(&log) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {log}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Stops the process; what it wrote stays in the files.
    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) fn provider(name: &str, secret: &str) -> Box<dyn Provider> {
    providers::build(
        name,
        &ProviderSpec {
            secrets: vec![secret.to_owned()],
            ..ProviderSpec::default()
        },
    )
    .unwrap()
}

/// Posts `body` to `url`, signed by `provider` as `id`, with `extra` headers.
pub(crate) async fn post_signed(
    url: &str,
    provider: &dyn Provider,
    id: &str,
    event_type: Option<&str>,
    body: Vec<u8>,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let signed = idempotent_receiver::client::sign(provider, id, now(), event_type, body).unwrap();
    post_raw(url, &signed.headers, signed.body, extra).await
}

async fn post_raw(
    url: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Writes a configuration with one endpoint, `shop` (Standard Webhooks,
/// the test secret), into `dir`, and returns its path.
pub(crate) fn shop_config(dir: &Path) -> String {
    let config = dir.join("receiver.toml");
    std::fs::write(
        &config,
        format!("[endpoints.shop]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\n"),
    )
    .unwrap();
    config.to_string_lossy().to_string()
}

#[tokio::test]
async fn json_logs_are_one_object_a_line_naming_the_request_id_and_the_delivery_id() {
    let dir = tempfile::tempdir().unwrap();
    let config = shop_config(dir.path());
    let (mut served, listen) = Served::start(
        dir.path(),
        &["--config", &config, "--log-format", "json"],
        &[("RUST_LOG", "info")],
    )
    .await;
    let request_id = unique("req-json-");
    let delivery_id = unique("msg_json_");
    let shop = provider("standard-webhooks", SECRET);
    let answer = post_signed(
        &format!("http://{listen}/webhooks/shop"),
        shop.as_ref(),
        &delivery_id,
        None,
        payment("pay_json", 100),
        &[("X-Request-Id", &request_id)],
    )
    .await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-request-id"], request_id.as_str());

    served
        .await_stderr(
            |log| log.contains(&delivery_id),
            "no line names the delivery",
        )
        .await;
    served.stop();
    let log = served.stderr();

    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"));
            assert!(value.is_object(), "{line}");
            value
        })
        .collect();
    assert!(lines.len() >= 3, "{log}");
    let answered: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"] == "delivery answered")
        .collect();
    assert_eq!(answered.len(), 1, "one info line per delivery: {log}");
    let line = answered[0];
    assert_eq!(line["level"], "INFO");
    assert_eq!(line["status"], 200);
    assert_eq!(line["span"]["name"], "webhook");
    assert_eq!(line["span"]["delivery_id"], delivery_id.as_str());
    assert_eq!(line["span"]["endpoint"], "shop");
    assert_eq!(line["span"]["outcome"], "processed");
    assert!(line["span"]["duration_ms"].is_number(), "{line}");
    let request = &line["spans"][0];
    assert_eq!(request["name"], "request");
    assert_eq!(request["request_id"], request_id.as_str());
    assert_eq!(request["method"], "POST");
    assert_eq!(request["route"], "/webhooks/{endpoint}");
    assert_eq!(line["spans"][1]["delivery_id"], delivery_id.as_str());
}

both_backends! {
    /// An exact repeat is answered from the replay cache before its body is
    /// parsed, and its span's fields are recorded with the answer in one
    /// record. Its line at the default level still names the delivery and
    /// its event type, in the order the first delivery's line has them, in
    /// the text format and in JSON.
    async fn a_replays_line_names_its_delivery_as_the_first_deliverys_line_does(app) {
        for format in ["text", "json"] {
            let dir = tempfile::tempdir().unwrap();
            let config = shop_config(dir.path());
            let (mut served, listen) = Served::start(
                dir.path(),
                &["--config", &config, "--log-format", format],
                &[("DATABASE_URL", app.database_url.as_str())],
            )
            .await;
            let delivery_id = unique("msg_line_");
            let shop = provider("standard-webhooks", SECRET);
            let url = format!("http://{listen}/webhooks/shop");
            let body = payment("pay_line", 100);
            let first = post_signed(&url, shop.as_ref(), &delivery_id, None, body.clone(), &[]).await;
            assert_eq!(first.status(), 200);
            let repeat = post_signed(&url, shop.as_ref(), &delivery_id, None, body, &[]).await;
            assert_eq!(repeat.status(), 200);
            assert_eq!(repeat.headers()["idempotent-replayed"], "true");

            let answered = |log: &str| -> Vec<String> {
                log.lines()
                    .filter(|l| l.contains("delivery answered") && l.contains(&delivery_id))
                    .map(str::to_owned)
                    .collect()
            };
            served
                .await_stderr(|log| answered(log).len() >= 2, &format!("{format}: two lines expected"))
                .await;
            served.stop();
            let lines = answered(&served.stderr());
            assert_eq!(lines.len(), 2, "{format}: one line per delivery: {lines:?}");
            if format == "text" {
                // The `webhook` span's fields, with the duration's value cut.
                let fields = |line: &str| -> String {
                    let start = line.find("webhook{").expect("a webhook span") + "webhook{".len();
                    let inside = &line[start..start + line[start..].find('}').expect("closed")];
                    let cut = inside.find("duration_ms=").expect("a duration") + "duration_ms=".len();
                    inside[..cut].to_owned()
                };
                let expected = |outcome: &str| {
                    format!(
                        "endpoint=shop delivery_id={delivery_id} event_type=payment.succeeded \
                         outcome=\"{outcome}\" duration_ms="
                    )
                };
                assert_eq!(fields(&lines[0]), expected("processed"), "{}", lines[0]);
                assert_eq!(fields(&lines[1]), expected("replayed"), "{}", lines[1]);
                assert!(lines[1].contains("request{request_id="), "{}", lines[1]);
                assert!(lines[1].ends_with("delivery answered status=200"), "{}", lines[1]);
            } else {
                for (line, outcome) in lines.iter().zip(["processed", "replayed"]) {
                    let line: Value = serde_json::from_str(line).unwrap();
                    assert_eq!(line["span"]["name"], "webhook");
                    assert_eq!(line["span"]["delivery_id"], delivery_id.as_str());
                    assert_eq!(line["span"]["event_type"], "payment.succeeded");
                    assert_eq!(line["span"]["outcome"], outcome);
                    assert!(line["span"]["duration_ms"].is_number(), "{line}");
                    assert_eq!(line["spans"][1]["delivery_id"], delivery_id.as_str());
                    assert_eq!(line["status"], 200);
                }
            }
        }
    }
}

/// `url` (a PostgreSQL URL) with `password` in its userinfo.
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    match rest.split_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("root");
            format!("{scheme}://{user}:{password}@{host}")
        }
        None => format!("{scheme}://root:{password}@{rest}"),
    }
}

/// `text` without ANSI colour sequences (`ESC [ ... m`).
fn without_ansi(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

fn random_whsec() -> String {
    let key: [u8; 32] = rand::random();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_token_or_password_reaches_stdout_or_stderr_even_at_trace_level() {
    // The binary's database: a schema of this test's own on PostgreSQL,
    // reached with a password in the URL (trust authentication ignores it).
    let Some(app) = TestApp::spawn_if_available(Backend::Postgres).await else {
        return;
    };
    let password = format!("hunter2-{}", uuid::Uuid::new_v4().simple());
    let query_password = format!("hunter3-{}", uuid::Uuid::new_v4().simple());
    // In the userinfo and as a query parameter: PostgreSQL accepts both.
    let database_url = format!(
        "{}&password={query_password}",
        with_password(&app.database_url, &password)
    );
    let env_secret = random_whsec();
    let stripe_secret = random_whsec();
    let github_secret = format!("gh-secret-{}", uuid::Uuid::new_v4().simple());
    let admin_token = format!("admin-token-{}", uuid::Uuid::new_v4().simple());
    let admin_tokens = format!("{admin_token},second-{admin_token}");

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("receiver.toml");
    std::fs::write(
        &config,
        format!(
            "[endpoints.shop]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nsecrets_env = \"SHOP_SECRETS\"\n\
             [endpoints.gh]\nprovider = \"github\"\nsecrets_env = \"GH_SECRET\"\n\
             [endpoints.st]\nprovider = \"stripe\"\nsecrets_env = \"STRIPE_SECRET\"\n"
        ),
    )
    .unwrap();
    let config = config.to_string_lossy().to_string();
    let env = [
        ("RUST_LOG", "trace"),
        ("DATABASE_URL", database_url.as_str()),
        ("SHOP_SECRETS", env_secret.as_str()),
        ("GH_SECRET", github_secret.as_str()),
        ("STRIPE_SECRET", stripe_secret.as_str()),
        ("IR_ADMIN_TOKENS", admin_tokens.as_str()),
    ];
    let (mut served, listen) = Served::start(dir.path(), &["--config", &config], &env).await;
    let base = format!("http://{listen}");
    let shop_url = format!("{base}/webhooks/shop");
    let status = |r: reqwest::Response| r.status().as_u16();

    // Valid deliveries, with the file's secret, the environment's, and a replay.
    let shop = provider("standard-webhooks", SECRET);
    let shop_env = provider("standard-webhooks", &env_secret);
    let body = payment("pay_secret", 100);
    let first = post_signed(&shop_url, shop.as_ref(), "msg_s1", None, body.clone(), &[]).await;
    assert_eq!(status(first), 200);
    let by_env = post_signed(
        &shop_url,
        shop_env.as_ref(),
        "msg_s2",
        None,
        body.clone(),
        &[],
    );
    assert_eq!(status(by_env.await), 200);
    let replay = post_signed(&shop_url, shop.as_ref(), "msg_s1", None, body.clone(), &[]);
    assert_eq!(status(replay.await), 200);
    // A wrong secret, malformed headers, missing headers, an admin token
    // sent where it means nothing.
    let stranger = provider("standard-webhooks", &random_whsec());
    let wrong = post_signed(
        &shop_url,
        stranger.as_ref(),
        "msg_s3",
        None,
        body.clone(),
        &[],
    );
    assert_eq!(status(wrong.await), 401);
    let malformed = [
        ("webhook-id".to_owned(), "msg_s4".to_owned()),
        ("webhook-timestamp".to_owned(), "yesterday".to_owned()),
        (
            "webhook-signature".to_owned(),
            "v1,***not-base64***".to_owned(),
        ),
    ];
    let bearer = format!("Bearer {admin_token}");
    let extra = [("Authorization", bearer.as_str())];
    assert_eq!(
        status(post_raw(&shop_url, &malformed, body.clone(), &extra).await),
        400
    );
    assert_eq!(
        status(post_raw(&shop_url, &[], body.clone(), &[]).await),
        400
    );

    // The admin surface with the right token and with a near miss.
    let client = reqwest::Client::new();
    let listing = client
        .get(format!("{base}/admin/deliveries"))
        .header("Authorization", bearer.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(listing.status(), 200);
    let near_miss = format!("Bearer {admin_token}x");
    let refused = client
        .get(format!("{base}/admin/deliveries"))
        .header("Authorization", near_miss.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    // GitHub (a plain secret) and Stripe (the whole whsec_ string as key).
    let gh_url = format!("{base}/webhooks/gh");
    let github = provider("github", &github_secret);
    let push = post_signed(
        &gh_url,
        github.as_ref(),
        "d-1",
        Some("push"),
        body.clone(),
        &[],
    );
    assert_eq!(status(push.await), 200);
    let gh_stranger = provider("github", "not-the-secret");
    let wrong = post_signed(
        &gh_url,
        gh_stranger.as_ref(),
        "d-2",
        Some("push"),
        body.clone(),
        &[],
    );
    assert_eq!(status(wrong.await), 401);
    let st_url = format!("{base}/webhooks/st");
    let stripe = provider("stripe", &stripe_secret);
    let event = serde_json::to_vec(&json!({
        "id": "evt_secret_1", "type": "payment_intent.succeeded",
        "data": { "object": { "id": "pi_1", "amount_received": 100, "currency": "eur" } }
    }))
    .unwrap();
    let paid = post_signed(
        &st_url,
        stripe.as_ref(),
        "evt_secret_1",
        None,
        event.clone(),
        &[],
    );
    let paid = status(paid.await);
    assert!(paid == 200 || paid == 422, "verified: {paid}");
    let garbled = [("Stripe-Signature".to_owned(), "t=soon,v1=zz".to_owned())];
    assert_eq!(status(post_raw(&st_url, &garbled, event, &[]).await), 400);
    for path in ["/metrics", "/readyz", "/nowhere"] {
        reqwest::get(format!("{base}{path}")).await.unwrap();
    }

    // The operator commands print too: send signs with a configured secret.
    let send = Command::new(BIN)
        .args([
            "--config",
            &config,
            "send",
            "--endpoint",
            "shop",
            "--id",
            "msg_s5",
        ])
        .current_dir(dir.path())
        .env_remove("IR_CONFIG")
        .env_remove("IR_DATA_DIR")
        .env("IR_LISTEN", &listen)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(send.status.success(), "send failed");

    tokio::time::sleep(Duration::from_millis(200)).await;
    served.stop();
    // Colours could split a value; read the text without them.
    let outputs = [
        ("serve stdout", without_ansi(&served.stdout())),
        ("serve stderr", without_ansi(&served.stderr())),
        (
            "send stdout",
            without_ansi(&String::from_utf8_lossy(&send.stdout)),
        ),
        (
            "send stderr",
            without_ansi(&String::from_utf8_lossy(&send.stderr)),
        ),
    ];
    // The run did log at trace, and about these deliveries.
    let stderr = &outputs[1].1;
    assert!(stderr.contains("TRACE"), "nothing logged at trace");
    assert!(stderr.contains("msg_s1") && stderr.contains("delivery answered"));

    let secrets = [
        ("the file's whsec_ secret", SECRET),
        ("its base64 part", &SECRET["whsec_".len()..]),
        ("the environment's whsec_ secret", env_secret.as_str()),
        ("its base64 part", &env_secret["whsec_".len()..]),
        ("the Stripe secret", stripe_secret.as_str()),
        ("its base64 part", &stripe_secret["whsec_".len()..]),
        ("the GitHub secret", github_secret.as_str()),
        ("the admin token", admin_token.as_str()),
        ("the database password", password.as_str()),
        (
            "the database password in the query",
            query_password.as_str(),
        ),
    ];
    for (output, text) in &outputs {
        for (what, secret) in secrets {
            let leaks: Vec<&str> = text.lines().filter(|l| l.contains(secret)).collect();
            assert!(
                leaks.is_empty(),
                "{what} appears in {output}:\n{}",
                leaks.join("\n")
            );
        }
    }
    drop(served);
}
