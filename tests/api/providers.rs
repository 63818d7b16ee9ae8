//! Every provider through the real endpoint: exactly once, the bad-input
//! suite, and the defence for ids the signature does not cover.

use crate::fixtures::fixture_app;
use crate::helpers::{Backend, TestApp, problem};
use crate::signed_fixtures::{NOW, Source, sources};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use idempotent_receiver::client;
use idempotent_receiver::providers::{self, Provider};

/// What the bad-input suite needs to know about a scheme's headers.
struct Scheme {
    provider: &'static str,
    signature_header: &'static str,
    base64: bool,
    /// Where the key lives: a header to drop, or a body field to drop.
    key_header: Option<&'static str>,
    key_field: Option<&'static str>,
    /// Whether a timestamp ahead of the receiver's clock is refused.
    refuses_future: bool,
}

const SCHEMES: &[Scheme] = &[
    Scheme {
        provider: "standard-webhooks",
        signature_header: "webhook-signature",
        base64: true,
        key_header: Some("webhook-id"),
        key_field: None,
        refuses_future: true,
    },
    Scheme {
        provider: "stripe",
        signature_header: "stripe-signature",
        base64: false,
        key_header: None,
        key_field: Some("id"),
        refuses_future: false,
    },
    Scheme {
        provider: "github",
        signature_header: "x-hub-signature-256",
        base64: false,
        key_header: Some("x-github-delivery"),
        key_field: None,
        refuses_future: false,
    },
    Scheme {
        provider: "shopify",
        signature_header: "x-shopify-hmac-sha256",
        base64: true,
        key_header: Some("x-shopify-webhook-id"),
        key_field: None,
        refuses_future: false,
    },
    Scheme {
        provider: "slack",
        signature_header: "x-slack-signature",
        base64: false,
        key_header: None,
        key_field: Some("event_id"),
        refuses_future: true,
    },
    Scheme {
        provider: "paddle",
        signature_header: "paddle-signature",
        base64: false,
        key_header: None,
        key_field: Some("event_id"),
        refuses_future: false,
    },
    Scheme {
        provider: "hmac",
        signature_header: "x-acme-signature",
        base64: false,
        key_header: None,
        key_field: Some("id"),
        refuses_future: true,
    },
];

fn source(provider: &str) -> Source {
    sources()
        .into_iter()
        .find(|s| s.provider == provider)
        .unwrap()
}

fn signer(source: &Source) -> Box<dyn Provider> {
    providers::build(&source.provider, &source.spec(&source.secret)).unwrap()
}

/// The request the provider would send for `body` at `timestamp`.
fn signed(source: &Source, id: &str, timestamp: i64, body: &[u8]) -> client::SignedDelivery {
    client::sign_with_key(
        signer(source).as_ref(),
        id,
        timestamp,
        source.event_type.as_deref(),
        body.to_vec(),
        source.signing_keys.map(|(key, _)| key),
    )
    .unwrap()
}

/// Headers for `body` as the provider would send them at `timestamp`.
fn sign(source: &Source, id: &str, timestamp: i64, body: &[u8]) -> Vec<(String, String)> {
    signed(source, id, timestamp, body).headers
}

fn lower(headers: Vec<(String, String)>) -> Vec<(String, String)> {
    headers
        .into_iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v))
        .collect()
}

fn replace(headers: &[(String, String)], name: &str, value: String) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| {
            if n == name {
                (n.clone(), value.clone())
            } else {
                (n.clone(), v.clone())
            }
        })
        .collect()
}

fn without(headers: &[(String, String)], name: &str) -> Vec<(String, String)> {
    headers.iter().filter(|(n, _)| n != name).cloned().collect()
}

/// The signature header with its signature one byte short (still well-formed).
fn truncated(value: &str, base64: bool) -> String {
    if base64 {
        let (head, encoded) = value
            .rsplit_once(',')
            .map(|(h, e)| (format!("{h},"), e))
            .unwrap_or((String::new(), value));
        let bytes = STANDARD.decode(encoded).unwrap();
        format!("{head}{}", STANDARD.encode(&bytes[..bytes.len() - 1]))
    } else {
        value[..value.len() - 2].to_owned()
    }
}

