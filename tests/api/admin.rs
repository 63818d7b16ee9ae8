//! The admin JSON API on both backends: filters, keyset paging under
//! concurrent inserts, a key in detail, stats, the OpenAPI document, the
//! token check, the surface off or on its own address, and the replay count.

use crate::helpers::{
    ADMIN_TOKEN, ADMIN_TOKEN_NEXT, ENDPOINT, TestApp, TestAppBuilder, payment, problem,
};
use crate::{both_backends, both_backends_with};
use chrono::TimeDelta;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use idempotent_receiver::clock::Clock;
use idempotent_receiver::store::NewClaim;
use idempotent_receiver::store::schema::deliveries;
use idempotent_receiver::with_conn;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

fn admin(builder: TestAppBuilder) -> TestAppBuilder {
    builder.admin()
}

/// Room for more wrong tokens than the login limiter's default burst.
fn admin_with_room_for_wrong_tokens(builder: TestAppBuilder) -> TestAppBuilder {
    builder
        .admin()
        .top_level("[admin_login]\naddress_burst = 1000")
}

fn admin_apart(builder: TestAppBuilder) -> TestAppBuilder {
    builder.admin().top_level("admin_listen = \"127.0.0.1:0\"")
}

/// `endpoint/delivery_id` of every item of a page, in order.
fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .expect("a page has items")
        .iter()
        .map(|item| {
            format!(
                "{}/{}",
                item["endpoint"].as_str().unwrap_or_default(),
                item["delivery_id"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|id| id.to_string()).collect()
}

async fn listed(app: &TestApp, query: &str) -> BTreeSet<String> {
    ids(&app.admin_json(&format!("/admin/deliveries?{query}")).await)
        .into_iter()
        .collect()
}

fn event(event_type: &str) -> Vec<u8> {
    json!({ "type": event_type, "data": { "id": "cus_1" } })
        .to_string()
        .into_bytes()
}

/// A claim left by a process that died (the teardown tolerates this owner).
pub(crate) async fn plant_in_progress(app: &TestApp, id: &str) {
    let now = chrono::Utc::now().naive_utc();
    let mut conn = app.store.conn().await.expect("a connection");
    let inserted = conn
        .insert_claim(&NewClaim {
            endpoint: ENDPOINT,
            delivery_id: id,
            request_hash: "0000",
            status: "in_progress",
            event_type: Some("payment.succeeded"),
            attempts: 1,
            lease_owner: Some("pid1-dead/0000"),
            lease_expires_at: Some(now + TimeDelta::minutes(5)),
            received_at: now,
            body_key: None,
            request_body: None,
        })
        .await
        .expect("the claim is planted");
    assert!(inserted);
}

both_backends_with!(admin;
    async fn the_listing_filters_by_endpoint_status_event_type_received_time_and_id_prefix(app) {
        assert_eq!(app.deliver("msg_a1", &payment("pay_a1", 100)).await.status(), 200);
        assert_eq!(app.deliver("msg_a2", &event("customer.created")).await.status(), 200);
        assert_eq!(app.deliver_to("other", "msg_b1", &payment("pay_b1", 100)).await.status(), 200);
        assert_eq!(app.deliver("msg_old", &payment("pay_old", 100)).await.status(), 200);
        app.age_delivery("msg_old", TimeDelta::hours(48)).await;
        plant_in_progress(app, "msg_busy").await;

        let all = ids(&app.admin_json("/admin/deliveries").await);
        assert_eq!(all.len(), 5, "{all:?}");
        assert_eq!(all.last().map(String::as_str), Some("shop/msg_old"), "newest first");

        assert_eq!(listed(app, "endpoint=other").await, set(&["other/msg_b1"]));
        assert_eq!(listed(app, "status=in_progress").await, set(&["shop/msg_busy"]));
        assert_eq!(
            listed(app, "status=completed&endpoint=shop").await,
            set(&["shop/msg_a1", "shop/msg_a2", "shop/msg_old"])
        );
        assert_eq!(listed(app, "event_type=customer.created").await, set(&["shop/msg_a2"]));
        assert_eq!(listed(app, "since=24h").await.len(), 4);
        assert_eq!(listed(app, "until=24h").await, set(&["shop/msg_old"]));
        let hour_ago = (chrono::Utc::now() - TimeDelta::hours(1)).format("%Y-%m-%dT%H:%M:%SZ");
        assert_eq!(listed(app, &format!("since={hour_ago}")).await.len(), 4);
        assert_eq!(
            listed(app, "id_prefix=msg_a").await,
            set(&["shop/msg_a1", "shop/msg_a2"])
        );
        // Byte for byte: neither case-folded nor a LIKE pattern.
        assert!(listed(app, "id_prefix=MSG_A").await.is_empty());
        assert!(listed(app, "id_prefix=msg%25").await.is_empty());
        assert!(listed(app, "id_prefix=msg_%5F").await.is_empty());
        assert_eq!(
            listed(app, "endpoint=shop&status=completed&since=24h&id_prefix=msg_a").await,
            set(&["shop/msg_a1", "shop/msg_a2"])
        );

        let item = app.admin_json("/admin/deliveries?id_prefix=msg_a1").await["items"][0].clone();
        assert_eq!(item["event_type"], "payment.succeeded");
        assert_eq!(item["status"], "completed");
        assert_eq!(item["attempts"], 1);
        assert_eq!(item["response_status"], 200);
        assert_eq!(item["replays"], 0);
        assert!(item["received_at"].as_str().unwrap().ends_with('Z'));
        assert!(item["completed_at"].is_string());
        assert!(item["last_error"].is_null());

        let long = format!("id_prefix={}", "a".repeat(513));
        for bad in ["status=done", "limit=0", "limit=many", "since=yesterday", "cursor=abc", "endpoint=sh%00op", "event_type=%00", "id_prefix=msg%00", long.as_str()] {
            let response = app.admin_get(&format!("/admin/deliveries?{bad}"), Some(ADMIN_TOKEN)).await;
            let body = problem(response, 400, "invalid-parameter").await;
            let parameter = bad.split('=').next().unwrap();
            assert!(body["detail"].as_str().unwrap().contains(parameter), "{body}");
        }
    }
);

both_backends_with!(admin;
    async fn keyset_pages_neither_repeat_nor_skip_a_key_while_newer_keys_arrive_between_pages(app) {
        for i in 0..7 {
            let id = format!("msg_p{i}");
            assert_eq!(app.deliver(&id, &payment(&format!("pay_p{i}"), 100)).await.status(), 200);
        }
        for i in 0..2 {
            let id = format!("msg_q{i}");
            assert_eq!(app.deliver_to("other", &id, &payment(&format!("pay_q{i}"), 100)).await.status(), 200);
        }
        // Most keys share one instant, so that the page boundaries fall
        // inside ties that only (endpoint, delivery_id) can break.
        let tie = chrono::Utc::now().naive_utc() - TimeDelta::hours(1);
        let mut conn = app.store.conn().await.expect("a connection");
        with_conn!(&mut conn, |c| {
            diesel::update(deliveries::table.filter(deliveries::delivery_id.ne("msg_p6")))
                .set(deliveries::received_at.eq(tie))
                .execute(c)
                .await
        })
        .expect("the update runs");
        drop(conn);
        let mut expected = vec!["shop/msg_p6".to_owned()];
        expected.extend((0..6).rev().map(|i| format!("shop/msg_p{i}")));
        expected.extend((0..2).rev().map(|i| format!("other/msg_q{i}")));

        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        for round in 0.. {
            assert!(round < 10, "the pages never ended: {seen:?}");
            let path = match &cursor {
                Some(cursor) => format!("/admin/deliveries?limit=2&cursor={cursor}"),
                None => "/admin/deliveries?limit=2".to_owned(),
            };
            let page = app.admin_json(&path).await;
            let items = ids(&page);
            assert!(items.len() <= 2);
            seen.extend(items);
            // A newer key arrives between every two pages.
            let id = format!("msg_new{round}");
            assert_eq!(app.deliver(&id, &payment(&format!("pay_new{round}"), 100)).await.status(), 200);
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        assert_eq!(seen, expected, "every key once, newest first");

        // The new keys are on the first page of a fresh listing.
        let fresh = ids(&app.admin_json("/admin/deliveries?limit=1").await);
        assert!(fresh[0].starts_with("shop/msg_new"), "{fresh:?}");
    }
);

both_backends_with!(admin;
    async fn a_key_in_detail_shows_its_stored_answer_verified_payload_and_history(app) {
        let body = payment("pay_d1", 250);
        let answer = app.deliver("msg_d1", &body).await;
        assert_eq!(answer.status(), 200);
        let answer: Value = answer.json().await.expect("a JSON answer");
        let mut conn = app.store.conn().await.expect("a connection");
        conn.record_history(ENDPOINT, "msg_d1", "released", None, Some("downstream unreachable"), app.clock.naive_now())
            .await
            .expect("history is written");
        conn.record_history(ENDPOINT, "msg_d1", "reprocessed", Some("alice"), None, app.clock.naive_now())
            .await
            .expect("history is written");
        drop(conn);

        let view = app.admin_json("/admin/deliveries/shop/msg_d1").await;
        assert_eq!(view["delivery"]["delivery_id"], "msg_d1");
        assert_eq!(view["delivery"]["last_error"], "downstream unreachable");
        assert_eq!(view["response"]["status"], 200);
        assert_eq!(view["response"]["content_type"], "application/json");
        let stored: Value = serde_json::from_str(view["response"]["body"].as_str().unwrap()).unwrap();
        assert_eq!(stored, answer);
        let payload: Value = serde_json::from_str(view["payload"].as_str().unwrap()).unwrap();
        assert_eq!(payload, serde_json::from_slice::<Value>(&body).unwrap());
        let history = view["history"].as_array().unwrap();
        let kinds: Vec<&str> = history.iter().map(|h| h["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["released", "reprocessed"]);
        assert_eq!(history[1]["actor"], "alice");
        assert!(history[0]["at"].as_str().unwrap().ends_with('Z'));

        let listed = app.admin_json("/admin/deliveries?id_prefix=msg_d1").await;
        assert_eq!(listed["items"][0]["last_error"], "downstream unreachable");

        // A NUL is "not found" on both backends (PostgreSQL's text cannot
        // hold one, so the query would fail there).
        for path in ["shop/msg_nope", "shop/msg%00", "sh%00op/msg_nope"] {
            problem(
                app.admin_get(&format!("/admin/deliveries/{path}"), Some(ADMIN_TOKEN)).await,
                404,
                "unknown-delivery",
            )
            .await;
        }

        // A client key's scope holds a space and a slash: URL-encoded, it
        // still names the key.
        let created = app
            .post_json("/payments", Some("key-detail-1"), &[], &json!({"order_id": "o1", "amount": 100, "currency": "EUR"}))
            .await;
        assert_eq!(created.status(), 201);
        let view = app.admin_json("/admin/deliveries/POST%20%2Fpayments/key-detail-1").await;
        assert_eq!(view["delivery"]["endpoint"], "POST /payments");
        assert_eq!(view["response"]["status"], 201);
        assert!(view["response"]["location"].as_str().unwrap().starts_with("/payments/"));
    }
);

both_backends_with!(admin;
    async fn stats_count_the_keys_of_the_window_by_endpoint_and_status(app) {
        for id in ["msg_s1", "msg_s2"] {
            assert_eq!(app.deliver(id, &payment(&format!("pay_{id}"), 100)).await.status(), 200);
        }
        assert_eq!(app.deliver_to("other", "msg_s3", &payment("pay_s3", 100)).await.status(), 200);
        assert_eq!(app.deliver("msg_s4", &payment("pay_s4", 100)).await.status(), 200);
        app.age_delivery("msg_s4", TimeDelta::hours(48)).await;
        plant_in_progress(app, "msg_s5").await;

        let stats = app.admin_json("/admin/stats?window=24h").await;
        assert_eq!(stats["window"], "24h");
        assert_eq!(
            stats["endpoints"],
            json!([
                {"endpoint": "other", "total": 1, "by_status": {"completed": 1}},
                {"endpoint": "shop", "total": 3, "by_status": {"completed": 2, "in_progress": 1}},
            ])
        );
        let default = app.admin_json("/admin/stats").await;
        assert_eq!(default["endpoints"], stats["endpoints"], "24h is the default");
        let wider = app.admin_json("/admin/stats?window=72h").await;
        assert_eq!(wider["endpoints"][1]["by_status"]["completed"], 3);
        problem(app.admin_get("/admin/stats?window=soon", Some(ADMIN_TOKEN)).await, 400, "invalid-parameter").await;
    }
);

both_backends_with!(admin;
    async fn the_openapi_document_is_json_that_lists_every_admin_route(app) {
        let document = app.admin_json("/admin/openapi.json").await;
        assert!(document["openapi"].as_str().unwrap().starts_with("3."));
        let paths: BTreeSet<&str> = document["paths"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            BTreeSet::from([
                "/admin/dashboard.json",
                "/admin/deliveries",
                "/admin/deliveries/{endpoint}/{delivery_id}",
                "/admin/deliveries/{endpoint}/{delivery_id}/republish",
                "/admin/deliveries/{endpoint}/{delivery_id}/reprocess",
                "/admin/outbox",
                "/admin/outbox/retry",
                "/admin/stats",
                "/admin/openapi.json",
                "/admin/queue",
                "/admin/queue/retry",
                "/admin/queue/{endpoint}/{delivery_id}/retry",
                "/admin/queue/{endpoint}/{delivery_id}/cancel",
                "/admin/queue/{endpoint}/pause",
                "/admin/queue/{endpoint}/resume",
            ])
        );
        for path in &paths {
            let method = if document["paths"][path]["get"].is_object() { "get" } else { "post" };
            assert_eq!(document["paths"][path][method]["security"], json!([{"bearer": []}]), "{path}");
        }
        assert_eq!(document["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
        let parameters: Vec<&str> = document["paths"]["/admin/deliveries"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        for name in ["endpoint", "status", "event_type", "since", "until", "id_prefix", "cursor", "limit"] {
            assert!(parameters.contains(&name), "{name} in {parameters:?}");
        }
        for schema in ["DeliveryPage", "DeliveryItem", "DeliveryView", "Stats"] {
            assert!(document["components"]["schemas"][schema].is_object(), "{schema}");
        }
    }
);

both_backends_with!(admin_with_room_for_wrong_tokens;
    async fn admin_routes_refuse_a_missing_or_wrong_token_with_401_and_accept_a_rotated_one(app) {
        assert_eq!(app.deliver("msg_secret", &payment("pay_secret", 100)).await.status(), 200);
        let upper = ADMIN_TOKEN.to_uppercase();
        let longer = format!("{ADMIN_TOKEN}x");
        let wrong: [Option<&str>; 6] = [
            None,
            Some("tok_wrong_0123456789abcdef"),
            Some(&ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1]),
            Some(&longer),
            Some(&upper),
            Some(""),
        ];
        for path in [
            "/admin/deliveries",
            "/admin/deliveries/shop/msg_secret",
            "/admin/stats",
            "/admin/openapi.json",
        ] {
            for token in wrong {
                let response = app.admin_get(path, token).await;
                assert_eq!(response.status(), 401, "{path} with {token:?}");
                let challenge = response.headers()["www-authenticate"].to_str().unwrap().to_owned();
                assert!(challenge.starts_with("Bearer"), "{challenge}");
                let body = problem(response, 401, "unauthorized").await;
                assert!(!body.to_string().contains("msg_secret"), "{body}");
            }
        }
        // Another scheme, or the token alone, is not a bearer token.
        for header in [format!("Basic {ADMIN_TOKEN}"), ADMIN_TOKEN.to_owned()] {
            let response = app
                .client
                .get(format!("{}/admin/deliveries", app.admin_address))
                .header("authorization", header)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 401);
        }
        // Both configured tokens work (rotation), with the scheme in any case.
        for token in [ADMIN_TOKEN, ADMIN_TOKEN_NEXT] {
            let page = app.admin_json("/admin/deliveries").await;
            assert_eq!(ids(&page), ["shop/msg_secret"]);
            let response = app
                .client
                .get(format!("{}/admin/deliveries", app.admin_address))
                .header("authorization", format!("bearer {token}"))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{token}");
        }
    }
);

both_backends!(
    async fn without_an_admin_token_the_admin_surface_is_off(app) {
        for path in ["/admin", "/admin/login", "/admin/deliveries", "/admin/stats", "/admin/openapi.json"] {
            let response = app.admin_get(path, Some(ADMIN_TOKEN)).await;
            assert_eq!(response.status(), 404, "{path}");
        }
    }
);

both_backends_with!(admin_apart;
    async fn admin_listen_serves_the_admin_surface_on_its_own_address_and_only_there(app) {
        assert_ne!(app.admin_address, app.address);
        assert_eq!(app.deliver("msg_apart", &payment("pay_apart", 100)).await.status(), 200);
        assert_eq!(ids(&app.admin_json("/admin/deliveries").await), ["shop/msg_apart"]);
        let main = app
            .client
            .get(format!("{}/admin/deliveries", app.address))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(main.status(), 404, "not on the main listener");
        let webhook = app
            .client
            .post(format!("{}/webhooks/{ENDPOINT}", app.admin_address))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(webhook.status(), 404, "no webhooks on the admin listener");
        let health = app.client.get(format!("{}/healthz", app.admin_address)).send().await.unwrap();
        assert_eq!(health.status(), 404);
        assert_eq!(app.admin_get("/admin/deliveries", None).await.status(), 401);
    }
);

both_backends_with!(admin;
    async fn replays_of_many_keys_on_two_endpoints_are_each_counted_on_their_own_row(app) {
        // Up to 500 keys go into one statement; each must land on its own
        // row, whatever the other keys and endpoints in the same write.
        let mut expected = Vec::new();
        for n in 0..24 {
            let (endpoint, id) = if n % 3 == 0 {
                ("other", format!("msg_o{n}"))
            } else {
                ("shop", format!("msg_m{n}"))
            };
            let body = payment(&format!("pay_m{n}"), 100);
            assert_eq!(app.deliver_to(endpoint, &id, &body).await.status(), 200);
            let repeats = n % 4;
            let answers = (0..repeats).map(|_| app.deliver_to(endpoint, &id, &body));
            for again in futures_util::future::join_all(answers).await {
                assert_eq!(again.headers()["idempotent-replayed"], "true");
            }
            expected.push((format!("/admin/deliveries/{endpoint}/{id}"), repeats as i64));
        }
        // The keys never repeated last: by then every write the others
        // caused has landed, and none of it may have reached these rows.
        expected.sort_by_key(|(_, repeats)| -repeats);
        for (path, repeats) in &expected {
            app.wait_for_replays(path, *repeats).await;
        }
    }
);

both_backends_with!(admin;
    async fn replays_are_counted_for_webhooks_and_client_keys_and_the_answer_stays_byte_for_byte(app) {
        let body = payment("pay_r1", 100);
        let first = app.deliver("msg_r1", &body).await;
        assert_eq!(first.status(), 200);
        let first = first.bytes().await.unwrap();
        for _ in 0..2 {
            let again = app.deliver("msg_r1", &body).await;
            assert_eq!(again.headers()["idempotent-replayed"], "true");
            assert_eq!(again.bytes().await.unwrap(), first);
        }
        app.wait_for_replays("/admin/deliveries/shop/msg_r1", 2).await;

        let request = json!({"order_id": "o_r", "amount": 100, "currency": "EUR"});
        let created = app.post_json("/payments", Some("key-r1"), &[], &request).await;
        assert_eq!(created.status(), 201);
        let again = app.post_json("/payments", Some("key-r1"), &[], &request).await;
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        app.wait_for_replays("/admin/deliveries/POST%20%2Fpayments/key-r1", 1).await;

        // A key that was never repeated counts none; a mismatch is no replay.
        assert_eq!(app.deliver("msg_r2", &payment("pay_r2", 100)).await.status(), 200);
        assert_eq!(app.deliver("msg_r2", &payment("pay_r2_other", 100)).await.status(), 409);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let view = app.admin_json("/admin/deliveries/shop/msg_r2").await;
        assert_eq!(view["delivery"]["replays"], 0);
    }
);
