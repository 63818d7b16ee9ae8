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

both_backends_with! { fixtures;
    async fn a_hubspot_retry_with_a_new_attempt_number_replays_each_event(app) {
        let batch = |attempt: u32| {
            json!([
                {"eventId": 101, "subscriptionType": "contact.creation", "objectId": 1, "attemptNumber": attempt, "occurredAt": 1767225600000u64},
                {"eventId": 102, "subscriptionType": "deal.creation", "objectId": 2, "attemptNumber": attempt, "occurredAt": 1767225600000u64}
            ])
            .to_string()
            .into_bytes()
        };
        let first = post(app, "hubspot", &signed("hubspot", "unused", None, &batch(0))).await;
        assert_eq!(first.status(), 200);
        assert_eq!(app.count("events").await, 2);
        // HubSpot's retry counts its attempts inside the body, so the bytes
        // (and the signature) differ; each event is still the same one.
        let retry = post(app, "hubspot", &signed("hubspot", "unused", None, &batch(1))).await;
        assert_eq!(retry.status(), 200);
        assert!(replayed(&retry));
        assert_eq!(app.count("events").await, 2);
    }
}

both_backends_with! { fixtures;
    async fn zoom_url_validation_is_answered_with_the_encrypted_token(app) {
        let body = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1767225600000,"event":"endpoint.url_validation"}"#;
        let answer = post(app, "zoom", &signed("zoom", "unused", None, body)).await;
        assert_eq!(answer.status(), 200);
        let answer: Value = answer.json().await.unwrap();
        let secret = source("zoom").secret;
        let expected = hex::encode(providers::mac::sign(
            providers::mac::Algorithm::Sha256,
            secret.as_bytes(),
            &[b"qgg8vlvZRS6UYooatFL8Aw"],
        ));
        assert_eq!(answer["plainToken"], "qgg8vlvZRS6UYooatFL8Aw");
        assert_eq!(answer["encryptedToken"], expected);
        assert_eq!(app.count("deliveries").await, 0);
    }
}

both_backends_with! { fixtures;
    async fn twitch_callback_verification_is_answered_with_the_raw_challenge(app) {
        let body = br#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"webhook_callback_verification_pending","type":"channel.follow","version":"2"}}"#;
        let mut delivery = signed("twitch", "msg-verify-1", None, body);
        delivery
            .headers
            .push(("Twitch-Eventsub-Message-Type".into(), "webhook_callback_verification".into()));
        let answer = post(app, "twitch", &delivery).await;
        assert_eq!(answer.status(), 200);
        assert!(
            answer.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain")
        );
        assert_eq!(answer.text().await.unwrap(), "pogchamp-kappa-360noscope-vohiyo");
        assert_eq!(app.count("deliveries").await, 0);
    }
}

/// RFC 8032 §7.1 TEST 1's public key, whose secret key signed the vectors
/// of `tests/vectors/discord.toml` (with Python's `cryptography`).
fn discord(builder: TestAppBuilder) -> TestAppBuilder {
    builder
        .endpoints_toml(
            "[endpoints.discord]\nprovider = \"discord\"\nsecrets = [\"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a\"]\n",
        )
        .verify_at(1_700_000_000)
}

both_backends_with! { discord;
    async fn a_discord_ping_gets_a_pong_and_a_command_is_processed_once(app) {
        let ping = br#"{"id":"787053080478613555","token":"ThisIsATokenFromDiscordThatIsVeryLong","type":1,"version":1}"#;
        let headers = |signature: &str| {
            vec![
                ("X-Signature-Ed25519".to_owned(), signature.to_owned()),
                ("X-Signature-Timestamp".to_owned(), "1700000000".to_owned()),
            ]
        };
        let pong = app
            .post_to("discord", &headers("f0bd878adcef1f6d475c9644421905bd02b5de38e0d3ecfc6f58a711962c69ccc8dd7c9db312f9bdf08b1e1b8182e27a844da728c5e0dbb5507bf9931c1ed80b"), ping.to_vec())
            .await;
        assert_eq!(pong.status(), 200);
        assert_eq!(pong.json::<Value>().await.unwrap(), json!({"type": 1}));
        assert_eq!(app.count("deliveries").await, 0);

        let command = br#"{"id":"787053080478613556","type":2,"data":{"name":"ping"},"version":1}"#;
        let signature = "a763893c7c37569ced8d4b940d503398fb0ea6eecf10ddf36b6b565aa6a68f52bd42ad2555b067b4a859aa885853a3695e12b6216a0a8f8f42ca4efbed7acd09";
        let first = app.post_to("discord", &headers(signature), command.to_vec()).await;
        assert_eq!(first.status(), 200);
        let again = app.post_to("discord", &headers(signature), command.to_vec()).await;
        assert!(replayed(&again));
        assert_eq!(app.count("events").await, 1);

        // The PING's signature on another body is refused.
        let forged = app
            .post_to("discord", &headers("f0bd878adcef1f6d475c9644421905bd02b5de38e0d3ecfc6f58a711962c69ccc8dd7c9db312f9bdf08b1e1b8182e27a844da728c5e0dbb5507bf9931c1ed80b"), command.to_vec())
            .await;
        assert_eq!(forged.status(), 401);
    }
}

both_backends_with! { fixtures;
    async fn braintrees_destination_check_is_answered_and_other_gets_are_refused(app) {
        let source = source("braintree");
        let (public, private) = source.secret.split_once(':').unwrap();
        let get = |endpoint: &str, query: &str| {
            app.client
                .get(format!("{}/webhooks/{endpoint}?{query}", app.address))
                .send()
        };
        let answer = get("fx-braintree", "bt_challenge=20f9f8ed05f77439fe955c977e4c8a53")
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        use sha1::Digest;
        let key = sha1::Sha1::digest(private.as_bytes());
        let expected = hex::encode(providers::mac::sign(
            providers::mac::Algorithm::Sha1,
            &key,
            &[b"20f9f8ed05f77439fe955c977e4c8a53"],
        ));
        assert_eq!(answer.text().await.unwrap(), format!("{public}|{expected}"));
        // Not a challenge Braintree sends, or not a provider that sends one.
        for (endpoint, query) in [
            ("fx-braintree", "bt_challenge=PD94bWwgdmVyc2lvbj0iMS4wIj8-"),
            ("fx-braintree", ""),
            ("fx-stripe", "bt_challenge=20f9f8ed05f77439fe955c977e4c8a53"),
        ] {
            let refused = get(endpoint, query).await.unwrap();
            assert_eq!(refused.status(), 405, "{endpoint} {query}");
            assert_eq!(refused.headers()["allow"], "POST");
            assert_eq!(refused.headers()["content-type"], "application/problem+json");
        }
        assert_eq!(app.count("deliveries").await, 0);
    }
}
