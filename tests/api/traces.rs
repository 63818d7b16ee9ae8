//! OpenTelemetry traces, against an OTLP/HTTP collector that the test
//! starts and that decodes what it receives: a delivery's spans, their
//! parents and attributes, a caller's `traceparent` continued, a refusal's
//! reason, and the `traceparent` that `forward` passes downstream.
//!
//! The tracing subscriber is global to the test binary, so the pipeline is
//! one for the binary: installed by the first test of this module, with a
//! collector shared by them all and a runtime of its own for the
//! exporter's HTTP calls (each test's runtime ends with the test). Other
//! modules' deliveries may be exported too once it is installed; every
//! assertion here picks its spans by the test's own trace id or delivery id.

use crate::cli::{Server, binary, free_port, wait_until_ready};
use crate::helpers::{ENDPOINT, TestApp, TestAppBuilder, payment};
use crate::otlp_collector::{Collector, ReceivedSpan};
use crate::{both_backends, both_backends_with};
use idempotent_receiver::telemetry::{TraceSettings, Traces};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

const SERVICE: &str = "receiver-under-test";

struct Pipeline {
    collector: Collector,
    traces: Arc<Traces>,
    _runtime: tokio::runtime::Runtime,
}

fn pipeline() -> &'static Pipeline {
    static PIPELINE: OnceLock<Pipeline> = OnceLock::new();
    PIPELINE.get_or_init(|| {
        let collector = Collector::start();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the exporter's runtime");
        let settings = TraceSettings {
            endpoint: format!("{}/v1/traces", collector.base_url),
            service_name: SERVICE.to_owned(),
        };
        let traces = Traces::start(&settings, runtime.handle().clone()).expect("the exporter");
        tracing_subscriber::registry()
            .with(traces.layer())
            .try_init()
            .expect("no other global subscriber in the api tests");
        Pipeline {
            collector,
            traces: Arc::new(traces),
            _runtime: runtime,
        }
    })
}

fn forwarding_to_the_collector(builder: TestAppBuilder) -> TestAppBuilder {
    let base = &pipeline().collector.base_url;
    builder
        .endpoints_toml(&format!(
            "[forwarders.downstream]\nurl = \"{base}/downstream\"\ntimeout = \"5s\"\nretries = 0\n"
        ))
        .handler_name("downstream")
}

/// A fresh W3C trace id and parent span id, as a caller would send them.
fn caller_context() -> (String, String, String) {
    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let parent = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
    let traceparent = format!("00-{trace_id}-{parent}-01");
    (trace_id, parent, traceparent)
}

/// Flushes the exporter until the collector holds spans for which `done`
/// holds, and returns them. The deadline only ends a test that would
/// otherwise hang; nothing is measured.
async fn wait_for(done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
    let pipeline = pipeline();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let traces = pipeline.traces.clone();
        tokio::task::spawn_blocking(move || traces.flush())
            .await
            .expect("the flush runs")
            .expect("the spans are exported");
        let spans = pipeline.collector.spans();
        if done(&spans) {
            return spans;
        }
        assert!(
            Instant::now() < deadline,
            "the collector never received the expected spans; it has: {:#?}",
            spans
                .iter()
                .map(|s| (s.name(), s.trace_id()))
                .collect::<Vec<_>>()
        );
        // A span still open is exported by a later flush.
        let _ = tokio::time::timeout(Duration::from_millis(50), pipeline.collector.changed()).await;
    }
}

fn in_trace<'a>(spans: &'a [ReceivedSpan], trace_id: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.trace_id() == trace_id).collect()
}

fn one<'a>(spans: &[&'a ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let named: Vec<_> = spans.iter().filter(|s| s.name() == name).collect();
    assert_eq!(named.len(), 1, "one `{name}` span in {spans:#?}");
    named[0]
}

async fn deliver_with(
    app: &TestApp,
    id: &str,
    body: &[u8],
    traceparent: &str,
) -> reqwest::Response {
    let mut headers = app.signed_headers(id, app.now(), body);
    headers.push(("traceparent".to_owned(), traceparent.to_owned()));
    app.post(&headers, body.to_vec()).await
}

