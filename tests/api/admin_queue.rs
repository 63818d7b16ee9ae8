//! The operator's queue surface (issue #13, item 4) on both backends: the
//! admin API lists jobs with their errors, retries one or a filter's worth
//! (after a dry-run count), cancels, pauses and resumes; every job action
//! is in the delivery's history with the actor; the page's forms refuse
//! cross-site posts; and the `queue` command does the same from a shell.

use crate::admin_cli::{run, stdout};
use crate::both_backends_with;
use crate::helpers::{ADMIN_TOKEN, SECRET, TestApp, TestAppBuilder, payment};
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::maintenance::run_due;
use idempotent_receiver::store::DbConn;
use serde_json::Value;
use std::time::Duration;

/// The first eight hex digits of HMAC-SHA256(key = "idempotent-receiver
/// admin actor", ADMIN_TOKEN), from a second implementation:
/// python3 -c "import hmac,hashlib;print(hmac.new(b'idempotent-receiver admin actor',b'tok_admin_0123456789abcdef',hashlib.sha256).hexdigest()[:8])"
const ACTOR: &str = "admin:e1e69900";

/// Fails whenever `fail` is set in the payload's `data`.
struct FailMarked;

#[async_trait::async_trait(?Send)]
impl Handler for FailMarked {
    async fn handle(&self, event: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        if event.payload.pointer("/data/fail").is_some() {
            return Err(HandlerError::Failed("the ledger service is down".into()));
        }
        Ok(None)
    }
}

/// Admin on; a queued endpoint `q` driven by hand, 2 attempts at most; a
/// second queued endpoint `r`.
pub fn queued(builder: TestAppBuilder) -> TestAppBuilder {
    let endpoint = |name: &str| {
        format!(
            "[endpoints.{name}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\", \"fail-marked\"]\nmode = \"queued\"\nmax_attempts = 2\nretry_backoff = \"10s\"\nretry_backoff_max = \"1m\"\n"
        )
    };
    builder
        .admin()
        .handler("fail-marked", FailMarked)
        .top_level("queue_workers = 0\n")
        .endpoints_toml(&format!("{}{}", endpoint("q"), endpoint("r")))
}

fn failing(id: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "type": "payment.succeeded",
        "data": {"payment_id": id, "amount": 100, "fail": true}
    }))
    .unwrap()
}

/// Delivers `ids` to `endpoint` and runs the queue until each is dead.
pub async fn dead_jobs(app: &TestApp, endpoint: &str, ids: &[&str]) {
    for id in ids {
        let answer = app.deliver_to(endpoint, id, &failing(id)).await;
        assert_eq!(answer.status(), 202);
    }
    for _ in 0..2 {
        run_due(&app.webhooks, 100).await.unwrap();
        app.clock.advance(Duration::from_secs(60));
    }
}

pub async fn admin_post(app: &TestApp, path: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = app.client.post(format!("{}{path}", app.admin_address));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("the receiver answers")
}

pub async fn post_json(app: &TestApp, path: &str) -> Value {
    let response = admin_post(app, path, Some(ADMIN_TOKEN)).await;
    let status = response.status();
    let text = response.text().await.unwrap();
    assert_eq!(status, 200, "POST {path}: {text}");
    serde_json::from_str(&text).unwrap()
}

