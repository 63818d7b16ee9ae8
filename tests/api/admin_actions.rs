//! The operator's actions of issue #16 on both backends: a delivery
//! reprocessed from the admin API, recorded in its history with the name of
//! the token that asked (`admin:<name>`), or with a plain token's
//! fingerprint; the key page's Reprocess form refuses a cross-site post;
//! and the long commands (`purge`, `queue retry --all`, `reprocess` by
//! filter) print a plain line per step when stderr is not a terminal.

use crate::admin_cli::stdout;
use crate::admin_queue::{dead_jobs, queued};
use crate::both_backends_with;
use crate::helpers::{ADMIN_TOKEN, ENDPOINT, SECRET, TestApp, TestAppBuilder};
use chrono::TimeDelta;
use serde_json::Value;
use std::process::{Command, Output};

/// A named token, and the plain test token (recorded by its fingerprint).
pub const OPS_TOKEN: &str = "tok_ops_0123456789abcdef";
/// `ADMIN_TOKEN`'s fingerprint (see admin_queue.rs for how it is computed).
const PLAIN_ACTOR: &str = "admin:e1e69900";

/// Admin on with a mixed list: `ops` by name, and a plain token.
pub fn named(builder: TestAppBuilder) -> TestAppBuilder {
    builder.top_level(&format!(
        "admin_tokens = [{{name = \"ops\", token = \"{OPS_TOKEN}\"}}, \"{ADMIN_TOKEN}\"]"
    ))
}

async fn post(app: &TestApp, path: &str, token: &str) -> (u16, Value) {
    let response = app
        .client
        .post(format!("{}{path}", app.admin_address))
        .bearer_auth(token)
        .send()
        .await
        .expect("the receiver answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A delivery that is not a payment: running it again must not double a
/// ledger entry (which every test app's shutdown checks).
pub fn note(text: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"type": "note", "data": {"text": text}})).unwrap()
}

/// The key's history as (kind, actor) pairs, oldest first.
pub async fn history(app: &TestApp, endpoint: &str, id: &str) -> Vec<(String, String)> {
    let mut conn = app.store.conn().await.unwrap();
    conn.history(endpoint, id)
        .await
        .unwrap()
        .into_iter()
        .map(|h| (h.kind, h.actor.unwrap_or_default()))
        .collect()
}

/// The stored answer's `attempt`: which run of the handlers wrote it.
async fn stored_attempt(app: &TestApp, id: &str) -> i64 {
    let row = app.delivery(id).await.expect("the key is stored");
    let body: Value = serde_json::from_slice(row.response_body.as_deref().unwrap()).unwrap();
    body["attempt"].as_i64().unwrap()
}

both_backends_with! { named;
    async fn the_api_reprocesses_a_delivery_as_the_named_token(app) {
        let body = note("pay_r1");
        assert_eq!(app.deliver("msg_r1", &body).await.status(), 200);
        assert_eq!(stored_attempt(app, "msg_r1").await, 1);

        let (status, done) = post(app, "/admin/deliveries/shop/msg_r1/reprocess", OPS_TOKEN).await;
        assert_eq!(status, 200, "{done}");
        assert_eq!(done["status"], 200);
        assert_eq!(done["actor"], "admin:ops");
        assert_eq!(done["delivery_id"], "msg_r1");
        // The handlers ran again and their answer replaced the stored one,
        // which redeliveries now replay.
        assert_eq!(stored_attempt(app, "msg_r1").await, 2);
        assert_eq!(app.delivery("msg_r1").await.unwrap().attempts, 2);
        let replay = app.deliver("msg_r1", &body).await;
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        let replayed: Value = replay.json().await.unwrap();
        assert_eq!(replayed["attempt"], 2);
        assert_eq!(history(app, ENDPOINT, "msg_r1").await, [("reprocessed".to_owned(), "admin:ops".to_owned())]);

        // A plain token is still recorded by its fingerprint.
        let (status, done) = post(app, "/admin/deliveries/shop/msg_r1/reprocess", ADMIN_TOKEN).await;
        assert_eq!(status, 200, "{done}");
        assert_eq!(done["actor"], PLAIN_ACTOR);
        let kinds = history(app, ENDPOINT, "msg_r1").await;
        assert_eq!(kinds.len(), 2);
        assert_eq!(kinds[1], ("reprocessed".to_owned(), PLAIN_ACTOR.to_owned()));
        let view = app.admin_get("/admin/deliveries/shop/msg_r1", Some(OPS_TOKEN)).await;
        let view: Value = view.json().await.unwrap();
        assert_eq!(view["history"][0]["actor"], "admin:ops");

        // Refusals: no token, no such key, no such endpoint; nothing recorded.
        let refused = app.client.post(format!("{}/admin/deliveries/shop/msg_r1/reprocess", app.admin_address)).send().await.unwrap();
        assert_eq!(refused.status(), 401);
        let (status, problem) = post(app, "/admin/deliveries/shop/msg_none/reprocess", OPS_TOKEN).await;
        assert_eq!((status, problem["type"].as_str().unwrap_or_default().ends_with("unknown-delivery")), (404, true), "{problem}");
        let (status, problem) = post(app, "/admin/deliveries/nowhere/msg_r1/reprocess", OPS_TOKEN).await;
        assert_eq!(status, 404, "{problem}");
        assert_eq!(history(app, ENDPOINT, "msg_r1").await.len(), 2);

        // The route is in the OpenAPI document.
        let document = app.admin_get("/admin/openapi.json", Some(OPS_TOKEN)).await;
        let document: Value = document.json().await.unwrap();
        assert!(document["paths"]["/admin/deliveries/{endpoint}/{delivery_id}/reprocess"]["post"].is_object());
    }
}

