//! Log injection: text from a request (an unknown endpoint's name, a signed
//! event type) cannot start a line of its own, colour the log, or blow a
//! line up, in the default text log of the real binary written to a file.

use crate::both_backends;
use crate::helpers::{Backend, SECRET, TestApp, problem};
use crate::observability::{Served, post_signed, provider, shop_config};
use idempotent_receiver::log_text::MAX_LOGGED_CHARS;

/// The request: a forged INFO line and an ESC in the endpoint name.
const FORGED_PATH: &str =
    "/webhooks/x%0A2026-12-01T00:00:00.000000Z%20%20INFO%20admin%20logged%20in%1B%5B31m";
/// How that name is written once escaped.
const FORGED_ESCAPED: &str = "x\\u{a}2026-12-01T00:00:00.000000Z  INFO admin logged in\\u{1b}[31m";
/// No line of the log may be longer: a few capped fields and the spans.
const LINE_CAP: usize = 2048;

/// A 30 KB endpoint name, percent-encoded, with a newline and an ESC.
fn long_path() -> String {
    format!("/webhooks/%0A{}%1B%5B31m", "a".repeat(30_000))
}

/// An event type that tries to end its line and start a forged one.
const FORGED_TYPE: &str = "order.created\n2026-12-01T00:00:00.000000Z ERROR forged\u{1b}[31m";

async fn log_injection_leaves_every_line_of_the_text_log_the_binarys_own(backend: Backend) {
    // PostgreSQL: the binary runs on a schema of the test's own.
    let database = match backend {
        Backend::Sqlite => None,
        Backend::Postgres => match TestApp::spawn_if_available(Backend::Postgres).await {
            Some(app) => Some(app),
            None => return,
        },
    };
    let dir = tempfile::tempdir().unwrap();
    let config = shop_config(dir.path());
    let mut env = vec![("RUST_LOG", "info")];
    if let Some(app) = &database {
        env.push(("DATABASE_URL", app.database_url.as_str()));
    }
    let started = chrono::Utc::now() - chrono::TimeDelta::seconds(1);
    // The default format: text, to a file.
    let (mut served, listen) = Served::start(dir.path(), &["--config", &config], &env).await;
    let client = reqwest::Client::new();
    for path in [FORGED_PATH.to_owned(), long_path()] {
        let answer = client
            .post(format!("http://{listen}{path}"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 404);
    }
    let shop = provider("standard-webhooks", SECRET);
    let body = serde_json::json!({ "type": FORGED_TYPE, "data": {} }).to_string();
    let answer = post_signed(
        &format!("http://{listen}/webhooks/shop"),
        shop.as_ref(),
        "msg_forged_type",
        None,
        body.into_bytes(),
        &[],
    )
    .await;
    assert_eq!(answer.status(), 200);

    served
        .await_stderr(
            |log| log.contains("msg_forged_type"),
            "no line names the delivery",
        )
        .await;
    served.stop();
    let log = served.stderr();

    assert!(!log.contains('\u{1b}'), "an ESC byte reached the log");
    for line in log.lines() {
        assert!(line.len() < LINE_CAP, "a line of {} bytes", line.len());
        // Every line is the binary's own: its timestamp, taken now (the
        // forged one is from the past), then a level.
        let (at, rest) = line.split_once(' ').unwrap_or((line, ""));
        let at = chrono::DateTime::parse_from_rfc3339(at)
            .unwrap_or_else(|e| panic!("a line that is not the binary's ({e}): {line:?}"));
        assert!(at >= started, "a line with a forged timestamp: {line:?}");
        let level = rest.trim_start().split(' ').next().unwrap_or("");
        assert!(
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level),
            "{line:?}"
        );
    }
    // The requests were logged, escaped; the long name cut with its count.
    assert!(log.contains(FORGED_ESCAPED), "{log}");
    assert!(
        log.contains("order.created\\u{a}2026-12-01T00:00:00.000000Z ERROR forged\\u{1b}[31m"),
        "{log}"
    );
    let cut = format!("\\u{{a}}{}…(+", "a".repeat(MAX_LOGGED_CHARS - 5));
    assert!(log.contains(&cut), "{log}");
}

#[tokio::test]
async fn log_injection_leaves_every_line_of_the_text_log_the_binarys_own_sqlite() {
    log_injection_leaves_every_line_of_the_text_log_the_binarys_own(Backend::Sqlite).await;
}

#[tokio::test]
async fn log_injection_leaves_every_line_of_the_text_log_the_binarys_own_postgres() {
    log_injection_leaves_every_line_of_the_text_log_the_binarys_own(Backend::Postgres).await;
}

both_backends! {
    async fn an_unknown_endpoints_name_is_answered_escaped_and_capped(app) {
        let forged = app.client.post(format!("{}{FORGED_PATH}", app.address)).body("{}").send().await.unwrap();
        let body = problem(forged, 404, "unknown-endpoint").await;
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains(FORGED_ESCAPED), "{detail}");
        assert!(!detail.contains('\n') && !detail.contains('\u{1b}'), "{detail}");

        let long = app.client.post(format!("{}{}", app.address, long_path())).body("{}").send().await.unwrap();
        let body = problem(long, 404, "unknown-endpoint").await;
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.len() < MAX_LOGGED_CHARS + 100, "a detail of {} bytes", detail.len());
        assert!(detail.contains("…(+"), "{detail}");
        assert_eq!(app.count("deliveries").await, 0);
    }
}
