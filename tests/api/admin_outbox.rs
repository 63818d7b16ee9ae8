//! The operator's outbox surface (issue #14, item 6) on both backends: the
//! admin API lists unsent and failed publications with each publisher's
//! backlog and retries failed ones; a republish writes a new row per
//! publisher with a numbered message id and the same envelope, recorded in
//! the delivery's history with the actor; the page's forms refuse
//! cross-site posts; the purge deletes sent rows past the retention and
//! never unsent ones; and the `outbox` command does the same from a shell.
//!
//! Both publishers point at a closed port, so nothing is ever sent: `bus`
//! gives up after one attempt (`failed`), `audit` retries in an hour
//! (`pending`).

use crate::admin_cli::stdout;
use crate::admin_queue::{admin_post, post_json};
use crate::both_backends_with;
use crate::helpers::{ADMIN_TOKEN, SECRET, TestApp, TestAppBuilder, payment, problem};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use idempotent_receiver::maintenance::{self, PurgeOptions};
use idempotent_receiver::store::outbox::{PublicationFilter, PublicationRow};
use idempotent_receiver::with_conn;
use serde_json::Value;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// HMAC-SHA256 of ADMIN_TOKEN under the actor context (see admin_queue.rs).
const ACTOR: &str = "admin:e1e69900";

const PUBLISHERS: &str = "[publishers.bus]\nkind = \"nats\"\nurl = \"nats://127.0.0.1:1\"\nsubject = \"webhooks.{endpoint}\"\nmax_attempts = 1\n[publishers.audit]\nkind = \"nats\"\nurl = \"nats://127.0.0.1:1\"\nsubject = \"audit.{endpoint}\"\nretry_backoff = \"1h\"\nretry_backoff_max = \"1h\"\n";

/// Admin on; `shop` and `other` publish to `bus` and `audit`; `quiet`
/// publishes to nothing.
fn publishing(builder: TestAppBuilder) -> TestAppBuilder {
    builder
        .admin()
        .top_level("retention = \"1h\"\npurge_interval = \"0\"")
        .handler_name("publish:bus")
        .handler_name("publish:audit")
        .endpoints_toml(&format!(
            "[endpoints.quiet]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\"]\n{PUBLISHERS}"
        ))
}

/// Every publication, oldest first.
async fn rows(app: &TestApp) -> Vec<PublicationRow> {
    let filter = PublicationFilter {
        states: Some(vec!["pending".into(), "failed".into(), "sent".into()]),
        ..PublicationFilter::default()
    };
    let mut rows = app
        .store
        .conn()
        .await
        .unwrap()
        .publications(&filter, 1000)
        .await
        .unwrap();
    rows.reverse();
    rows
}

/// Waits until the app's relay has tried every due row and marked it (it
/// runs in the background, woken by each commit).
async fn settle(app: &TestApp) -> Vec<PublicationRow> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let rows = rows(app).await;
        // A row still pending and due is not tried yet, or held by the
        // relay between its take and its mark.
        let now = app.store.clock().naive_now();
        if rows
            .iter()
            .all(|r| r.state != "pending" || r.next_attempt_at > now)
        {
            return rows;
        }
        assert!(Instant::now() < deadline, "the relay did not try: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn deliver(app: &TestApp, endpoint: &str, id: &str) {
    let answer = app
        .deliver_to(endpoint, id, &payment(&format!("pay_{id}"), 100))
        .await;
    assert_eq!(answer.status(), 200);
}

/// The envelope stored for `message_id`.
async fn body_of(app: &TestApp, message_id: &str) -> Value {
    use idempotent_receiver::store::schema::outbox;
    let mut conn = app.store.conn().await.unwrap();
    let id = message_id.to_owned();
    let body: Vec<u8> = with_conn!(&mut conn, |c| {
        outbox::table
            .filter(outbox::message_id.eq(&id))
            .select(outbox::body)
            .first(c)
            .await
    })
    .unwrap();
    serde_json::from_slice(&body).unwrap()
}

/// The `republished` entries of a delivery's history: (actor, detail).
async fn republished(app: &TestApp, endpoint: &str, id: &str) -> Vec<(String, String)> {
    let mut conn = app.store.conn().await.unwrap();
    conn.history(endpoint, id)
        .await
        .unwrap()
        .into_iter()
        .filter(|h| h.kind == "republished")
        .map(|h| (h.actor.unwrap_or_default(), h.detail.unwrap_or_default()))
        .collect()
}

