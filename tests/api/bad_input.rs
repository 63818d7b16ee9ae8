use crate::both_backends;
use crate::helpers::{ENDPOINT, TestApp, now, payment, problem};
use base64::Engine as _;
use idempotent_receiver::webhooks::NUL_REPLACEMENT;
use idempotent_receiver::with_conn;

/// Posts `headers` + `body` and asserts the status, the problem type, and
/// that nothing at all was stored.
async fn assert_refused(
    app: &TestApp,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    status: u16,
    kind: &str,
) {
    let problem = problem(app.post(&headers, body).await, status, kind).await;
    assert!(problem["detail"].as_str().is_some_and(|d| !d.is_empty()));
    assert_eq!(app.count("deliveries").await, 0, "{kind} stored a delivery");
    assert_eq!(app.count("events").await, 0, "{kind} stored an event");
    assert_eq!(app.ledger_rows().await, 0, "{kind} stored a ledger row");
}

fn with_signature(mut headers: Vec<(String, String)>, signature: &str) -> Vec<(String, String)> {
    for (name, value) in &mut headers {
        if name == "webhook-signature" {
            *value = signature.to_owned();
        }
    }
    headers
}

fn without(headers: &[(String, String)], name: &str) -> Vec<(String, String)> {
    headers.iter().filter(|(n, _)| n != name).cloned().collect()
}

both_backends! {
    async fn bad_empty_truncated_and_foreign_signatures_are_401_and_store_nothing(app) {
        let body = payment("pay_x", 100);
        let good = app.signed_headers("msg_sig", now(), &body);
        let signature = good[2].1.strip_prefix("v1,").unwrap().to_owned();
        let raw = base64::engine::general_purpose::STANDARD.decode(&signature).unwrap();
        let truncated = format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(&raw[..31]));
        let foreign = format!("v1,{}", base64::engine::general_purpose::STANDARD.encode([7u8; 32]));
        for bad in ["v1,", "", truncated.as_str(), foreign.as_str(), "v1a,AAAA", "v2,AAAA"] {
            assert_refused(app, with_signature(good.clone(), bad), body.clone(), 401, "invalid-signature").await;
        }
        // A body changed after signing.
        assert_refused(app, good.clone(), payment("pay_x", 1_000_000), 401, "invalid-signature").await;
    }
}

both_backends! {
    async fn more_than_sixteen_signatures_are_400_and_store_nothing(app) {
        let body = payment("pay_many", 100);
        let good = app.signed_headers("msg_many", now(), &body);
        let wrong = format!("v1,{}", base64::engine::general_purpose::STANDARD.encode([7u8; 32]));
        // The right signature among seventeen: refused as a malformed header
        // before any of them is checked.
        let seventeen = format!("{} {}", vec![wrong.as_str(); 16].join(" "), good[2].1);
        assert_refused(app, with_signature(good.clone(), &seventeen), body.clone(), 400, "malformed-header").await;
        // Among sixteen it is checked and the delivery goes through.
        let sixteen = format!("{} {}", vec![wrong.as_str(); 15].join(" "), good[2].1);
        let response = app.post(&with_signature(good.clone(), &sixteen), body.clone()).await;
        assert_eq!(response.status(), 200);
        assert_eq!(app.count("deliveries").await, 1);
        assert_eq!(app.ledger_rows().await, 1);
    }
}

both_backends! {
    async fn stale_and_future_timestamps_are_refused(app) {
        let body = payment("pay_t", 100);
        let stale = app.signed_headers("msg_old", now() - 600, &body);
        assert_refused(app, stale, body.clone(), 401, "stale-timestamp").await;
        let future = app.signed_headers("msg_future", now() + 600, &body);
        assert_refused(app, future, body.clone(), 401, "stale-timestamp").await;
    }
}

both_backends! {
    async fn missing_and_malformed_headers_are_400(app) {
        let body = payment("pay_h", 100);
        let good = app.signed_headers("msg_h", now(), &body);
        for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
            assert_refused(app, without(&good, name), body.clone(), 400, "missing-header").await;
        }
        let mut bad_ts = good.clone();
        bad_ts[1].1 = "yesterday".into();
        assert_refused(app, bad_ts, body.clone(), 400, "malformed-header").await;
        assert_refused(app, with_signature(good.clone(), "v1,%%%notbase64"), body.clone(), 400, "malformed-header").await;
        assert_refused(app, with_signature(good.clone(), "garbage"), body.clone(), 400, "malformed-header").await;
    }
}

both_backends! {
    async fn an_oversized_body_is_413_before_anything_else(app) {
        let body = vec![b' '; 1024 * 1024 + 1];
        let headers = app.signed_headers("msg_big", now(), &body);
        assert_refused(app, headers, body, 413, "payload-too-large").await;
    }
}

both_backends! {
    async fn a_signed_body_that_is_not_json_is_400(app) {
        let body = b"not json at all".to_vec();
        let headers = app.signed_headers("msg_text", now(), &body);
        assert_refused(app, headers, body, 400, "malformed-body").await;
    }
}