both_backends_with!(forwarding_to_the_collector;
    async fn a_delivery_continues_the_callers_trace_with_a_span_per_step_and_forwards_it(app) {
        let (trace_id, caller_span, traceparent) = caller_context();
        let id = format!("msg_{trace_id}");
        let response = deliver_with(app, &id, &payment("pay_traced", 100), &traceparent).await;
        assert_eq!(response.status(), 200);

        let names = ["webhook", "verify", "process", "claim", "handler", "complete"];
        let spans = wait_for(|spans| {
            let traced = in_trace(spans, &trace_id);
            names.iter().all(|name| traced.iter().any(|s| s.name() == *name))
        })
        .await;
        let traced = in_trace(&spans, &trace_id);
        assert!(traced.iter().all(|s| s.service == SERVICE), "{traced:#?}");

        // The caller's span is the delivery's parent.
        let webhook = one(&traced, "webhook");
        assert_eq!(webhook.parent_span_id(), caller_span);
        assert_eq!(webhook.attribute("http.request.method").as_deref(), Some("POST"));
        assert_eq!(webhook.attribute("http.route").as_deref(), Some("/webhooks/{endpoint}"));
        assert_eq!(webhook.attribute("http.response.status_code").as_deref(), Some("200"));
        assert_eq!(webhook.attribute("webhook.endpoint").as_deref(), Some(ENDPOINT));
        assert_eq!(webhook.attribute("webhook.delivery_id"), Some(id.clone()));
        assert_eq!(webhook.attribute("webhook.event_type").as_deref(), Some("payment.succeeded"));
        assert_eq!(webhook.attribute("webhook.outcome").as_deref(), Some("processed"));
        assert_eq!(webhook.status_code(), 0, "a processed delivery is no error");

        // Verification and processing under the delivery; the claim, each
        // handler and the completion under the processing.
        let verify = one(&traced, "verify");
        assert_eq!(verify.parent_span_id(), webhook.span_id());
        let process = one(&traced, "process");
        assert_eq!(process.parent_span_id(), webhook.span_id());
        assert_eq!(process.attribute("webhook.delivery_id"), Some(id.clone()));
        let claim = one(&traced, "claim");
        assert_eq!(claim.parent_span_id(), process.span_id());
        assert_eq!(claim.attribute("webhook.claim").as_deref(), Some("fresh"));
        // Each configured handler: `record` and `payments` (the test app's
        // own) in the transaction, `downstream` (a forwarder) before it.
        let handlers: Vec<_> = traced.iter().filter(|s| s.name() == "handler").collect();
        let mut handled: Vec<_> = handlers
            .iter()
            .filter_map(|s| s.attribute("webhook.handler"))
            .collect();
        handled.sort();
        assert_eq!(handled, ["downstream", "payments", "record"]);
        assert!(handlers.iter().all(|s| s.parent_span_id() == process.span_id()), "{handlers:#?}");
        let handler = handlers
            .iter()
            .find(|s| s.attribute("webhook.handler").as_deref() == Some("downstream"))
            .expect("the forwarder's span");
        let complete = one(&traced, "complete");
        assert_eq!(complete.parent_span_id(), process.span_id());

        // The downstream call carries the trace, its parent the handler's span.
        let forwarded = format!("00-{trace_id}-{}-01", handler.span_id());
        assert!(
            pipeline().collector.traceparents().contains(&forwarded),
            "{forwarded} in {:?}",
            pipeline().collector.traceparents()
        );

        // No attribute holds the payload or the signature.
        for span in &traced {
            for attribute in &span.span.attributes {
                let value = format!("{:?}", attribute.value);
                assert!(!value.contains("pay_traced"), "{}: {value}", attribute.key);
                assert!(!value.contains("v1,"), "{}: {value}", attribute.key);
            }
        }
    }
);

both_backends_with!(forwarding_to_the_collector;
    async fn a_redelivery_is_traced_as_a_replay_and_a_delivery_without_traceparent_starts_a_trace(app) {
        let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
        let body = payment("pay_again", 100);
        assert_eq!(app.deliver(&id, &body).await.status(), 200);
        let (trace_id, _, traceparent) = caller_context();
        let again = deliver_with(app, &id, &body, &traceparent).await;
        assert_eq!(again.status(), 200);

        let spans = wait_for(|spans| {
            let first = spans.iter().any(|s| {
                s.name() == "webhook" && s.attribute("webhook.delivery_id").as_deref() == Some(&id) && s.trace_id() != trace_id
            });
            first && in_trace(spans, &trace_id).iter().any(|s| s.name() == "webhook")
        })
        .await;
        let first: Vec<_> = spans
            .iter()
            .filter(|s| s.name() == "webhook" && s.attribute("webhook.delivery_id").as_deref() == Some(&id) && s.trace_id() != trace_id)
            .collect();
        assert_eq!(first.len(), 1, "{first:#?}");
        assert_eq!(first[0].parent_span_id(), "", "no traceparent: a root span");
        assert_eq!(first[0].attribute("webhook.outcome").as_deref(), Some("processed"));

        let replay = in_trace(&spans, &trace_id);
        let webhook = one(&replay, "webhook");
        assert_eq!(webhook.attribute("webhook.outcome").as_deref(), Some("replayed"));
        assert_eq!(webhook.attribute("webhook.delivery_id"), Some(id.clone()));
        assert!(
            replay.iter().all(|s| s.name() != "handler"),
            "a replay runs no handler: {replay:#?}"
        );
    }
);

