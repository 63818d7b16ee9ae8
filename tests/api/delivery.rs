use crate::both_backends;
use crate::helpers::{ENDPOINT, OTHER_SECRET, payment};
use idempotent_receiver::providers::StandardWebhooks;
use serde_json::Value;

both_backends! {
    async fn one_delivery_is_processed_with_one_event_and_one_ledger_row(app) {
        let response = app.deliver("msg_first", &payment("pay_1", 4200)).await;
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("idempotent-replayed").is_none());
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["status"], "processed");
        assert_eq!(body["delivery_id"], "msg_first");
        assert_eq!(body["event_type"], "payment.succeeded");
        assert_eq!(body["effects"]["payments"]["kind"], "charge");
        assert_eq!(app.count("events").await, 1);
        assert_eq!(app.ledger_rows().await, 1);
        let row = app.delivery("msg_first").await.unwrap();
        assert_eq!(row.status, "completed");
        assert_eq!(row.attempts, 1);
        assert_eq!(row.lease_owner, None);
        assert_eq!(row.event_type.as_deref(), Some("payment.succeeded"));
    }
}

both_backends! {
    async fn a_sequential_redelivery_replays_the_identical_body(app) {
        let body = payment("pay_2", 1000);
        let first = app.deliver("msg_again", &body).await;
        assert_eq!(first.status(), 200);
        let first_type = first.headers()["content-type"].clone();
        let first_bytes = first.bytes().await.unwrap();

        // The provider re-signs the redelivery with a new timestamp.
        let second = app.deliver_at("msg_again", &body, crate::helpers::now() - 30).await;
        assert_eq!(second.status(), 200);
        assert_eq!(second.headers()["idempotent-replayed"], "true");
        assert_eq!(second.headers()["content-type"], first_type);
        assert_eq!(second.bytes().await.unwrap(), first_bytes);
        assert_eq!(app.ledger_rows().await, 1);
        assert_eq!(app.count("events").await, 1);
    }
}

both_backends! {
    async fn a_redelivery_two_days_later_still_replays(app) {
        let body = payment("pay_3", 990);
        let first = app.deliver("msg_late", &body).await.bytes().await.unwrap();
        app.age_delivery("msg_late", chrono::TimeDelta::days(2)).await;
        let late = app.deliver("msg_late", &body).await;
        assert_eq!(late.status(), 200);
        assert_eq!(late.headers()["idempotent-replayed"], "true");
        assert_eq!(late.bytes().await.unwrap(), first);
        assert_eq!(app.ledger_rows().await, 1);
    }
}

both_backends! {
    async fn the_same_id_with_a_different_body_is_a_conflict_and_changes_nothing(app) {
        let first = app.deliver("msg_reused", &payment("pay_4", 100)).await;
        assert_eq!(first.status(), 200);
        let before = app.delivery("msg_reused").await.unwrap();

        let other = app.deliver("msg_reused", &payment("pay_4", 999_999)).await;
        assert_eq!(other.status(), 409);
        assert_eq!(other.headers()["content-type"], "application/problem+json");
        let problem: Value = other.json().await.unwrap();
        assert_eq!(problem["type"], "urn:idempotent-receiver:problem:key-reused");

        let after = app.delivery("msg_reused").await.unwrap();
        assert_eq!(after.request_hash, before.request_hash);
        assert_eq!(after.response_body, before.response_body);
        assert_eq!(app.ledger_rows().await, 1);
        assert_eq!(app.count("events").await, 1);
    }
}

both_backends! {
    async fn the_same_id_on_another_endpoint_is_another_key(app) {
        let body = payment("pay_5", 10);
        let shop = app.deliver("msg_shared", &body).await;
        let other = app.deliver_to("other", "msg_shared", &body).await;
        assert_eq!(shop.status(), 200);
        assert_eq!(other.status(), 200);
        assert!(other.headers().get("idempotent-replayed").is_none());
        let other: Value = other.json().await.unwrap();
        assert_eq!(other["endpoint"], "other");
        assert_eq!(app.ledger_rows().await, 2);
        assert_eq!(app.count("deliveries").await, 2);
        assert_eq!(app.delivery("msg_shared").await.unwrap().endpoint, ENDPOINT);
    }
}