async fn bad_input_suite(app: &TestApp, scheme: &Scheme) {
    let source = source(scheme.provider);
    let endpoint = source.endpoint();
    let good = lower(sign(&source, &source.delivery_id, NOW, &source.body));
    let body = || source.body.clone();
    let signature = good
        .iter()
        .find(|(n, _)| n == scheme.signature_header)
        .unwrap()
        .1
        .clone();
    let what = scheme.provider;

    let missing = without(&good, scheme.signature_header);
    problem(
        app.post_to(&endpoint, &missing, body()).await,
        400,
        "missing-header",
    )
    .await;

    for garbage in ["%%%garbage", ",,", "t=,v1="] {
        let malformed = replace(&good, scheme.signature_header, garbage.to_owned());
        let response = app.post_to(&endpoint, &malformed, body()).await;
        assert_eq!(response.status(), 400, "{what} {garbage:?}");
        problem(response, 400, "malformed-header").await;
    }

    let short = replace(
        &good,
        scheme.signature_header,
        truncated(&signature, scheme.base64),
    );
    problem(
        app.post_to(&endpoint, &short, body()).await,
        401,
        "invalid-signature",
    )
    .await;

    let wrong = lower(
        client::sign(
            providers::build(&source.provider, &source.spec(&source.other_secret))
                .unwrap()
                .as_ref(),
            &source.delivery_id,
            NOW,
            source.event_type.as_deref(),
            body(),
        )
        .unwrap()
        .headers,
    );
    problem(
        app.post_to(&endpoint, &wrong, body()).await,
        401,
        "invalid-signature",
    )
    .await;

    if source.timestamped {
        let stale = lower(sign(&source, &source.delivery_id, NOW - 3600, &source.body));
        problem(
            app.post_to(&endpoint, &stale, body()).await,
            401,
            "stale-timestamp",
        )
        .await;
        let future = lower(sign(&source, &source.delivery_id, NOW + 3600, &source.body));
        let response = app.post_to(&endpoint, &future, body()).await;
        if scheme.refuses_future {
            problem(response, 401, "stale-timestamp").await;
        } else {
            // Age-only schemes accept clock skew ahead; nothing of it may be stored
            // here, so delete what it stored before the count below.
            assert_eq!(response.status(), 200, "{what} future");
            app.forget_deliveries().await;
        }
    }

    let not_json = "this is not json";
    let signed = lower(sign(&source, &source.delivery_id, NOW, not_json.as_bytes()));
    problem(
        app.post_to(&endpoint, &signed, not_json.as_bytes().to_vec())
            .await,
        400,
        "malformed-body",
    )
    .await;

    match (scheme.key_header, scheme.key_field) {
        (Some(header), _) => {
            let no_key = without(&good, header);
            problem(
                app.post_to(&endpoint, &no_key, body()).await,
                400,
                "missing-header",
            )
            .await;
        }
        (None, Some(field)) => {
            let mut payload: serde_json::Value = serde_json::from_slice(&source.body).unwrap();
            payload.as_object_mut().unwrap().remove(field);
            let keyless = payload.to_string();
            let signed = lower(sign(&source, &source.delivery_id, NOW, keyless.as_bytes()));
            problem(
                app.post_to(&endpoint, &signed, keyless.into_bytes()).await,
                400,
                "missing-key",
            )
            .await;
        }
        (None, None) => unreachable!("every scheme has a key"),
    }

    assert_eq!(
        app.count("deliveries").await,
        0,
        "{what}: bad input stored a delivery"
    );
    assert_eq!(
        app.count("events").await,
        0,
        "{what}: bad input stored an event"
    );
    assert_eq!(app.ledger_rows().await, 0, "{what}: bad input moved money");
}