fn history(view: &Value) -> Vec<(String, String)> {
    view["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["kind"].as_str().unwrap_or_default().to_owned(),
                h["actor"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

both_backends_with! { queued;
    async fn a_dead_job_is_listed_with_its_error_and_an_operator_retries_it(app) {
        dead_jobs(app, "q", &["msg_d1"]).await;
        assert_eq!(app.deliver_to("q", "msg_ok", &payment("pay_ok", 5)).await.status(), 202);

        let listing = app.admin_json("/admin/queue?state=dead").await;
        let jobs = listing["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 1, "{listing}");
        assert_eq!(jobs[0]["delivery_id"], "msg_d1");
        assert_eq!(jobs[0]["attempts"], 2);
        assert!(jobs[0]["last_error"].as_str().unwrap().contains("ledger service is down"));
        assert!(jobs[0]["next_run_at"].is_string());
        // Unfinished by default: the dead one and the one still queued.
        let all = app.admin_json("/admin/queue?endpoint=q").await;
        assert_eq!(all["jobs"].as_array().unwrap().len(), 2, "{all}");

        let job = post_json(app, "/admin/queue/q/msg_d1/retry").await;
        assert_eq!((job["state"].as_str(), job["attempts"].as_i64()), (Some("queued"), Some(0)));
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().ran(), 2);
        let view = app.admin_json("/admin/deliveries/q/msg_d1").await;
        assert!(history(&view).contains(&("retried".into(), ACTOR.into())), "{view}");

        // Running or done jobs cannot be retried; unknown ones are 404.
        let done = admin_post(app, "/admin/queue/q/msg_ok/retry", Some(ADMIN_TOKEN)).await;
        assert_eq!(done.status(), 409);
        let unknown = admin_post(app, "/admin/queue/q/msg_nope/retry", Some(ADMIN_TOKEN)).await;
        assert_eq!(unknown.status(), 404);
    }
}

both_backends_with! { queued;
    async fn a_bulk_retry_counts_first_then_retries_what_the_filter_selects(app) {
        dead_jobs(app, "q", &["msg_b1", "msg_b2"]).await;
        dead_jobs(app, "r", &["msg_b3"]).await;

        let dry = post_json(app, "/admin/queue/retry?endpoint=q&dry_run=true").await;
        assert_eq!((dry["matched"].as_u64(), dry["retried"].as_u64()), (Some(2), Some(0)));
        assert_eq!(app.admin_json("/admin/queue?state=dead").await["jobs"].as_array().unwrap().len(), 3);

        let real = post_json(app, "/admin/queue/retry?endpoint=q").await;
        assert_eq!((real["matched"].as_u64(), real["retried"].as_u64()), (Some(2), Some(2)));
        let dead = app.admin_json("/admin/queue?state=dead").await;
        let ids: Vec<&str> = dead["jobs"].as_array().unwrap().iter().map(|j| j["delivery_id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["msg_b3"]);
        for id in ["msg_b1", "msg_b2"] {
            let view = app.admin_json(&format!("/admin/deliveries/q/{id}")).await;
            assert!(history(&view).contains(&("retried".into(), ACTOR.into())), "{view}");
        }
        let again = post_json(app, "/admin/queue/retry?endpoint=q&dry_run=true").await;
        assert_eq!(again["matched"], 0);
        let bad = admin_post(app, "/admin/queue/retry?state=running", Some(ADMIN_TOKEN)).await;
        assert_eq!(bad.status(), 400);
    }
}

both_backends_with! { queued;
    async fn a_cancelled_job_never_runs_and_its_history_names_the_actor(app) {
        assert_eq!(app.deliver_to("q", "msg_c1", &payment("pay_c1", 5)).await.status(), 202);
        let job = post_json(app, "/admin/queue/q/msg_c1/cancel").await;
        assert_eq!(job["state"], "cancelled");
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().ran(), 0);
        assert_eq!(app.count("events").await, 0);
        let again = admin_post(app, "/admin/queue/q/msg_c1/cancel", Some(ADMIN_TOKEN)).await;
        assert_eq!(again.status(), 409);
        let view = app.admin_json("/admin/deliveries/q/msg_c1").await;
        assert!(history(&view).contains(&("cancelled".into(), ACTOR.into())), "{view}");
    }
}

both_backends_with! { queued;
    async fn a_paused_endpoint_acknowledges_and_queues_and_runs_once_resumed(app) {
        let paused = post_json(app, "/admin/queue/q/pause").await;
        assert_eq!((paused["paused"].as_bool(), paused["changed"].as_bool()), (Some(true), Some(true)));
        assert_eq!(app.deliver_to("q", "msg_p1", &payment("pay_p1", 5)).await.status(), 202);
        assert_eq!(app.deliver_to("r", "msg_p2", &payment("pay_p2", 5)).await.status(), 202);
        // Only the other endpoint's job runs.
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().ran(), 1);
        let listing = app.admin_json("/admin/queue").await;
        assert_eq!(listing["paused"][0]["endpoint"], "q");
        assert_eq!(listing["paused"][0]["actor"], ACTOR);
        assert_eq!(listing["jobs"][0]["delivery_id"], "msg_p1");
        assert_eq!(listing["jobs"][0]["state"], "queued");

        let resumed = post_json(app, "/admin/queue/q/resume").await;
        assert_eq!((resumed["paused"].as_bool(), resumed["changed"].as_bool()), (Some(false), Some(true)));
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().done, 1);
        assert_eq!(app.admin_json("/admin/queue").await["paused"], serde_json::json!([]));
    }
}

both_backends_with! { queued;
    async fn the_queue_routes_need_a_token_and_the_pages_forms_refuse_cross_site_posts(app) {
        dead_jobs(app, "q", &["msg_s1"]).await;
        for path in ["/admin/queue/q/msg_s1/retry", "/admin/queue/q/msg_s1/cancel", "/admin/queue/retry", "/admin/queue/q/pause"] {
            assert_eq!(admin_post(app, path, None).await.status(), 401, "{path}");
            assert_eq!(admin_post(app, path, Some("tok_wrong_0123456789ab")).await.status(), 401, "{path}");
        }
        assert_eq!(app.admin_get("/admin/queue", None).await.status(), 401);

        // The page shows the dead job, its error and its forms.
        let page = app.admin_get("/admin/jobs?state=dead", Some(ADMIN_TOKEN)).await;
        assert_eq!(page.status(), 200);
        let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
        assert!(csp.starts_with("default-src 'none'"), "{csp}");
        let html = page.text().await.unwrap();
        assert!(html.contains("ledger service is down"), "{html}");
        assert!(html.contains(r#"action="/admin/jobs/retry""#), "{html}");
        assert!(!html.contains("<script"));

        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let form = |origin: &str| {
            client
                .post(format!("{}/admin/jobs/retry", app.admin_address))
                .bearer_auth(ADMIN_TOKEN)
                .header("origin", origin.to_owned())
                .header("content-type", "application/x-www-form-urlencoded")
                .body("endpoint=q&delivery_id=msg_s1")
                .send()
        };
        let forged = form("http://evil.example").await.unwrap();
        assert_eq!(forged.status(), 403);
        assert_eq!(app.admin_json("/admin/queue?state=dead").await["jobs"].as_array().unwrap().len(), 1);
        // Without a session or token: 401, nothing done.
        let anonymous = client
            .post(format!("{}/admin/jobs/pause", app.admin_address))
            .body("endpoint=q")
            .send()
            .await
            .unwrap();
        assert_eq!(anonymous.status(), 401);
        assert_eq!(app.admin_json("/admin/queue").await["paused"], serde_json::json!([]));

        let own = form(&app.admin_address).await.unwrap();
        assert_eq!(own.status(), 303);
        assert_eq!(own.headers()["location"], "/admin/jobs");
        let job = &app.admin_json("/admin/queue?endpoint=q").await["jobs"][0];
        assert_eq!((job["delivery_id"].as_str(), job["state"].as_str()), (Some("msg_s1"), Some("queued")));
        let view = app.admin_json("/admin/deliveries/q/msg_s1").await;
        assert!(history(&view).contains(&("retried".into(), ACTOR.into())), "{view}");
    }
}

both_backends_with! { queued;
    async fn the_queue_command_lists_retries_cancels_pauses_and_resumes(app) {
        dead_jobs(app, "q", &["msg_k1", "msg_k2"]).await;
        assert_eq!(app.deliver_to("q", "msg_k3", &payment("pay_k3", 5)).await.status(), 202);
        let dir = tempfile::tempdir().unwrap();

        let listing: Value = serde_json::from_str(&stdout(&run(app, dir.path(), &["queue", "list", "--state", "dead", "--json"]))).unwrap();
        assert_eq!(listing["jobs"].as_array().unwrap().len(), 2, "{listing}");
        assert!(listing["jobs"][0]["last_error"].as_str().unwrap().contains("ledger service"));
        let table = stdout(&run(app, dir.path(), &["queue", "list", "--endpoint", "q"]));
        assert!(table.starts_with("ENDPOINT"), "{table}");
        assert_eq!(table.lines().count(), 4, "{table}");

        let one = stdout(&run(app, dir.path(), &["queue", "retry", "--endpoint", "q", "--delivery", "msg_k1", "--actor", "ops-alice"]));
        assert!(one.contains("queued"), "{one}");
        let dry = stdout(&run(app, dir.path(), &["queue", "retry", "--all", "--endpoint", "q", "--dry-run"]));
        assert_eq!(dry.trim(), "1 job(s) would be retried");
        let cancelled = stdout(&run(app, dir.path(), &["queue", "cancel", "--endpoint", "q", "--delivery", "msg_k2", "--actor", "ops-bob"]));
        assert!(cancelled.contains("cancelled"), "{cancelled}");
        let refused = run(app, dir.path(), &["queue", "cancel", "--endpoint", "q", "--delivery", "msg_k2"]);
        assert!(!refused.status.success());

        stdout(&run(app, dir.path(), &["queue", "pause", "--endpoint", "q", "--actor", "ops-alice"]));
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().ran(), 0);
        let paused: Value = serde_json::from_str(&stdout(&run(app, dir.path(), &["queue", "list", "--json"]))).unwrap();
        assert_eq!(paused["paused"][0]["actor"], "ops-alice");
        stdout(&run(app, dir.path(), &["queue", "resume", "--endpoint", "q"]));
        // msg_k1 (retried) and msg_k3; the retried one fails again.
        assert_eq!(run_due(&app.webhooks, 100).await.unwrap().ran(), 2);

        let mut conn = app.store.conn().await.unwrap();
        let entries = conn.history("q", "msg_k1").await.unwrap();
        assert!(entries.iter().any(|h| h.kind == "retried" && h.actor.as_deref() == Some("ops-alice")));
        let entries = conn.history("q", "msg_k2").await.unwrap();
        assert!(entries.iter().any(|h| h.kind == "cancelled" && h.actor.as_deref() == Some("ops-bob")));
    }
}