both_backends! {
    async fn an_unknown_endpoint_is_404(app) {
        let response = app.client.post(format!("{}/webhooks/nope", app.address)).body("{}").send().await.unwrap();
        assert_eq!(response.status(), 404);
        assert_eq!(response.headers()["content-type"], "application/problem+json");
        assert_eq!(app.count("deliveries").await, 0);
    }
}

both_backends! {
    async fn a_delivery_id_that_cannot_be_a_key_is_400(app) {
        let body = payment("pay_k", 100);
        let long = "m".repeat(256);
        let headers = app.signed_headers(&long, now(), &body);
        assert_refused(app, headers, body, 400, "invalid-key").await;
    }
}

/// The event type recorded for `id` (the `record` handler's row) and the
/// order id of its ledger row, if any.
async fn recorded(app: &TestApp, id: &str) -> (Option<String>, Option<String>) {
    use diesel::{ExpressionMethods, OptionalExtension, QueryDsl};
    use diesel_async::RunQueryDsl;
    use idempotent_receiver::store::schema::{events, ledger_entries};
    let mut conn = app.store.conn().await.expect("a connection");
    let event_type: Option<String> = with_conn!(&mut conn, |c| {
        events::table
            .filter(events::delivery_id.eq(id))
            .select(events::event_type)
            .first(c)
            .await
    })
    .expect("the event was recorded");
    let order_id: Option<Option<String>> = with_conn!(&mut conn, |c| {
        ledger_entries::table
            .filter(ledger_entries::delivery_id.eq(id))
            .select(ledger_entries::order_id)
            .first(c)
            .await
            .optional()
    })
    .expect("the ledger query runs");
    (event_type, order_id.flatten())
}

both_backends! {
    async fn a_nul_in_a_signed_event_type_is_stored_replaced_and_replayed(app) {
        // `\u0000` in the JSON text: what a provider would send.
        let body = br#"{"type":"order.\u0000created","data":{"id":"x"}}"#.to_vec();
        let first = app.deliver("msg_nul_type", &body).await;
        assert_eq!(first.status(), 200, "{}", first.text().await.unwrap());
        let again = app.deliver("msg_nul_type", &body).await;
        assert_eq!(again.status(), 200);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        let replaced = format!("order.{NUL_REPLACEMENT}created");
        assert_eq!(recorded(app, "msg_nul_type").await.0.as_deref(), Some(replaced.as_str()));
        let row = app.delivery("msg_nul_type").await.expect("the key is stored");
        assert_eq!(row.event_type.as_deref(), Some(replaced.as_str()));
    }
}

both_backends! {
    async fn a_nul_in_a_signed_order_id_is_booked_replaced_once(app) {
        let body = br#"{"type":"payment.succeeded","data":{"id":"pay_nul","order_id":"ord\u0000_1","amount":100,"currency":"EUR"}}"#.to_vec();
        for _ in 0..2 {
            let answer = app.deliver("msg_nul_order", &body).await;
            assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
        }
        let replaced = format!("ord{NUL_REPLACEMENT}_1");
        assert_eq!(recorded(app, "msg_nul_order").await.1.as_deref(), Some(replaced.as_str()));
        assert_eq!(app.ledger_rows().await, 1);
    }
}

both_backends! {
    async fn the_frameworks_own_404_and_405_are_problems(app) {
        let unrouted = app.client.get(format!("{}/no/such/route", app.address)).send().await.unwrap();
        problem(unrouted, 404, "not-found").await;
        let wrong_method = app.client.get(format!("{}/payments", app.address)).send().await.unwrap();
        problem(wrong_method, 405, "method-not-allowed").await;
    }
}

both_backends! {
    async fn an_endpoint_answers_the_same_at_its_plain_and_its_percent_encoded_path(app) {
        // `shop` is matched as a literal path, `%73hop` by the pattern
        // `/webhooks/{endpoint}` after decoding: one endpoint either way.
        let encoded = format!("%{:02X}{}", ENDPOINT.as_bytes()[0], &ENDPOINT[1..]);
        for (id, first, second) in [("msg_route_a", encoded.as_str(), ENDPOINT), ("msg_route_b", ENDPOINT, encoded.as_str())] {
            let body = payment(id, 100);
            let headers = app.signed_headers(id, now(), &body);
            let fresh = app.post_to(first, &headers, body.clone()).await;
            assert_eq!(fresh.status(), 200, "{first}");
            assert!(fresh.headers().get("idempotent-replayed").is_none(), "{first}");
            let fresh = fresh.bytes().await.unwrap();
            let again = app.post_to(second, &headers, body).await;
            assert_eq!(again.status(), 200, "{second}");
            assert_eq!(again.headers()["idempotent-replayed"], "true", "{second}");
            assert_eq!(again.bytes().await.unwrap(), fresh, "{second}");
        }
        assert_eq!(app.ledger_rows().await, 2);
        // Another method, and the unsigned GET check, answered alike at both.
        for path in [ENDPOINT, encoded.as_str()] {
            let url = format!("{}/webhooks/{path}", app.address);
            problem(app.client.put(&url).body("{}").send().await.unwrap(), 404, "not-found").await;
            let check = app.client.get(&url).send().await.unwrap();
            assert_eq!(check.headers()["allow"], "POST", "{path}");
            problem(check, 405, "method-not-allowed").await;
        }
    }
}