both_backends! {
    async fn a_delivery_signed_with_the_second_secret_of_a_rotation_is_accepted(app) {
        let body = payment("pay_6", 10);
        let key = StandardWebhooks::parse_secret(OTHER_SECRET).unwrap();
        let ts = crate::helpers::now().to_string();
        let signature = StandardWebhooks::signature(&key, "msg_rotated", &ts, &body);
        let headers = vec![
            ("svix-id".to_string(), "msg_rotated".to_string()),
            ("svix-timestamp".to_string(), ts),
            ("svix-signature".to_string(), format!("v1,{signature}")),
        ];
        assert_eq!(app.post(&headers, body).await.status(), 200);
        assert_eq!(app.ledger_rows().await, 1);
    }
}

both_backends! {
    async fn a_payment_event_that_can_never_succeed_stores_a_422_and_no_effect(app) {
        let body = serde_json::json!({
            "type": "payment.succeeded",
            "data": { "id": "pay_bad", "order_id": "o", "amount": 12.5, "currency": "EUR" }
        }).to_string().into_bytes();
        let first = app.deliver("msg_bad_amount", &body).await;
        assert_eq!(first.status(), 422);
        assert_eq!(first.headers()["content-type"], "application/problem+json");
        let first_bytes = first.bytes().await.unwrap();
        let problem: Value = serde_json::from_slice(&first_bytes).unwrap();
        assert_eq!(problem["type"], "urn:idempotent-receiver:problem:event-rejected");

        let again = app.deliver("msg_bad_amount", &body).await;
        assert_eq!(again.status(), 422);
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.bytes().await.unwrap(), first_bytes);
        // Effects of every handler were rolled back; only the answer is kept.
        assert_eq!(app.ledger_rows().await, 0);
        assert_eq!(app.count("events").await, 0);
        assert_eq!(app.delivery("msg_bad_amount").await.unwrap().status, "completed");
    }
}

both_backends! {
    async fn events_that_move_no_money_are_recorded_and_acknowledged(app) {
        let body = br#"{"type":"customer.created","data":{"id":"cus_1"}}"#;
        let response = app.deliver("msg_customer", body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(app.count("events").await, 1);
        assert_eq!(app.ledger_rows().await, 0);
    }
}

both_backends! {
    async fn readiness_reports_a_migrated_reachable_database(app) {
        let ready = app.client.get(format!("{}/readyz", app.address)).send().await.unwrap();
        assert_eq!(ready.status(), 200);
        let alive = app.client.get(format!("{}/healthz", app.address)).send().await.unwrap();
        assert_eq!(alive.status(), 200);
    }
}

both_backends! {
    async fn the_answers_timestamps_come_from_the_stores_clock(app) {
        // Far from the wall clock, so that only the injected clock can
        // have written these (it keeps running from there).
        let at = chrono::DateTime::parse_from_rfc3339("2031-05-06T07:08:09Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        app.clock.set(at);

        let delivered: Value = app.deliver("msg_clock", &payment("pay_clock", 100)).await.json().await.unwrap();
        let processed_at = delivered["processed_at"].as_str().unwrap();
        assert!(processed_at.starts_with("2031-05-06T07:0"), "{processed_at}");
        let row = app.delivery("msg_clock").await.unwrap();
        let after = row.received_at - at.naive_utc();
        assert!(after >= chrono::TimeDelta::zero() && after < chrono::TimeDelta::minutes(1), "{after}");

        let request = serde_json::json!({"order_id": "o_clock", "amount": 100, "currency": "EUR"});
        let created: Value = app.post_json("/payments", Some("key-clock"), &[], &request).await.json().await.unwrap();
        let created_at = created["created_at"].as_str().unwrap();
        assert!(created_at.starts_with("2031-05-06T07:0"), "{created_at}");
    }
}
