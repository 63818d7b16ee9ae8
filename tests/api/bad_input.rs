use crate::both_backends;
use crate::helpers::{TestApp, now, payment, problem};
use base64::Engine as _;

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