both_backends!(
    /// The first delivery of a new process finds no spare ledger id. The
    /// `payments` handler books, so on SQLite a plan with a stand-in id
    /// tells that it needs one, and the handlers plan again with a reserved
    /// id: each handler is still traced once.
    async fn a_booking_delivery_with_no_spare_ledger_id_traces_each_handler_once(app) {
        // The exporter, installed before the delivery makes its spans.
        pipeline();
        let (trace_id, _, traceparent) = caller_context();
        let id = format!("msg_{trace_id}");
        let response = deliver_with(app, &id, &payment("pay_first", 100), &traceparent).await;
        assert_eq!(response.status(), 200);
        let answer: serde_json::Value = response.json().await.expect("a JSON answer");
        assert!(answer.pointer("/effects/payments/ledger_entry_id").is_some_and(|v| v.is_i64()), "{answer}");

        let spans = wait_for(|spans| {
            let traced = in_trace(spans, &trace_id);
            ["webhook", "process", "handler"].iter().all(|name| traced.iter().any(|s| s.name() == *name))
        })
        .await;
        let traced = in_trace(&spans, &trace_id);
        let process = one(&traced, "process");
        let mut handled: Vec<_> = traced
            .iter()
            .filter(|s| s.name() == "handler")
            .map(|s| {
                assert_eq!(s.parent_span_id(), process.span_id());
                s.attribute("webhook.handler").unwrap_or_default()
            })
            .collect();
        handled.sort();
        assert_eq!(handled, ["payments", "record"], "one span per handler: {traced:#?}");
        assert_eq!(one(&traced, "webhook").attribute("webhook.outcome").as_deref(), Some("processed"));
    }
);

both_backends_with!(forwarding_to_the_collector;
    async fn a_refused_delivery_has_a_span_with_the_reason_and_status_error(app) {
        let (trace_id, caller_span, traceparent) = caller_context();
        let body = payment("pay_forged", 100);
        let mut headers = app.signed_headers("msg_forged", app.now(), &body);
        for (name, value) in &mut headers {
            if name.eq_ignore_ascii_case("webhook-signature") {
                *value = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_owned();
            }
        }
        headers.push(("traceparent".to_owned(), traceparent));
        let response = app.post(&headers, body).await;
        assert_eq!(response.status(), 401);

        let spans = wait_for(|spans| {
            let traced = in_trace(spans, &trace_id);
            ["webhook", "verify"].iter().all(|name| traced.iter().any(|s| s.name() == *name))
        })
        .await;
        let traced = in_trace(&spans, &trace_id);
        let webhook = one(&traced, "webhook");
        assert_eq!(webhook.parent_span_id(), caller_span);
        assert_eq!(webhook.attribute("webhook.outcome").as_deref(), Some("rejected"));
        assert_eq!(webhook.attribute("webhook.rejection").as_deref(), Some("invalid-signature"));
        assert_eq!(webhook.attribute("http.response.status_code").as_deref(), Some("401"));
        assert_eq!(webhook.status_code(), 2, "status Error");
        assert!(webhook.status_message().starts_with("invalid-signature"), "{}", webhook.status_message());
        let verify = one(&traced, "verify");
        assert_eq!(verify.parent_span_id(), webhook.span_id());
        assert_eq!(verify.status_code(), 2, "status Error");
        assert!(
            traced.iter().all(|s| s.name() != "process"),
            "a refused delivery claims nothing: {traced:#?}"
        );
        assert!(pipeline().collector.traceparents().iter().all(|t| !t.contains(&trace_id)));
    }
);

