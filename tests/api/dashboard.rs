//! The dashboard (`/admin`, `/admin/dashboard.json`): deliveries sent over
//! real HTTP with every outcome, the traffic counters flushed by hand, and
//! the figures read back from the JSON API and from the page's SVG.

use crate::both_backends_with;
use crate::helpers::{ADMIN_TOKEN, ENDPOINT, TestApp, TestAppBuilder, payment, problem};
use idempotent_receiver::clock::Clock;
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::maintenance::{PurgeOptions, purge};
use idempotent_receiver::store::DbConn;
use idempotent_receiver::store::traffic::TrafficCount;
use serde_json::Value;

/// Fails every delivery whose id starts with `msg_fail`.
struct FailMarked;

#[async_trait::async_trait(?Send)]
impl Handler for FailMarked {
    async fn handle(&self, event: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        if event.delivery_id.starts_with("msg_fail") {
            return Err(HandlerError::Failed("refused on purpose".into()));
        }
        Ok(None)
    }
}

/// The background flush waits an hour: the test flushes by hand, so that
/// what it reads does not depend on when a tick came.
pub(crate) fn admin_failing(builder: TestAppBuilder) -> TestAppBuilder {
    admin(builder).handler("fail-marked", FailMarked)
}

fn admin(builder: TestAppBuilder) -> TestAppBuilder {
    builder.admin().top_level("traffic_flush_interval = \"1h\"")
}

/// Two processed, one replayed, one rejected (bad signature), one failed.
pub(crate) async fn send_every_outcome(app: &TestApp) {
    for id in ["msg_a", "msg_b", "msg_a"] {
        let response = app.deliver(id, &payment(&format!("pay_{id}"), 100)).await;
        assert_eq!(response.status(), 200, "{id}");
    }
    let headers = app.signed_headers("msg_forged", app.now(), b"{\"signed\":true}");
    let forged = app.post(&headers, b"{\"signed\":false}".to_vec()).await;
    problem(forged, 401, "invalid-signature").await;
    let failed = app.deliver("msg_fail", &payment("pay_fail", 100)).await;
    assert_eq!(failed.status(), 500);
}

pub(crate) async fn flush(app: &TestApp) -> usize {
    app.webhooks
        .traffic()
        .flush(&app.store)
        .await
        .expect("the counters are written")
}

/// A session cookie, from the log-in form.
async fn session(app: &TestApp) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client");
    let response = client
        .post(format!("{}/admin/login", app.admin_address))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={ADMIN_TOKEN}"))
        .send()
        .await
        .expect("the receiver answers");
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/admin");
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