both_backends_with! { named;
    async fn the_key_pages_reprocess_form_refuses_a_cross_site_post_and_records_a_same_origin_one(app) {
        assert_eq!(app.deliver("msg_f1", &note("pay_f1")).await.status(), 200);
        // Logged in as `ops`: the session cookie remembers which token.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let login = client
            .post(format!("{}/admin/login", app.admin_address))
            .form(&[("token", OPS_TOKEN)])
            .send()
            .await
            .unwrap();
        assert_eq!(login.status(), 303);
        let cookie = login.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
        let form = [("endpoint", ENDPOINT), ("delivery_id", "msg_f1")];
        let reprocess = |headers: &[(&'static str, &str)]| {
            let mut request = client.post(format!("{}/admin/reprocess", app.admin_address)).form(&form);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            request.send()
        };
        let forged = reprocess(&[("cookie", &cookie), ("sec-fetch-site", "cross-site"), ("origin", "http://evil.example")])
            .await
            .unwrap();
        assert_eq!(forged.status(), 403);
        assert!(history(app, ENDPOINT, "msg_f1").await.is_empty());
        assert_eq!(app.delivery("msg_f1").await.unwrap().attempts, 1);

        let done = reprocess(&[("cookie", &cookie), ("sec-fetch-site", "same-origin")]).await.unwrap();
        assert_eq!(done.status(), 303);
        assert_eq!(done.headers()["location"], "/admin/view/shop/msg_f1?reprocessed=200");
        assert_eq!(history(app, ENDPOINT, "msg_f1").await, [("reprocessed".to_owned(), "admin:ops".to_owned())]);
        let page = client
            .get(format!("{}/admin/view/shop/msg_f1?reprocessed=200", app.admin_address))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(page.contains("Reprocessed: the handlers answered 200"), "{page}");
        assert!(page.contains("admin:ops"), "{page}");

        // Without a session: 401, nothing done.
        let anonymous = reprocess(&[]).await.unwrap();
        assert_eq!(anonymous.status(), 401);
        assert_eq!(history(app, ENDPOINT, "msg_f1").await.len(), 1);
    }
}

/// Runs the binary over `app`'s database with a configuration of the test
/// endpoint (its handlers are built in), batches of 2 for the purge.
fn run_configured(app: &TestApp, dir: &std::path::Path, args: &[&str]) -> Output {
    let config = dir.join("receiver.toml");
    std::fs::write(
        &config,
        format!(
            "purge_batch = 2\npurge_pause = \"1ms\"\n[endpoints.{ENDPOINT}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\", \"payments\"]\n"
        ),
    )
    .expect("the configuration is written");
    Command::new(env!("CARGO_BIN_EXE_idempotent-receiver"))
        .arg("--config")
        .arg(&config)
        .args(args)
        .current_dir(dir)
        .env("DATABASE_URL", &app.database_url)
        .env("IR_DATA_DIR", dir)
        .env_remove("IR_CONFIG")
        .env_remove("IR_ADMIN_TOKENS")
        .output()
        .expect("the binary runs")
}

/// The lines of stderr that start with `label: `, the progress lines.
fn progress_lines(output: &Output, label: &str) -> Vec<String> {
    let prefix = format!("{label}: ");
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|line| line.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

both_backends_with! { named;
    async fn reprocess_by_filter_counts_first_then_prints_a_line_per_delivery(app) {
        for i in 0..3 {
            assert_eq!(app.deliver(&format!("msg_b{i}"), &note(&format!("b{i}"))).await.status(), 200);
        }
        assert_eq!(app.deliver("msg_old", &note("pay_old")).await.status(), 200);
        app.age_delivery("msg_old", TimeDelta::hours(48)).await;
        assert_eq!(app.deliver_to("other", "msg_o1", &note("pay_o1")).await.status(), 200);
        let dir = tempfile::tempdir().expect("a temporary folder");

        let dry = run_configured(app, dir.path(), &["reprocess", "--endpoint", ENDPOINT, "--since", "24h", "--dry-run"]);
        assert_eq!(stdout(&dry).trim(), "3 delivery(ies) would be reprocessed");
        assert!(history(app, ENDPOINT, "msg_b0").await.is_empty(), "a dry run changes nothing");

        let run = run_configured(app, dir.path(), &["reprocess", "--endpoint", ENDPOINT, "--since", "24h", "--actor", "ops-carol"]);
        assert_eq!(stdout(&run).trim(), "reprocessed 3 of 3 matching delivery(ies)");
        let lines = progress_lines(&run, "reprocess");
        assert_eq!(lines.len(), 3, "{lines:?}");
        // Newest first, counted out of the total.
        assert_eq!(lines[0], "reprocess: 1/3 msg_b2: answered 200");
        assert_eq!(lines[2], "reprocess: 3/3 msg_b0: answered 200");
        for id in ["msg_b0", "msg_b1", "msg_b2"] {
            assert_eq!(history(app, ENDPOINT, id).await, [("reprocessed".to_owned(), "ops-carol".to_owned())], "{id}");
            assert_eq!(stored_attempt(app, id).await, 2, "{id}");
        }
        assert!(history(app, ENDPOINT, "msg_old").await.is_empty(), "outside the window");
        assert!(history(app, "other", "msg_o1").await.is_empty(), "another endpoint");

        let single = run_configured(app, dir.path(), &["reprocess", "--endpoint", ENDPOINT, "--delivery", "msg_old", "--actor", "ops-carol"]);
        assert!(stdout(&single).starts_with("HTTP 200"));
        assert!(progress_lines(&single, "reprocess").is_empty());
    }
}

both_backends_with! { named;
    async fn purge_prints_the_rows_deleted_so_far_after_each_batch(app) {
        for i in 0..3 {
            let id = format!("msg_p{i}");
            assert_eq!(app.deliver(&id, &note(&format!("p{i}"))).await.status(), 200);
            app.age_delivery(&id, TimeDelta::hours(48)).await;
        }
        let dir = tempfile::tempdir().expect("a temporary folder");
        let output = run_configured(app, dir.path(), &["purge", "--older-than", "24h"]);
        let report = stdout(&output);
        assert!(report.contains("3"), "{report}");
        assert_eq!(
            progress_lines(&output, "purge"),
            ["purge: batch 1: 2 row(s) deleted so far", "purge: batch 2: 3 row(s) deleted so far"]
        );
        assert!(app.delivery("msg_p0").await.is_none());
    }
}

both_backends_with! { queued;
    async fn a_bulk_retry_prints_a_line_per_retried_job(app) {
        dead_jobs(app, "q", &["msg_k1", "msg_k2"]).await;
        let dir = tempfile::tempdir().expect("a temporary folder");
        let output = crate::admin_cli::run(app, dir.path(), &["queue", "retry", "--all", "--endpoint", "q", "--actor", "ops-dan"]);
        assert_eq!(stdout(&output).trim(), "retried 2 of 2 matching job(s)");
        assert_eq!(
            progress_lines(&output, "retry"),
            ["retry: 1/2 job(s) retried", "retry: 2/2 job(s) retried"]
        );
        for id in ["msg_k1", "msg_k2"] {
            // Recorded at the command's own clock, not the test's advanced one.
            let recorded = history(app, "q", id).await;
            assert!(recorded.contains(&("retried".to_owned(), "ops-dan".to_owned())), "{recorded:?}");
        }
    }
}