both_backends!(
    /// The binary as an operator runs it: `otlp_endpoint` in the file and
    /// `OTEL_SERVICE_NAME` in the environment. The span of a delivery
    /// answered just before SIGTERM reaches the collector by the time the
    /// process has exited: the exporter is flushed at the end of `serve`,
    /// not left to its next scheduled export.
    async fn serve_exports_to_otlp_endpoint_and_flushes_on_shutdown(app) {
        let collector = &pipeline().collector;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("receiver.toml");
        std::fs::write(
            &config,
            format!(
                "otlp_endpoint = {:?}\npurge_interval = \"0\"\nreconcile_interval = \"0\"\n[endpoints.{ENDPOINT}]\nprovider = \"standard-webhooks\"\nsecrets = [{:?}]\nhandlers = [\"record\"]\n",
                collector.base_url,
                crate::helpers::SECRET
            ),
        )
        .unwrap();
        let listen = format!("127.0.0.1:{}", free_port());
        let config_arg = config.to_str().unwrap();
        let mut serve = binary(
            dir.path(),
            &listen,
            &["--config", config_arg, "--database-url", &app.database_url, "serve"],
        );
        serve
            .env("OTEL_SERVICE_NAME", "receiver-binary")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let mut server = Server(serve.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
        wait_until_ready(&listen).await;

        let (trace_id, caller_span, traceparent) = caller_context();
        let id = format!("msg_{trace_id}");
        let body = payment("pay_binary", 100);
        let mut request = reqwest::Client::new()
            .post(format!("http://{listen}/webhooks/{ENDPOINT}"))
            .header("content-type", "application/json")
            .header("traceparent", &traceparent)
            .body(body.clone());
        for (name, value) in app.signed_headers(&id, app.now(), &body) {
            request = request.header(name, value);
        }
        assert_eq!(request.send().await.unwrap().status(), 200);

        let pid = server.0.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(30);
        let exit = loop {
            if let Some(status) = server.0.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the server did not exit after SIGTERM");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(exit.success(), "{exit:?}");

        let spans = collector.spans();
        let traced = in_trace(&spans, &trace_id);
        let webhook = one(&traced, "webhook");
        assert_eq!(webhook.service, "receiver-binary");
        assert_eq!(webhook.parent_span_id(), caller_span);
        assert_eq!(webhook.attribute("webhook.delivery_id"), Some(id));
        assert_eq!(webhook.attribute("webhook.outcome").as_deref(), Some("processed"));
        for name in ["verify", "process", "claim", "handler"] {
            one(&traced, name);
        }
        // `record` plans, so the claim inserts the row completed: its `claim`
        // span says so, and there is no `complete` after it. On PostgreSQL
        // the delivery is one statement; on SQLite the claim and the row are
        // statements in the delivery's savepoint.
        let claim = one(&traced, "claim");
        assert_eq!(claim.attribute("webhook.claim").as_deref(), Some("fresh"));
        assert_eq!(claim.attribute("webhook.planned").as_deref(), Some("true"));
        assert!(traced.iter().all(|s| s.name() != "complete"), "{traced:#?}");
        if app.database_url.starts_with("postgres") {
            assert_eq!(claim.attribute("webhook.one_statement").as_deref(), Some("true"));
        } else {
            assert_eq!(claim.attribute("webhook.one_statement"), None);
        }
    }
);

/// A queued endpoint `q` whose worker the test drives.
fn queued_and_forwarding(builder: TestAppBuilder) -> TestAppBuilder {
    forwarding_to_the_collector(builder)
        .top_level("queue_workers = 0\n")
        .endpoints_toml(&format!(
            "[endpoints.q]\nprovider = \"standard-webhooks\"\nsecrets = [\"{}\"]\nhandlers = [\"record\"]\nmode = \"queued\"\n",
            crate::helpers::SECRET
        ))
}

both_backends_with!(queued_and_forwarding;
    async fn a_queued_delivery_is_traced_to_its_enqueue_and_its_run_is_a_job_trace(app) {
        let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
        let accepted = app.deliver_to("q", &id, &payment("pay_queued", 100)).await;
        assert_eq!(accepted.status(), 202);
        let report = idempotent_receiver::maintenance::run_due(&app.webhooks, 100).await.unwrap();
        assert_eq!(report.done, 1);

        let of_this = |s: &ReceivedSpan| s.attribute("webhook.delivery_id").as_deref() == Some(&id);
        let spans = wait_for(|spans| {
            spans.iter().any(|s| of_this(s) && s.name() == "webhook")
                && spans.iter().any(|s| of_this(s) && s.name() == "job")
        })
        .await;
        let webhook = spans.iter().find(|s| of_this(s) && s.name() == "webhook").unwrap();
        assert_eq!(webhook.attribute("webhook.endpoint").as_deref(), Some("q"));
        assert_eq!(webhook.attribute("webhook.outcome").as_deref(), Some("processed"));
        assert_eq!(webhook.attribute("http.response.status_code").as_deref(), Some("202"));
        let job = spans.iter().find(|s| of_this(s) && s.name() == "job").unwrap();
        assert_eq!(job.parent_span_id(), "", "the worker's run starts a trace");
        assert_eq!(job.attribute("webhook.endpoint").as_deref(), Some("q"));
        assert_eq!(job.attribute("webhook.event_type").as_deref(), Some("payment.succeeded"));
        assert_eq!(job.attribute("webhook.attempt").as_deref(), Some("1"));
        let run = in_trace(&spans, &job.trace_id());
        let handler = one(&run, "handler");
        assert_eq!(handler.parent_span_id(), job.span_id());
        assert_eq!(handler.attribute("webhook.handler").as_deref(), Some("record"));
        assert_eq!(job.attribute("webhook.outcome").as_deref(), Some("done"));
        assert_eq!(job.status_code(), 0);
    }
);
