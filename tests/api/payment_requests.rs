//! `POST /payments` and `GET /payments/{id}` against bad input: the
//! configured body limit, refusals that keep the key free, a NUL in a field,
//! and reads scoped by tenant.

use crate::both_backends;
use crate::both_backends_with;
use crate::helpers::{TestApp, TestAppBuilder, problem};
use serde_json::{Value, json};

const KEY: &str = "\"5d0c8a1e-3b7f-4c62-9a40-7e1f2b3c4d5e\"";

fn order() -> Value {
    json!({ "order_id": "order_7", "amount": 1999, "currency": "EUR" })
}

/// POSTs `body` as it is to `/payments` with `KEY` and `content_type`.
async fn post_raw(app: &TestApp, content_type: &str, body: Vec<u8>) -> reqwest::Response {
    app.client
        .post(format!("{}/payments", app.address))
        .header("idempotency-key", KEY)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("the receiver answers")
}

/// The key stays free after a refusal: nothing stored, and the same key
/// with a good body runs (201, not a replay).
async fn assert_key_free(app: &TestApp) {
    assert_eq!(app.count("deliveries").await, 0, "a refusal was stored");
    assert_eq!(app.count("payments").await, 0);
    let good = app.post_json("/payments", Some(KEY), &[], &order()).await;
    assert_eq!(good.status(), 201);
    assert!(good.headers().get("idempotent-replayed").is_none());
    assert_eq!(app.count("payments").await, 1);
}

both_backends! {
    async fn a_payment_body_above_actix_defaults_and_under_the_limit_is_processed(app) {
        // 300 KiB: over actix's 256 KiB default, under `max_body_bytes` (1 MiB).
        let mut big = order();
        big["note"] = json!("n".repeat(300 * 1024));
        let first = app.post_json("/payments", Some(KEY), &[], &big).await;
        assert_eq!(first.status(), 201, "{}", first.text().await.unwrap());
        let again = app.post_json("/payments", Some(KEY), &[], &big).await;
        assert_eq!(again.status(), 201);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(app.count("payments").await, 1);
    }
}

both_backends! {
    async fn a_payment_body_over_the_limit_is_413_and_leaves_the_key_free(app) {
        let mut huge = order();
        huge["note"] = json!("n".repeat(1024 * 1024));
        let refused = post_raw(app, "application/json", huge.to_string().into_bytes()).await;
        problem(refused, 413, "payload-too-large").await;
        assert_key_free(app).await;
    }
}

both_backends! {
    async fn a_payment_body_that_is_not_json_is_400_and_leaves_the_key_free(app) {
        let refused = post_raw(app, "application/json", br#"{"order_id": "order_7","#.to_vec()).await;
        let body = problem(refused, 400, "malformed-body").await;
        assert!(body["detail"].as_str().unwrap().contains("line 1"), "{body}");
        assert_key_free(app).await;
    }
}

both_backends! {
    async fn a_payment_sent_as_another_content_type_is_415_and_leaves_the_key_free(app) {
        let refused = post_raw(app, "text/plain", order().to_string().into_bytes()).await;
        problem(refused, 415, "unsupported-media-type").await;
        assert_key_free(app).await;
    }
}

both_backends! {
    async fn a_nul_in_a_payments_order_id_is_a_422_naming_the_field(app) {
        let body = br#"{"order_id":"order\u0000_7","amount":1999,"currency":"EUR"}"#.to_vec();
        let refused = post_raw(app, "application/json", body).await;
        let problem = problem(refused, 422, "validation-failed").await;
        assert_eq!(problem["errors"][0]["field"], "order_id", "{problem}");
        assert_eq!(app.count("payments").await, 0);
    }
}

both_backends! {
    async fn a_payment_id_with_a_nul_or_a_space_is_404_on_both_backends(app) {
        for id in ["%00", "pay%20x", "pay_%0A"] {
            let response = app.client.get(format!("{}/payments/{id}", app.address)).send().await.unwrap();
            problem(response, 404, "payment-not-found").await;
        }
    }
}

fn with_tenants(builder: TestAppBuilder) -> TestAppBuilder {
    builder.endpoints_toml("[idempotency]\ntenant_header = \"X-Tenant-Id\"\n")
}

/// Creates a payment (as `tenant`, if any) and returns its `Location`.
async fn create(app: &TestApp, tenant: Option<&str>) -> String {
    let headers: Vec<(&str, &str)> = tenant.map(|t| ("X-Tenant-Id", t)).into_iter().collect();
    let key = format!("\"{}\"", uuid::Uuid::new_v4());
    let created = app
        .post_json("/payments", Some(&key), &headers, &order())
        .await;
    assert_eq!(created.status(), 201);
    created.headers()["location"].to_str().unwrap().to_owned()
}

async fn read_status(app: &TestApp, location: &str, tenant: Option<&str>) -> u16 {
    let mut request = app.client.get(format!("{}{location}", app.address));
    if let Some(tenant) = tenant {
        request = request.header("X-Tenant-Id", tenant);
    }
    request.send().await.unwrap().status().as_u16()
}

both_backends_with! { with_tenants;
    async fn a_payment_is_read_back_only_by_the_tenant_it_was_created_for(app) {
        let theirs = create(app, Some("tenant-a")).await;
        assert_eq!(read_status(app, &theirs, Some("tenant-b")).await, 404);
        assert_eq!(read_status(app, &theirs, None).await, 404);
        assert_eq!(read_status(app, &theirs, Some("tenant-a")).await, 200);
        let response = app.client.get(format!("{}{theirs}", app.address)).header("X-Tenant-Id", "tenant-b").send().await.unwrap();
        problem(response, 404, "payment-not-found").await;
        // Created without a tenant: read back only without one.
        let untenanted = create(app, None).await;
        assert_eq!(read_status(app, &untenanted, Some("tenant-a")).await, 404);
        assert_eq!(read_status(app, &untenanted, None).await, 200);
    }
}

both_backends! {
    async fn without_tenants_configured_a_payment_is_read_by_anyone(app) {
        let location = create(app, Some("tenant-a")).await;
        assert_eq!(read_status(app, &location, Some("tenant-b")).await, 200);
        assert_eq!(read_status(app, &location, None).await, 200);
    }
}