async fn each_provider_refuses_bad_input_with_a_distinct_problem(backend: Backend) {
    let Some(app) = fixture_app(backend).await else {
        return;
    };
    for scheme in SCHEMES {
        bad_input_suite(&app, scheme).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_provider_refuses_bad_input_with_a_distinct_problem_sqlite() {
    each_provider_refuses_bad_input_with_a_distinct_problem(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_provider_refuses_bad_input_with_a_distinct_problem_postgres() {
    each_provider_refuses_bad_input_with_a_distinct_problem(Backend::Postgres).await;
}

async fn each_provider_processes_a_delivery_once_and_replays_it(backend: Backend) {
    let Some(app) = fixture_app(backend).await else {
        return;
    };
    let mut firsts = Vec::new();
    for source in sources() {
        let first = signed(&source, &source.delivery_id, NOW, &source.body);
        let response = app
            .post_signed(&source.endpoint(), &first.headers, &first.query, first.body)
            .await;
        assert_eq!(response.status(), 200, "{}", source.provider);
        firsts.push(response.bytes().await.unwrap());
    }
    let booked = app.ledger_rows().await;
    assert!(booked >= 3, "{booked}");
    for (source, first) in sources().iter().zip(firsts) {
        // The provider's retry: signed again, a little later.
        let again = signed(source, &source.delivery_id, NOW + 60, &source.body);
        let again = app
            .post_signed(&source.endpoint(), &again.headers, &again.query, again.body)
            .await;
        assert_eq!(
            again.headers()["idempotent-replayed"],
            "true",
            "{}",
            source.provider
        );
        assert_eq!(again.bytes().await.unwrap(), first, "{}", source.provider);
    }
    assert_eq!(app.count("events").await, sources().len() as i64);
    assert_eq!(app.ledger_rows().await, booked, "a replay moved money");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_provider_processes_a_delivery_once_and_replays_it_sqlite() {
    each_provider_processes_a_delivery_once_and_replays_it(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_provider_processes_a_delivery_once_and_replays_it_postgres() {
    each_provider_processes_a_delivery_once_and_replays_it(Backend::Postgres).await;
}

async fn a_captured_body_replayed_under_a_fresh_unsigned_id_is_not_processed_twice(
    backend: Backend,
) {
    let Some(app) = TestApp::builder(backend)
        .endpoints_toml(&crate::signed_fixtures::endpoints_toml())
        .verify_at(NOW)
        .admin()
        .spawn_if_available()
        .await
    else {
        return;
    };
    for provider in ["github", "shopify"] {
        let source = source(provider);
        let original = sign(&source, &source.delivery_id, NOW, &source.body);
        let first = app
            .post_to(&source.endpoint(), &original, source.body.clone())
            .await;
        assert_eq!(first.status(), 200);
        let first = first.bytes().await.unwrap();

        // An attacker (or a confused proxy) swaps the unsigned id header; the
        // signature still verifies because the id is not part of it. Sent in
        // parallel, several fresh ids at once.
        let replays = (0..8).map(|i| {
            let headers = sign(
                &source,
                &format!("forged-{provider}-{i}"),
                NOW,
                &source.body,
            );
            let app = &app;
            let endpoint = source.endpoint();
            let body = source.body.clone();
            async move { app.post_to(&endpoint, &headers, body).await }
        });
        for response in futures_util::future::join_all(replays).await {
            assert_eq!(response.status(), 200, "{provider}");
            assert_eq!(
                response.headers()["idempotent-replayed"],
                "true",
                "{provider}"
            );
            assert_eq!(response.bytes().await.unwrap(), first, "{provider}");
        }
        // And the original id twice more. Every repeat, whichever id it
        // came under, is counted on the original's row: these keys carry a
        // body key, so their counts take the statement that finds a row by
        // its key or by its body key, one key at a time.
        for _ in 0..2 {
            let again = app
                .post_to(&source.endpoint(), &original, source.body.clone())
                .await;
            assert_eq!(again.headers()["idempotent-replayed"], "true");
        }
        let row = format!(
            "/admin/deliveries/{}/{}",
            source.endpoint(),
            source.delivery_id
        );
        app.wait_for_replays(&row, 10).await;
    }
    assert_eq!(app.count("events").await, 2);
    assert_eq!(app.count("deliveries").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_body_replayed_under_a_fresh_unsigned_id_is_not_processed_twice_sqlite() {
    a_captured_body_replayed_under_a_fresh_unsigned_id_is_not_processed_twice(Backend::Sqlite)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_body_replayed_under_a_fresh_unsigned_id_is_not_processed_twice_postgres() {
    a_captured_body_replayed_under_a_fresh_unsigned_id_is_not_processed_twice(Backend::Postgres)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_id_with_a_reused_body_is_a_new_delivery() {
    // Standard Webhooks signs the id, so the same body under a new id is a
    // new, legitimate event (say, the same refund sent for two orders).
    let app = fixture_app(Backend::Sqlite).await.unwrap();
    let source = source("standard-webhooks");
    for id in ["msg_a", "msg_b"] {
        let headers = sign(&source, id, NOW, &source.body);
        let response = app
            .post_to(&source.endpoint(), &headers, source.body.clone())
            .await;
        assert!(response.headers().get("idempotent-replayed").is_none());
    }
    assert_eq!(app.ledger_rows().await, 2);
}

/// A provider the catalogue does not know, described in the endpoint's
/// configuration alone: a `k=v` signature header with a millisecond
/// timestamp and a base64 HMAC-SHA512 keyed by a hex secret, over the
/// method, the public URL and the body; the key and the event type in the
/// body. The signature was computed with Python, not with this code:
///
/// ```text
/// python3 -c 'import hmac,hashlib,base64; print(base64.b64encode(hmac.new(
///   bytes.fromhex("00112233445566778899aabbccddeeff"),
///   b"1767225600000.POST.https://receiver.example/webhooks/acmepay." + BODY,
///   hashlib.sha512).digest()).decode())'
/// ```
const ACME_PAY: &str = r#"
[endpoints.acmepay]
provider = "hmac"
secrets = ["00112233445566778899aabbccddeeff"]
url = "https://receiver.example/webhooks/acmepay"

[endpoints.acmepay.hmac]
signature_header = "Acme-Signature"
syntax = "pairs"
separator = ","
timestamp_key = "t"
signature_key = "s1"
timestamp_unit = "milliseconds"
tolerance = "2m"
encoding = "base64"
algorithm = "sha512"
key = "hex"
signed_content = "{timestamp}.{method}.{url}.{body}"
id_pointer = "/event/id"
event_type_pointer = "/event/type"
"#;
const ACME_PAY_BODY: &str = r#"{"event":{"id":"ap_evt_1","type":"payment.succeeded"},"data":{"id":"pay_ap_1","order_id":"order_ap_1","amount":990,"currency":"EUR"}}"#;
const ACME_PAY_SIGNATURE: &str = "t=1767225600000,s1=PksuSgIRISUL/boUZ9QStfe/2wn3vcsBnM3LbJ1V6h63uVCZ0kIS0YQC2t08WtmIZBZ58HG4nnxPI4ZK7cbYHA==";

async fn a_provider_described_in_toml_alone_verifies_keys_and_books(backend: Backend) {
    let Some(app) = TestApp::builder(backend)
        .endpoints_toml(ACME_PAY)
        .verify_at(NOW)
        .spawn_if_available()
        .await
    else {
        return;
    };
    let headers = vec![("Acme-Signature".to_owned(), ACME_PAY_SIGNATURE.to_owned())];
    let first = app
        .post_to("acmepay", &headers, ACME_PAY_BODY.as_bytes().to_vec())
        .await;
    assert_eq!(first.status(), 200);
    let answer: serde_json::Value = first.json().await.unwrap();
    assert_eq!(answer["delivery_id"], "ap_evt_1");
    assert_eq!(answer["event_type"], "payment.succeeded");
    assert_eq!(app.ledger_rows().await, 1);
    let again = app
        .post_to("acmepay", &headers, ACME_PAY_BODY.as_bytes().to_vec())
        .await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    // One byte of the body changed: refused, nothing more stored.
    let tampered = ACME_PAY_BODY.replace("990", "991");
    problem(
        app.post_to("acmepay", &headers, tampered.into_bytes())
            .await,
        401,
        "invalid-signature",
    )
    .await;
    // The same signature two minutes and a second later: stale.
    let late = TestApp::builder(backend)
        .endpoints_toml(ACME_PAY)
        .verify_at(NOW + 121)
        .spawn()
        .await;
    problem(
        late.post_to("acmepay", &headers, ACME_PAY_BODY.as_bytes().to_vec())
            .await,
        401,
        "stale-timestamp",
    )
    .await;
    assert_eq!(app.count("deliveries").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_described_in_toml_alone_verifies_keys_and_books_sqlite() {
    a_provider_described_in_toml_alone_verifies_keys_and_books(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_described_in_toml_alone_verifies_keys_and_books_postgres() {
    a_provider_described_in_toml_alone_verifies_keys_and_books(Backend::Postgres).await;
}