fn ids(listing: &Value) -> Vec<(String, String, String)> {
    listing["publications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let text = |k: &str| p[k].as_str().unwrap_or_default().to_owned();
            (text("publisher"), text("message_id"), text("state"))
        })
        .collect()
}

both_backends_with! { publishing;
    async fn unsent_and_failed_publications_are_listed_per_publisher_and_failed_ones_retried(app) {
        deliver(app, "shop", "msg_o1").await;
        deliver(app, "shop", "msg_o2").await;
        settle(app).await;

        let listing = app.admin_json("/admin/outbox").await;
        let mut all = ids(&listing);
        all.sort();
        assert_eq!(all, [
            ("audit".into(), "shop:msg_o1".into(), "pending".into()),
            ("audit".into(), "shop:msg_o2".into(), "pending".into()),
            ("bus".into(), "shop:msg_o1".into(), "failed".into()),
            ("bus".into(), "shop:msg_o2".into(), "failed".into()),
        ], "{listing}");
        let backlog = &listing["backlog"];
        assert_eq!((backlog[0]["publisher"].as_str(), backlog[0]["pending"].as_i64(), backlog[0]["failed"].as_i64()), (Some("audit"), Some(2), Some(0)), "{listing}");
        assert_eq!((backlog[1]["publisher"].as_str(), backlog[1]["pending"].as_i64(), backlog[1]["failed"].as_i64()), (Some("bus"), Some(0), Some(2)), "{listing}");
        let failed = app.admin_json("/admin/outbox?publisher=bus&state=failed").await;
        assert_eq!(failed["publications"].as_array().unwrap().len(), 2);
        assert!(!failed["publications"][0]["last_error"].as_str().unwrap().is_empty(), "{failed}");
        assert!(failed["publications"][0]["destination"].as_str().unwrap().ends_with("shop"), "{failed}");
        let sent = app.admin_json("/admin/outbox?state=sent").await;
        assert_eq!(sent["publications"], serde_json::json!([]));
        problem(app.admin_get("/admin/outbox?state=lost", Some(ADMIN_TOKEN)).await, 400, "invalid-parameter").await;

        // A retry makes the one failed row due now; the relay tries it again
        // (under the advanced clock) and the other row is left alone.
        let before = rows(app).await;
        app.clock.advance(Duration::from_secs(600));
        let retried = post_json(app, "/admin/outbox/retry?publisher=bus&delivery_id=msg_o1").await;
        assert_eq!(retried["retried"], 1);
        let deadline = Instant::now() + Duration::from_secs(15);
        let after = loop {
            let after = rows(app).await;
            let o1 = after.iter().find(|r| r.publisher == "bus" && r.delivery_id == "msg_o1").unwrap();
            if o1.state == "failed" && o1.attempts == 1 && o1.next_attempt_at >= app.store.clock().naive_now() {
                break after;
            }
            assert!(Instant::now() < deadline, "not tried again: {after:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let o2 = |rows: &[PublicationRow]| rows.iter().find(|r| r.publisher == "bus" && r.delivery_id == "msg_o2").unwrap().clone();
        assert_eq!(o2(&before), o2(&after));
        // Nothing failed any more for that delivery: nothing to retry.
        let none = post_json(app, "/admin/outbox/retry?publisher=audit").await;
        assert_eq!(none["retried"], 0);
    }
}

both_backends_with! { publishing;
    async fn a_republish_writes_a_numbered_row_per_publisher_with_the_same_envelope_and_records_it(app) {
        deliver(app, "shop", "msg_r1").await;
        deliver(app, "quiet", "msg_q1").await;
        settle(app).await;

        let dry = post_json(app, "/admin/deliveries/shop/msg_r1/republish?dry_run=true").await;
        assert_eq!(dry["dry_run"], true);
        let mut planned: Vec<&str> = dry["republished"].as_array().unwrap().iter().map(|r| r["message_id"].as_str().unwrap()).collect();
        planned.sort();
        assert_eq!(planned, ["shop:msg_r1#republish-1", "shop:msg_r1#republish-1"]);
        assert_eq!(app.count("outbox").await, 2);
        assert!(republished(app, "shop", "msg_r1").await.is_empty());

        let report = post_json(app, "/admin/deliveries/shop/msg_r1/republish").await;
        assert_eq!((report["matched"].as_u64(), report["republished"].as_array().unwrap().len()), (Some(1), 2), "{report}");
        assert_eq!(app.count("outbox").await, 4);
        // The envelope is rebuilt from the stored delivery: the same
        // CloudEvents id, type, source and data; only the broker's message
        // id differs. (`time` is the row's `received_at`, which the claim
        // stamps a moment after the request's own receipt time that the
        // first envelope carries.)
        let without_time = |mut body: Value| {
            body.as_object_mut().unwrap().remove("time").expect("a time");
            body
        };
        let original = without_time(body_of(app, "shop:msg_r1").await);
        assert_eq!(original["id"], "shop:msg_r1");
        assert_eq!(without_time(body_of(app, "shop:msg_r1#republish-1").await), original);
        let history = republished(app, "shop", "msg_r1").await;
        assert_eq!(history.len(), 2, "{history:?}");
        assert!(history.iter().all(|(actor, detail)| actor == ACTOR && detail.contains("shop:msg_r1#republish-1")), "{history:?}");
        assert!(history.iter().any(|(_, detail)| detail.contains("publisher bus")), "{history:?}");

        // Again, to one publisher: the next number.
        let again = post_json(app, "/admin/deliveries/shop/msg_r1/republish?publisher=bus").await;
        assert_eq!(again["republished"][0]["message_id"], "shop:msg_r1#republish-2");
        assert_eq!(again["republished"].as_array().unwrap().len(), 1);
        let rows = settle(app).await;
        assert_eq!(rows.len(), 5);
        assert_eq!(rows.iter().filter(|r| r.publisher == "bus" && r.state == "failed").count(), 3);

        // The delivery's detail shows its publications.
        let view = app.admin_json("/admin/deliveries/shop/msg_r1").await;
        let shown: Vec<&str> = view["publications"].as_array().unwrap().iter().map(|p| p["message_id"].as_str().unwrap()).collect();
        assert_eq!(shown.len(), 5, "{view}");
        assert_eq!(shown[0], "shop:msg_r1");

        problem(admin_post(app, "/admin/deliveries/shop/msg_r1/republish?publisher=nope", Some(ADMIN_TOKEN)).await, 400, "invalid-parameter").await;
        problem(admin_post(app, "/admin/deliveries/shop/msg_nope/republish", Some(ADMIN_TOKEN)).await, 404, "unknown-delivery").await;
        problem(admin_post(app, "/admin/deliveries/gone/msg_r1/republish", Some(ADMIN_TOKEN)).await, 404, "unknown-endpoint").await;
        let quiet = problem(admin_post(app, "/admin/deliveries/quiet/msg_q1/republish", Some(ADMIN_TOKEN)).await, 409, "not-republishable").await;
        assert!(quiet["detail"].as_str().unwrap().contains("publishes to nothing"), "{quiet}");
        assert_eq!(app.count("outbox").await, 5);
    }
}

both_backends_with! { publishing;
    async fn the_outbox_routes_need_a_token_and_the_pages_forms_refuse_cross_site_posts(app) {
        deliver(app, "shop", "msg_s1").await;
        settle(app).await;
        for path in ["/admin/outbox/retry", "/admin/deliveries/shop/msg_s1/republish"] {
            assert_eq!(admin_post(app, path, None).await.status(), 401, "{path}");
            assert_eq!(admin_post(app, path, Some("tok_wrong_0123456789ab")).await.status(), 401, "{path}");
        }
        assert_eq!(app.admin_get("/admin/outbox", None).await.status(), 401);
        assert_eq!(app.count("outbox").await, 2);

        // The page shows the backlog, the failed row, its error and its form.
        let page = app.admin_get("/admin/publications", Some(ADMIN_TOKEN)).await;
        assert_eq!(page.status(), 200);
        let html = page.text().await.unwrap();
        assert!(html.contains(r#"action="/admin/publications/retry""#), "{html}");
        assert!(html.contains("shop:msg_s1") && html.contains("Retry 1 failed"), "{html}");
        assert!(!html.contains("<script"));
        let detail = app.admin_get("/admin/view/shop/msg_s1", Some(ADMIN_TOKEN)).await.text().await.unwrap();
        assert!(detail.contains(r#"id="publications""#) && detail.contains(r#"action="/admin/publications/republish""#), "{detail}");

        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let form = |action: &str, origin: &str, body: &str| {
            client
                .post(format!("{}/admin/publications/{action}", app.admin_address))
                .bearer_auth(ADMIN_TOKEN)
                .header("origin", origin.to_owned())
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body.to_owned())
                .send()
        };
        let forged = form("republish", "http://evil.example", "endpoint=shop&delivery_id=msg_s1").await.unwrap();
        assert_eq!(forged.status(), 403);
        let forged = form("retry", "http://evil.example", "publisher=bus").await.unwrap();
        assert_eq!(forged.status(), 403);
        let anonymous = client
            .post(format!("{}/admin/publications/republish", app.admin_address))
            .body("endpoint=shop&delivery_id=msg_s1")
            .send()
            .await
            .unwrap();
        assert_eq!(anonymous.status(), 401);
        assert_eq!(app.count("outbox").await, 2);
        assert!(republished(app, "shop", "msg_s1").await.is_empty());

        let own = form("republish", &app.admin_address, "endpoint=shop&delivery_id=msg_s1").await.unwrap();
        assert_eq!(own.status(), 303);
        assert_eq!(own.headers()["location"], "/admin/view/shop/msg_s1");
        assert_eq!(app.count("outbox").await, 4);
        assert_eq!(republished(app, "shop", "msg_s1").await.len(), 2);
        settle(app).await;
        let own = form("retry", &app.admin_address, "publisher=bus").await.unwrap();
        assert_eq!(own.status(), 303);
        assert_eq!(own.headers()["location"], "/admin/publications");
        let refused = form("republish", &app.admin_address, "endpoint=shop&delivery_id=msg_nope").await.unwrap();
        assert_eq!(refused.status(), 404);
    }
}

/// Marks `publisher`'s rows of `delivery_id` sent now, as a relay would
/// once the broker confirmed.
async fn mark_sent(app: &TestApp, publisher: &str, delivery_id: &str) {
    use idempotent_receiver::store::schema::outbox;
    let mut conn = app.store.conn().await.unwrap();
    let now = app.store.clock().naive_now();
    let (publisher, delivery_id) = (publisher.to_owned(), delivery_id.to_owned());
    let marked = with_conn!(&mut conn, |c| {
        diesel::update(
            outbox::table
                .filter(outbox::publisher.eq(&publisher))
                .filter(outbox::delivery_id.eq(&delivery_id)),
        )
        .set((
            outbox::state.eq("sent"),
            outbox::sent_at.eq(Some(now)),
            outbox::confirmation.eq(Some("published")),
        ))
        .execute(c)
        .await
    })
    .unwrap();
    assert_eq!(marked, 1);
}

both_backends_with! { publishing;
    async fn the_purge_deletes_sent_publications_past_the_retention_in_batches_and_never_unsent_ones(app) {
        for id in ["msg_p1", "msg_p2", "msg_p3"] {
            deliver(app, "shop", id).await;
        }
        settle(app).await;
        mark_sent(app, "audit", "msg_p1").await;
        mark_sent(app, "audit", "msg_p2").await;
        app.clock.advance(Duration::from_secs(2 * 3600));
        mark_sent(app, "audit", "msg_p3").await;
        let policy = app.settings.retention_policy();
        let options = |dry_run| PurgeOptions { batch: 1, pause: Duration::ZERO, dry_run };

        let dry = maintenance::purge(&app.store, &policy, &options(true)).await.unwrap();
        assert_eq!(dry.publications, 2, "{dry}");
        assert!(dry.to_string().contains("2 sent publication(s) would be deleted"), "{dry}");
        assert_eq!(app.count("outbox").await, 6);

        let report = maintenance::purge(&app.store, &policy, &options(false)).await.unwrap();
        assert_eq!(report.publications, 2, "{report}");
        assert!(report.batches >= 2, "one row per batch: {report}");
        let left: Vec<(String, String, String)> = rows(app).await.into_iter().map(|r| (r.publisher, r.delivery_id, r.state)).collect();
        // The unsent rows stay however old; the recent sent one stays too.
        assert_eq!(left.len(), 4, "{left:?}");
        assert!(left.contains(&("audit".into(), "msg_p3".into(), "sent".into())), "{left:?}");
        assert_eq!(left.iter().filter(|(p, _, s)| p == "bus" && s == "failed").count(), 3, "{left:?}");
        let again = maintenance::purge(&app.store, &policy, &options(false)).await.unwrap();
        assert_eq!(again.publications, 0);
    }
}

/// Runs the binary over `app`'s database with a configuration that has
/// the app's endpoints and publishers.
fn run(app: &TestApp, dir: &std::path::Path, args: &[&str]) -> Output {
    let handlers = "[\"record\", \"payments\", \"publish:bus\", \"publish:audit\"]";
    let config = format!(
        "[endpoints.shop]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = {handlers}\n[endpoints.quiet]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\"]\n{PUBLISHERS}"
    );
    let file = dir.join("receiver.toml");
    std::fs::write(&file, config).unwrap();
    Command::new(env!("CARGO_BIN_EXE_idempotent-receiver"))
        .args(args)
        .current_dir(dir)
        .env("DATABASE_URL", &app.database_url)
        .env("IR_DATA_DIR", dir)
        .env("IR_CONFIG", &file)
        .env_remove("IR_ADMIN_TOKENS")
        .output()
        .expect("the binary runs")
}

both_backends_with! { publishing;
    async fn the_outbox_command_lists_retries_and_republishes(app) {
        deliver(app, "shop", "msg_c1").await;
        deliver(app, "shop", "msg_c2").await;
        deliver(app, "quiet", "msg_c3").await;
        settle(app).await;
        let dir = tempfile::tempdir().unwrap();

        let listing: Value = serde_json::from_str(&stdout(&run(app, dir.path(), &["outbox", "list", "--json"]))).unwrap();
        assert_eq!(listing["publications"].as_array().unwrap().len(), 4, "{listing}");
        let failed: Value = serde_json::from_str(&stdout(&run(app, dir.path(), &["outbox", "list", "--state", "failed", "--json"]))).unwrap();
        assert!(ids(&failed).iter().all(|(p, _, s)| p == "bus" && s == "failed"), "{failed}");
        let table = stdout(&run(app, dir.path(), &["outbox", "list", "--publisher", "bus"]));
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("backlog: audit") && lines[2].starts_with("PUBLISHER"), "{table}");
        assert_eq!(lines.len(), 5, "{table}");

        let retried = stdout(&run(app, dir.path(), &["outbox", "retry", "--publisher", "bus", "--delivery", "msg_c1"]));
        assert_eq!(retried.trim(), "1 failed publication(s) are due again");

        let one = stdout(&run(app, dir.path(), &["outbox", "republish", "--endpoint", "shop", "--delivery", "msg_c1", "--actor", "ops-alice"]));
        assert!(one.contains("as shop:msg_c1#republish-1"), "{one}");
        assert!(one.ends_with("1 delivery(ies) matched, 2 outbox row(s) written, 0 skipped\n"), "{one}");
        let history = republished(app, "shop", "msg_c1").await;
        assert_eq!(history.len(), 2);
        assert!(history.iter().all(|(actor, _)| actor == "ops-alice"), "{history:?}");

        let dry = stdout(&run(app, dir.path(), &["outbox", "republish", "--endpoint", "shop", "--since", "1h", "--publisher", "audit", "--dry-run"]));
        assert!(dry.ends_with("2 delivery(ies) matched, 2 outbox row(s) would be written, 0 skipped (dry run: nothing was written)\n"), "{dry}");
        assert_eq!(app.count("outbox").await, 6);
        let filtered = stdout(&run(app, dir.path(), &["outbox", "republish", "--endpoint", "shop", "--event-type", "payment.succeeded", "--publisher", "audit"]));
        assert!(filtered.contains("as shop:msg_c1#republish-2") && filtered.contains("as shop:msg_c2#republish-1"), "{filtered}");
        assert_eq!(app.count("outbox").await, 8);

        let quiet = run(app, dir.path(), &["outbox", "republish", "--endpoint", "quiet", "--delivery", "msg_c3"]);
        assert!(!quiet.status.success());
        assert!(String::from_utf8_lossy(&quiet.stderr).contains("publishes to nothing"));
        let skipped = stdout(&run(app, dir.path(), &["outbox", "republish", "--endpoint", "quiet"]));
        assert!(skipped.contains("skipped msg_c3: endpoint \"quiet\" publishes to nothing"), "{skipped}");
        assert_eq!(app.count("outbox").await, 8);
    }
}