async fn page(app: &TestApp, path: &str, cookie: &str) -> (u16, String) {
    let response = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
        .get(format!("{}{path}", app.admin_address))
        .header("cookie", cookie)
        .send()
        .await
        .expect("the receiver answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

/// The counts of `series` in one drawn size of the page's chart, from the
/// bars' `data-count`s.
fn drawn(html: &str, size: &str, series: &str) -> i64 {
    let start = html
        .find(&format!("data-size=\"{size}\""))
        .expect("the chart is drawn");
    let end = html[start..].find("</svg>").expect("the chart ends") + start;
    let marker = format!("data-series=\"{series}\" data-count=\"");
    html[start..end]
        .match_indices(&marker)
        .map(|(at, _)| {
            let rest = &html[start + at + marker.len()..];
            rest[..rest.find('"').unwrap()].parse::<i64>().unwrap()
        })
        .sum()
}

both_backends_with!(admin_failing;
    async fn every_outcome_sent_over_http_is_counted_on_the_dashboard_and_its_json(app) {
        send_every_outcome(app).await;
        // Nothing reaches the table before a flush.
        let before = app.admin_json("/admin/dashboard.json?window=1h").await;
        assert_eq!(before["total"], 0, "{before}");
        assert!(flush(app).await >= 4);
        assert_eq!(flush(app).await, 0, "a flush takes what it wrote");

        let figures = app.admin_json(&format!("/admin/dashboard.json?window=1h&endpoint={ENDPOINT}")).await;
        let totals = &figures["totals"];
        assert_eq!(totals["processed"], 2, "{figures}");
        assert_eq!(totals["replayed"], 1, "{figures}");
        assert_eq!(totals["rejected:invalid-signature"], 1, "{figures}");
        assert_eq!(totals["failed:processing-failed"], 1, "{figures}");
        assert_eq!(figures["total"], 5);
        let ratio = figures["replay_ratio"].as_f64().unwrap();
        assert!((ratio - 1.0 / 3.0).abs() < 1e-9, "{ratio}");
        assert_eq!(figures["latency"]["processed"]["count"], 2);
        assert_eq!(figures["latency"]["all"]["count"], 5);
        let p50 = figures["latency"]["processed"]["p50_ms"].as_f64().unwrap();
        let p99 = figures["latency"]["processed"]["p99_ms"].as_f64().unwrap();
        assert!(p50 > 0.0 && p50 <= p99, "{p50} {p99}");
        // 60 bars of a minute; their counts add up to the totals.
        let slots = figures["slots"].as_array().unwrap();
        assert_eq!(slots.len(), 60);
        assert_eq!(figures["slot_seconds"], 60);
        let processed: i64 = slots.iter().filter_map(|s| s["counts"]["processed"].as_i64()).sum();
        assert_eq!(processed, 2);
        // The endpoint's settings: the provider's retry window, the retention.
        let settings = &figures["settings"][0];
        assert_eq!(settings["endpoint"], ENDPOINT);
        assert_eq!(settings["provider"], "standard-webhooks");
        assert!(!settings["retry_window"].as_str().unwrap().is_empty());
        assert_eq!(settings["retention"], "72h");
        assert_eq!(figures["endpoints"], serde_json::json!(["other", ENDPOINT]));

        // Another endpoint had none; "all" has the same as the only busy one.
        let other = app.admin_json("/admin/dashboard.json?window=1h&endpoint=other").await;
        assert_eq!(other["total"], 0, "{other}");
        assert_eq!(other["replay_ratio"], Value::Null);
        let all = app.admin_json("/admin/dashboard.json?window=7d").await;
        assert_eq!(all["totals"], *totals);
        assert_eq!(all["slots"].as_array().unwrap().len(), 84);

        // The page draws the same figures, in both sizes, with tooltips.
        let cookie = session(app).await;
        let (status, html) = page(app, &format!("/admin?window=1h&endpoint={ENDPOINT}"), &cookie).await;
        assert_eq!(status, 200);
        for size in ["wide", "narrow"] {
            assert_eq!(drawn(&html, size, "processed"), 2, "{size}");
            assert_eq!(drawn(&html, size, "replayed"), 1, "{size}");
            assert_eq!(drawn(&html, size, "rejected:invalid-signature"), 1, "{size}");
            assert_eq!(drawn(&html, size, "failed:processing-failed"), 1, "{size}");
            assert!(html.contains(&format!("data-size=\"{size}\" data-total=\"5\"")), "{size}");
        }
        assert!(html.contains(" · processed: "), "a bar's tooltip");
        assert!(html.contains("<strong id=\"replay-ratio\">33.3 %</strong>"), "{html}");
        assert!(html.contains("<option value=\"shop\" selected>shop</option>"), "the selector keeps the endpoint");
        assert!(html.contains("<option value=\"1h\" selected>1h</option>"));
        assert!(html.contains("<li data-series=\"processed\">"), "the legend");
        assert!(!html.contains("<script"), "no script");
    }
);

both_backends_with!(admin;
    async fn flushes_add_into_the_same_counters_and_the_purge_drops_them_after_eight_days(app) {
        let now = app.clock.now().timestamp() / 60 * 60;
        let counter = |minute: i64, count: i32| TrafficCount {
            endpoint: ENDPOINT.into(),
            minute,
            outcome: "processed".into(),
            bucket: 7,
            count,
        };
        let mut conn = app.store.conn().await.expect("a connection");
        // Two instances flushing the same minute: their counts add up.
        conn.add_traffic(&[counter(now, 2), counter(now - 9 * 86_400, 1), counter(now - 7 * 86_400, 1)])
            .await
            .unwrap();
        conn.add_traffic(&[counter(now, 3)]).await.unwrap();
        let mut rows = conn.traffic_by_minute(now - 10 * 86_400, Some(ENDPOINT)).await.unwrap();
        rows.sort();
        assert_eq!(
            rows,
            [
                (now - 9 * 86_400, "processed".to_owned(), 1),
                (now - 7 * 86_400, "processed".to_owned(), 1),
                (now, "processed".to_owned(), 5),
            ]
        );
        drop(conn);
        let options = PurgeOptions::from_settings(&app.settings.purge);
        purge(&app.store, &app.settings.retention_policy(), &options).await.unwrap();
        let mut conn = app.store.conn().await.expect("a connection");
        let mut rows = conn.traffic_by_minute(now - 10 * 86_400, None).await.unwrap();
        rows.sort();
        assert_eq!(
            rows,
            [
                (now - 7 * 86_400, "processed".to_owned(), 1),
                (now, "processed".to_owned(), 5),
            ],
            "only the 9-day-old counter went"
        );
        let figures = app.admin_json("/admin/dashboard.json?window=1h").await;
        assert_eq!(figures["totals"]["processed"], 5, "{figures}");
        assert_eq!(figures["latency"]["processed"]["p50_ms"], 1.131);
    }
);

both_backends_with!(admin;
    async fn the_dashboard_needs_a_session_or_a_token_and_known_parameters(app) {
        assert_eq!(app.admin_get("/admin/dashboard.json", None).await.status(), 401);
        problem(app.admin_get("/admin/dashboard.json?window=2h", Some(ADMIN_TOKEN)).await, 400, "invalid-parameter").await;
        problem(app.admin_get("/admin/dashboard.json?endpoint=nope", Some(ADMIN_TOKEN)).await, 400, "invalid-parameter").await;
        let (status, _) = page(app, "/admin", "").await;
        assert_eq!(status, 303, "no session: to the log-in form");
        let cookie = session(app).await;
        let (status, html) = page(app, "/admin?window=2h", &cookie).await;
        assert_eq!(status, 400);
        assert!(html.contains("id=\"query-error\""), "{html}");
        assert!(html.contains("<option value=\"shop\">shop</option>"), "the selector still offers the endpoints");
        let (status, html) = page(app, "/admin", &cookie).await;
        assert_eq!(status, 200);
        assert!(html.contains("id=\"no-traffic\""), "{html}");
        assert!(html.contains("href=\"/admin/list\""), "the listing is linked");
        // The listing moved to /admin/list, keeping its query string.
        assert_eq!(app.deliver("msg_l1", &payment("pay_l1", 1)).await.status(), 200);
        let (status, html) = page(app, &format!("/admin/list?endpoint={ENDPOINT}&limit=5"), &cookie).await;
        assert_eq!(status, 200);
        assert!(html.contains("msg_l1"), "{html}");
        assert!(html.contains("action=\"/admin/list\""), "{html}");
        let openapi = app.admin_json("/admin/openapi.json").await;
        assert!(openapi["paths"]["/admin/dashboard.json"]["get"].is_object());
    }
);

/// A queued endpoint `q` whose jobs wait: no worker runs in this process.
fn admin_queued(builder: TestAppBuilder) -> TestAppBuilder {
    admin(builder).top_level("queue_workers = 0").endpoints_toml(&format!(
        "[endpoints.q]\nprovider = \"standard-webhooks\"\nsecrets = [\"{}\"]\nhandlers = [\"record\"]\nmode = \"queued\"\nmax_attempts = 2\n",
        crate::helpers::SECRET
    ))
}

both_backends_with!(admin_queued;
    async fn a_queued_endpoints_waiting_jobs_and_their_age_are_on_the_dashboard(app) {
        for id in ["msg_q1", "msg_q2"] {
            assert_eq!(app.deliver_to("q", id, &payment(id, 5)).await.status(), 202);
        }
        app.clock.advance(std::time::Duration::from_secs(90));
        flush(app).await;
        let figures = app.admin_json("/admin/dashboard.json?endpoint=q&window=1h").await;
        assert_eq!(figures["totals"]["processed"], 2, "acknowledged once committed: {figures}");
        let queue = figures["queue"].as_array().unwrap();
        assert_eq!(queue.len(), 1, "{figures}");
        assert_eq!(queue[0]["endpoint"], "q");
        assert_eq!(queue[0]["queued"], 2);
        assert_eq!(queue[0]["dead"], 0);
        let age = queue[0]["oldest_age_seconds"].as_i64().unwrap();
        assert!((90..3600).contains(&age), "{age}");
        let retries = figures["settings"][0]["queue_retries"].as_str().unwrap();
        assert!(retries.starts_with("2 attempts within"), "{retries}");
        assert_eq!(figures["outbox"], serde_json::json!([]));
        // An inline endpoint shows no queue.
        let shop = app.admin_json(&format!("/admin/dashboard.json?endpoint={ENDPOINT}")).await;
        assert_eq!(shop["queue"], serde_json::json!([]));

        let cookie = session(app).await;
        let (status, html) = page(app, "/admin?endpoint=q&window=1h", &cookie).await;
        assert_eq!(status, 200);
        assert!(html.contains("<tr data-endpoint=\"q\"><td>q</td><td>2</td>"), "{html}");
    }
);

/// Every delivery publishes to `bus`, which no relay in this process sends.
fn admin_publishing(builder: TestAppBuilder) -> TestAppBuilder {
    admin(builder)
        .top_level("outbox_relay = false")
        .handler_name("publish:bus")
        .endpoints_toml(crate::outbox::UNREACHABLE)
}

both_backends_with!(admin_publishing;
    async fn the_outboxs_unsent_publications_and_their_age_are_on_the_dashboard(app) {
        assert_eq!(app.deliver("msg_o1", &payment("pay_o1", 5)).await.status(), 200);
        app.clock.advance(std::time::Duration::from_secs(60));
        let figures = app.admin_json("/admin/dashboard.json").await;
        let outbox = figures["outbox"].as_array().unwrap();
        assert_eq!(outbox.len(), 1, "{figures}");
        assert_eq!(outbox[0]["publisher"], "bus");
        assert_eq!(outbox[0]["pending"], 1);
        assert_eq!(outbox[0]["failed"], 0);
        let age = outbox[0]["oldest_age_seconds"].as_i64().unwrap();
        assert!((60..3600).contains(&age), "{age}");
        let cookie = session(app).await;
        let (status, html) = page(app, "/admin", &cookie).await;
        assert_eq!(status, 200);
        assert!(html.contains("<tr data-publisher=\"bus\"><td>bus</td><td>1</td><td>0</td>"), "{html}");
    }
);
