//! Requests that carry several deliveries (Adyen's `notificationItems`,
//! GoCardless's `events`) and the handshakes providers demand, through the
//! real endpoint on both backends: each batch item is its own key, processed
//! once however often and however concurrently the batch comes again; a
//! handshake is answered in the provider's form and stores nothing.

use crate::both_backends_with;
use crate::helpers::{TestApp, TestAppBuilder};
use crate::signed_fixtures::{NOW, Source, endpoints_toml, sources};
use idempotent_receiver::client::{self, SignedDelivery};
use idempotent_receiver::providers;
use serde_json::{Value, json};

fn fixtures(builder: TestAppBuilder) -> TestAppBuilder {
    builder.endpoints_toml(&endpoints_toml()).verify_at(NOW)
}

fn source(provider: &str) -> Source {
    sources()
        .into_iter()
        .find(|s| s.provider == provider)
        .unwrap_or_else(|| panic!("no fixture source for {provider}"))
}

/// `body` signed as `provider`'s fixture endpoint would have it signed.
fn signed(provider: &str, id: &str, event_type: Option<&str>, body: &[u8]) -> SignedDelivery {
    let source = source(provider);
    let signer = providers::build(&source.provider, &source.spec(&source.secret)).unwrap();
    client::sign(signer.as_ref(), id, NOW, event_type, body.to_vec()).unwrap()
}

async fn post(app: &TestApp, provider: &str, delivery: &SignedDelivery) -> reqwest::Response {
    app.post_signed(
        &format!("fx-{provider}"),
        &delivery.headers,
        &delivery.query,
        delivery.body.clone(),
    )
    .await
}

fn replayed(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// Two Adyen notification items: a successful authorisation (booked) and a
/// failed one (recorded, not booked).
fn adyen_batch() -> Vec<u8> {
    let item = |psp: &str, success: &str| {
        json!({"NotificationRequestItem": {
            "pspReference": psp, "originalReference": "", "merchantAccountCode": "AcmeShop",
            "merchantReference": format!("order-{psp}"), "eventCode": "AUTHORISATION",
            "success": success, "amount": {"value": 1250, "currency": "EUR"},
            "additionalData": {}
        }})
    };
    json!({"live": "false", "notificationItems": [item("PSP001", "true"), item("PSP002", "false")]})
        .to_string()
        .into_bytes()
}

both_backends_with! { fixtures;
    async fn an_adyen_batch_is_one_key_per_item_and_answered_accepted(app) {
        let delivery = signed("adyen", "unused", None, &adyen_batch());
        let first = post(app, "adyen", &delivery).await;
        assert_eq!(first.status(), 200);
        assert!(!replayed(&first));
        assert_eq!(first.text().await.unwrap(), "[accepted]");
        assert_eq!(app.count("deliveries").await, 2);
        assert_eq!(app.count("events").await, 2);
        // Only the successful authorisation moved money.
        assert_eq!(app.ledger_rows().await, 1);

        // Adyen sends the batch again (it saw a timeout): every item replays.
        let again = post(app, "adyen", &delivery).await;
        assert_eq!(again.status(), 200);
        assert!(replayed(&again));
        assert_eq!(again.text().await.unwrap(), "[accepted]");
        assert_eq!(app.count("events").await, 2);
        assert_eq!(app.ledger_rows().await, 1);
    }
}

both_backends_with! { fixtures;
    async fn parallel_copies_of_a_batch_run_each_item_once(app) {
        let delivery = signed("adyen", "unused", None, &adyen_batch());
        let copies = (0..8).map(|_| post(app, "adyen", &delivery));
        let answers = futures_util::future::join_all(copies).await;
        for answer in answers {
            // A copy that met an item still in progress elsewhere is told
            // to come back (Adyen retries); every other gets [accepted].
            let status = answer.status().as_u16();
            assert!(status == 200 || status == 409, "{status}");
        }
        assert_eq!(app.count("events").await, 2);
        assert_eq!(app.ledger_rows().await, 1);
        let last = post(app, "adyen", &delivery).await;
        assert_eq!(last.text().await.unwrap(), "[accepted]");
    }
}

both_backends_with! { fixtures;
    async fn one_bad_item_refuses_the_whole_batch_and_stores_nothing(app) {
        let delivery = signed("adyen", "unused", None, &adyen_batch());
        // Change the second item's amount after signing.
        let tampered = String::from_utf8(delivery.body.clone())
            .unwrap()
            .replacen("1250", "9999", 2)
            .replacen("9999", "1250", 1);
        let tampered = SignedDelivery { body: tampered.into_bytes(), ..delivery };
        let answer = post(app, "adyen", &tampered).await;
        assert_eq!(answer.status(), 401);
        assert_eq!(app.count("deliveries").await, 0);
    }
}

both_backends_with! { fixtures;
    async fn a_gocardless_batch_lists_each_event_and_a_bad_signature_gets_498(app) {
        let body = json!({"events": [
            {"id": "EV001", "resource_type": "payments", "action": "confirmed", "links": {"payment": "PM1"}},
            {"id": "EV002", "resource_type": "mandates", "action": "active", "links": {"mandate": "MD1"}}
        ]})
        .to_string()
        .into_bytes();
        let delivery = signed("gocardless", "unused", None, &body);
        let first = post(app, "gocardless", &delivery).await;
        assert_eq!(first.status(), 200);
        let answer: Value = first.json().await.unwrap();
        assert_eq!(answer["status"], "processed");
        let ids: Vec<&str> = answer["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["delivery_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["EV001", "EV002"]);
        assert_eq!(app.count("events").await, 2);

        // A redelivery that adds a third event: two replays and one new.
        let body = json!({"events": [
            {"id": "EV001", "resource_type": "payments", "action": "confirmed", "links": {"payment": "PM1"}},
            {"id": "EV002", "resource_type": "mandates", "action": "active", "links": {"mandate": "MD1"}},
            {"id": "EV003", "resource_type": "payments", "action": "paid_out", "links": {"payment": "PM1"}}
        ]})
        .to_string()
        .into_bytes();
        let answer: Value = post(app, "gocardless", &signed("gocardless", "unused", None, &body))
            .await
            .json()
            .await
            .unwrap();
        let outcomes: Vec<&str> = answer["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes, ["replayed", "replayed", "processed"]);
        assert_eq!(app.count("events").await, 3);

        let forged = SignedDelivery {
            headers: vec![("Webhook-Signature".into(), "0".repeat(64))],
            ..delivery
        };
        let refused = post(app, "gocardless", &forged).await;
        assert_eq!(refused.status(), 498);
        assert_eq!(
            refused.headers()["content-type"],
            "application/problem+json"
        );
        assert_eq!(app.count("events").await, 3);
    }
}

both_backends_with! { fixtures;
    async fn slack_url_verification_is_answered_and_claims_nothing(app) {
        let body = br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        let answer = post(app, "slack", &signed("slack", "unused", None, body)).await;
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["content-type"], "application/json");
        let answer: Value = answer.json().await.unwrap();
        assert_eq!(
            answer,
            json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
        );
        assert_eq!(app.count("deliveries").await, 0);
        // Unsigned, the challenge is refused like any delivery.
        let unsigned = app
            .post_signed("fx-slack", &[], "", body.to_vec())
            .await;
        assert_eq!(unsigned.status(), 400);
    }
}
