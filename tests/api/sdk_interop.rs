//! The providers' official SDKs, installed from PyPI at the versions pinned
//! in .ci/requirements-interop.txt, against our signer and our verifier:
//! what `sign` produces passes the SDK's own verify function, what the SDK
//! signs (where it can) passes ours, and a tampered copy of either is
//! refused by both. tests/interop/sdk.py drives the SDKs, one process per
//! call. Without `IR_SDK_PYTHON` (the venv's python, which .ci/run makes)
//! the tests say SKIPPED once and pass, unless `IR_REQUIRE_SDKS=1`.
//!
//! Time: SDKs that read the wall clock are given a request signed at the
//! current time (and their tolerance parameter where they have one); ours
//! is given the same instant as `now`.

use crate::helpers::TestApp;
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use idempotent_receiver::client::{self, SignedDelivery};
use idempotent_receiver::providers::{self, Provider, ProviderSpec, Rejection, SignedRequest};
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Once;

/// The delivery id our signer is asked to sign (where the scheme carries it
/// outside the body) and the SDKs that take one are given.
const ID: &str = "msg_interop_0001";

/// How long the SDKs that take a tolerance allow: the interpreter's start-up
/// on a loaded machine, not the providers' defaults (Paddle's is 5 s).
const SDK_TOLERANCE_SECS: i64 = 300;

/// The interpreter of the SDK venv, or `None` (after one SKIPPED line) when
/// the SDKs are not installed and not required.
fn python() -> Option<String> {
    match std::env::var("IR_SDK_PYTHON") {
        Ok(python) if !python.is_empty() => Some(python),
        _ if std::env::var("IR_REQUIRE_SDKS").as_deref() == Ok("1") => {
            panic!("IR_REQUIRE_SDKS=1 but IR_SDK_PYTHON is not set (see .ci/run)")
        }
        _ => {
            static ONCE: Once = Once::new();
            ONCE.call_once(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: official SDK interop tests (set IR_SDK_PYTHON, see .ci/run)"
                );
            });
            None
        }
    }
}

/// One call of tests/interop/sdk.py; a crash of the driver or the SDK fails
/// the test (it is never read as a refusal).
fn call_sdk(python: &str, request: &Value) -> Value {
    let driver = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/sdk.py");
    let mut child = Command::new(python)
        .arg(driver)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the SDK venv's python starts");
    child
        .stdin
        .take()
        .expect("a stdin")
        .write_all(request.to_string().as_bytes())
        .expect("the request is written");
    let output = child.wait_with_output().expect("the driver ends");
    assert!(
        output.status.success(),
        "the SDK driver failed on {} {}: {}",
        request["provider"],
        request["op"],
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the driver answers JSON")
}

/// How a test makes a copy that must be refused.
#[derive(Clone, Copy)]
enum Tamper {
    /// Replace the first occurrence of a text in the body (it must occur).
    Body(&'static str, &'static str),
    /// Give a header another value.
    Header(&'static str, &'static str),
    /// Change the first character of a form field's value.
    FormField(&'static str),
}

struct Case {
    provider: &'static str,
    /// The endpoint's `secrets` entry, which the SDK is given as it is.
    secret: &'static str,
    url: Option<&'static str>,
    /// `None`: the catalogue's example body for the provider.
    body: Option<&'static str>,
    event_type: &'static str,
    /// The SDK can produce a signed request too.
    sdk_signs: bool,
    tamper: Tamper,
}

impl Case {
    fn provider(&self) -> Box<dyn Provider> {
        let spec = ProviderSpec {
            secrets: vec![self.secret.to_owned()],
            url: self.url.map(str::to_owned),
            ..ProviderSpec::default()
        };
        providers::build(self.provider, &spec).expect("the provider builds")
    }

    fn body(&self, provider: &dyn Provider) -> Vec<u8> {
        match self.body {
            Some(body) => body.as_bytes().to_vec(),
            None => client::sample_body(provider, ID),
        }
    }

    fn sdk_verifies(
        &self,
        python: &str,
        delivery: &SignedDelivery,
        now: i64,
    ) -> Result<(), String> {
        let answer = call_sdk(
            python,
            &json!({
                "op": "verify",
                "provider": self.provider,
                "secret": self.secret,
                "url": self.url,
                "headers": delivery.headers,
                "body": String::from_utf8(delivery.body.clone()).expect("a text body"),
                "query": delivery.query,
                "now": now,
                "tolerance": SDK_TOLERANCE_SECS,
            }),
        );
        match answer["ok"].as_bool() {
            Some(true) => Ok(()),
            Some(false) => Err(answer["why"].as_str().unwrap_or_default().to_owned()),
            None => panic!("the driver answered {answer}"),
        }
    }

    /// The SDK's own signed request for `body` (in its `variant` where it
    /// signs several: HubSpot's v1, v2, v3).
    fn sdk_sign(
        &self,
        python: &str,
        body: &[u8],
        now: i64,
        variant: Option<&str>,
    ) -> SignedDelivery {
        let answer = call_sdk(
            python,
            &json!({
                "op": "sign",
                "provider": self.provider,
                "secret": self.secret,
                "url": self.url,
                "id": ID,
                "timestamp": now,
                "body": std::str::from_utf8(body).expect("a text body"),
                "variant": variant,
            }),
        );
        SignedDelivery {
            headers: serde_json::from_value(answer["headers"].clone()).expect("header pairs"),
            body: answer["body"].as_str().expect("a body").as_bytes().to_vec(),
            query: answer["query"].as_str().unwrap_or_default().to_owned(),
        }
    }

    fn tampered(&self, delivery: &SignedDelivery) -> SignedDelivery {
        let mut copy = delivery.clone();
        match self.tamper {
            Tamper::Body(from, to) => {
                let body = String::from_utf8(copy.body).expect("a text body");
                assert!(body.contains(from), "{from:?} is not in the body: {body}");
                copy.body = body.replacen(from, to, 1).into_bytes();
            }
            Tamper::Header(name, value) => {
                let header = copy
                    .headers
                    .iter_mut()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .unwrap_or_else(|| panic!("no {name} header to tamper with"));
                assert_ne!(header.1, value);
                header.1 = value.to_owned();
            }
            Tamper::FormField(field) => {
                let mut changed = false;
                let pairs: Vec<(String, String)> = form_urlencoded::parse(&copy.body)
                    .map(|(name, value)| {
                        let mut value = value.into_owned();
                        if name == field && !changed {
                            let first = if value.starts_with('A') { "B" } else { "A" };
                            value.replace_range(..1, first);
                            changed = true;
                        }
                        (name.into_owned(), value)
                    })
                    .collect();
                assert!(changed, "no {field} field to tamper with");
                copy.body = form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(pairs)
                    .finish()
                    .into_bytes();
            }
        }
        copy
    }
}

/// Our verifier on `delivery` at `now`, and then the keys it reads from it.
fn we_verify(
    provider: &dyn Provider,
    delivery: &SignedDelivery,
    now: i64,
) -> Result<(), Rejection> {
    let mut headers = HeaderMap::new();
    for (name, value) in &delivery.headers {
        headers.append(
            HeaderName::try_from(name.as_str()).expect("a header name"),
            HeaderValue::try_from(value.as_str()).expect("a header value"),
        );
    }
    let request = SignedRequest {
        headers: &headers,
        body: &delivery.body,
        method: "POST",
        query: &delivery.query,
    };
    let at = chrono::DateTime::from_timestamp(now, 0).expect("a valid instant");
    provider.verify(&request, at)?;
    let keys = client::identity(provider, delivery)?;
    assert!(!keys.is_empty(), "a verified delivery carries a key");
    Ok(())
}

/// Both directions for `case` (the second where the SDK signs).
fn agree(case: &Case) {
    let Some(python) = python() else { return };
    let provider = case.provider();
    let name = case.provider;
    let now = chrono::Utc::now().timestamp();
    let body = case.body(provider.as_ref());

    let ours = client::sign(
        provider.as_ref(),
        ID,
        now,
        Some(case.event_type),
        body.clone(),
    )
    .expect("we sign");
    we_verify(provider.as_ref(), &ours, now).expect("we accept what we signed");
    if let Err(why) = case.sdk_verifies(&python, &ours, now) {
        panic!("the {name} SDK refuses what we signed: {why}");
    }
    let tampered = case.tampered(&ours);
    assert!(
        case.sdk_verifies(&python, &tampered, now).is_err(),
        "the {name} SDK accepts a tampered copy of what we signed"
    );
    assert!(
        we_verify(provider.as_ref(), &tampered, now).is_err(),
        "we accept a tampered copy of what we signed"
    );

    if case.sdk_signs {
        we_accept_what_the_sdk_signs(&python, case, None);
    }
}

/// What the SDK signs (in `variant`) passes our verifier, and a tampered
/// copy is refused by both.
fn we_accept_what_the_sdk_signs(python: &str, case: &Case, variant: Option<&str>) {
    let provider = case.provider();
    let name = case.provider;
    let now = chrono::Utc::now().timestamp();
    let body = case.body(provider.as_ref());
    let theirs = case.sdk_sign(python, &body, now, variant);
    if let Err(rejection) = we_verify(provider.as_ref(), &theirs, now) {
        panic!("we refuse what the {name} SDK signed: {rejection}");
    }
    if let Err(why) = case.sdk_verifies(python, &theirs, now) {
        panic!("the {name} SDK refuses what it signed itself: {why}");
    }
    let tampered = case.tampered(&theirs);
    assert!(
        we_verify(provider.as_ref(), &tampered, now).is_err(),
        "we accept a tampered copy of what the {name} SDK signed"
    );
    assert!(
        case.sdk_verifies(python, &tampered, now).is_err(),
        "the {name} SDK accepts a tampered copy of what it signed"
    );
}

// stripe==16.1.0: stripe.Webhook.construct_event and
// WebhookSignature.generate_signature_header.
const STRIPE: Case = Case {
    provider: "stripe",
    secret: "whsec_interop5Jq0c8Yh3Tn2Wm7Kx1Rb4Vd9",
    url: None,
    body: Some(
        r#"{"id":"evt_interop_0001","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent","amount":4200,"amount_received":4200,"currency":"eur","status":"succeeded"}}}"#,
    ),
    event_type: "payment_intent.succeeded",
    sdk_signs: true,
    tamper: Tamper::Body("4200", "4201"),
};

#[test]
fn the_stripe_sdk_and_the_receiver_accept_each_others_signatures() {
    agree(&STRIPE);
}

// standardwebhooks==1.1.0: Webhook.verify and Webhook.sign.
#[test]
fn the_standard_webhooks_sdk_and_the_receiver_accept_each_others_signatures() {
    agree(&Case {
        provider: "standard-webhooks",
        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        url: None,
        body: Some(
            r#"{"type":"payment.succeeded","data":{"id":"pay_1","amount":4200,"currency":"EUR"}}"#,
        ),
        event_type: "payment.succeeded",
        sdk_signs: true,
        tamper: Tamper::Body("4200", "4201"),
    });
}

// svix==2.9.1 (Clerk's webhooks are Svix's): svix.webhooks.Webhook.verify
// reads the svix- headers.
#[test]
fn the_svix_sdk_and_the_receiver_accept_each_others_clerk_signatures() {
    agree(&Case {
        provider: "clerk",
        secret: "whsec_c2VjcmV0LW51bWJlci10d28tMTIzNDU2Nzg=",
        url: None,
        body: Some(r#"{"type":"user.created","object":"event","data":{"id":"user_4200"}}"#),
        event_type: "user.created",
        sdk_signs: true,
        tamper: Tamper::Body("4200", "4201"),
    });
}

// slack_sdk==3.48.0: SignatureVerifier (its Clock injected) and
// generate_signature.
#[test]
fn the_slack_sdk_and_the_receiver_accept_each_others_signatures() {
    agree(&Case {
        provider: "slack",
        secret: "8f742231b10e8888abcd99yyyzzz85a5",
        url: None,
        body: Some(
            r#"{"token":"z26uFbvR1xHJEdHE1OQiO6t8","team_id":"T061EG9RZ","api_app_id":"A0FFV41KK","event":{"type":"app_mention","text":"order 4200 shipped"},"type":"event_callback","event_id":"Ev0PV52K21","event_time":1700000000}"#,
        ),
        event_type: "app_mention",
        sdk_signs: true,
        tamper: Tamper::Body("4200", "4201"),
    });
}

// paddle-python-sdk==1.16.1: Notifications.Verifier; its
// PaddleSignature.calculate_hmac signs (the driver writes the header).
#[test]
fn the_paddle_sdk_and_the_receiver_accept_each_others_signatures() {
    agree(&Case {
        provider: "paddle",
        secret: "pdl_ntfset_01interop_Wm7Kx1Rb4Vd9Jq0c8Yh3Tn2",
        url: None,
        body: Some(
            r#"{"event_id":"evt_01interop0001","event_type":"transaction.completed","occurred_at":"2024-04-12T10:18:49.621022Z","notification_id":"ntf_01interop","data":{"id":"txn_01interop","currency_code":"EUR","details":{"totals":{"total":"4200"}}}}"#,
        ),
        event_type: "transaction.completed",
        sdk_signs: true,
        tamper: Tamper::Body("4200", "4201"),
    });
}

// squareup==46.0.0.20260916: square.utils.webhooks_helper.verify_signature.
// The SDK has no signing function.
const SQUARE: Case = Case {
    provider: "square",
    secret: "asdf1234-interop-signature-key",
    url: Some("https://example.com/webhooks/square"),
    body: Some(
        r#"{"merchant_id":"6SSW7HV8K2ST5","type":"payment.updated","event_id":"13b867cf-db3d-4b1c-90b6-2f32a9d78124","created_at":"2024-04-12T10:18:49Z","data":{"type":"payment","id":"KkAkhdMsgzn59SM8A89WgKwekxLZY","object":{"payment":{"id":"KkAkhdMsgzn59SM8A89WgKwekxLZY","amount_money":{"amount":4200,"currency":"USD"},"status":"COMPLETED"}}}}"#,
    ),
    event_type: "payment.updated",
    sdk_signs: false,
    tamper: Tamper::Body("4200", "4201"),
};

#[test]
fn the_square_sdk_accepts_what_the_receiver_signs() {
    agree(&SQUARE);
}

// Adyen==16.0.0: Adyen.util.is_valid_hmac_notification (asked about every
// item) and generate_notification_sig. Two items: the batch is signed per item.
const ADYEN: Case = Case {
    provider: "adyen",
    secret: "44782def547aaa06c910c43932b1eb0c71fc68d9d0c057550c48ec2acf6ba056",
    url: None,
    body: Some(
        r#"{"live":"false","notificationItems":[{"NotificationRequestItem":{"additionalData":{"hmacSignature":""},"amount":{"currency":"EUR","value":4200},"eventCode":"AUTHORISATION","eventDate":"2024-04-12T10:18:49+02:00","merchantAccountCode":"InteropMerchant","merchantReference":"order_1001","pspReference":"QFQTPCQ8HXSKGK82","reason":"","success":"true"}},{"NotificationRequestItem":{"additionalData":{"hmacSignature":""},"amount":{"currency":"EUR","value":1000},"eventCode":"CAPTURE","eventDate":"2024-04-12T10:20:00+02:00","merchantAccountCode":"InteropMerchant","merchantReference":"order_1002","originalReference":"QFQTPCQ8HXSKGK82","pspReference":"V4HZ4RBFJGXXGN82","reason":"","success":"true"}}]}"#,
    ),
    event_type: "AUTHORISATION",
    sdk_signs: true,
    tamper: Tamper::Body("4200", "4201"),
};

#[test]
fn the_adyen_sdk_and_the_receiver_accept_each_others_signatures() {
    agree(&ADYEN);
}

// razorpay==2.0.1: razorpay.Utility().verify_webhook_signature. The SDK has
// no signing function.
#[test]
fn the_razorpay_sdk_accepts_what_the_receiver_signs() {
    agree(&Case {
        provider: "razorpay",
        secret: "interop_webhook_secret_42",
        url: None,
        body: Some(
            r#"{"entity":"event","account_id":"acc_BFQ7uQEaa7j2z7","event":"payment.captured","contains":["payment"],"payload":{"payment":{"entity":{"id":"pay_DESlfW9H8K9uqM","amount":4200,"currency":"INR","status":"captured"}}},"created_at":1700000000}"#,
        ),
        event_type: "payment.captured",
        sdk_signs: false,
        tamper: Tamper::Body("4200", "4201"),
    });
}

// gocardless_pro==3.22.0: gocardless_pro.webhooks.parse. The SDK has no
// signing function.
#[test]
fn the_gocardless_sdk_accepts_what_the_receiver_signs() {
    agree(&Case {
        provider: "gocardless",
        secret: "interop-gocardless-secret",
        url: None,
        body: Some(
            r#"{"events":[{"id":"EV0000INTEROP1","created_at":"2024-04-12T10:18:49.000Z","resource_type":"payments","action":"confirmed","links":{"payment":"PM0000INTEROP"},"details":{"origin":"gocardless","cause":"payment_confirmed","description":"4200 collected"}}],"meta":{"webhook_id":"WB0000INTEROP"}}"#,
        ),
        event_type: "payments.confirmed",
        sdk_signs: false,
        tamper: Tamper::Body("4200", "4201"),
    });
}

// braintree==4.48.0: webhook_notification.parse, and
// webhook_testing.sample_notification (which makes its own payload).
const BRAINTREE: Case = Case {
    provider: "braintree",
    secret: "interop_public_key:interop_private_key_0123456789",
    url: None,
    body: None,
    event_type: "subscription_charged_successfully",
    sdk_signs: true,
    tamper: Tamper::FormField("bt_payload"),
};

#[test]
fn the_braintree_sdk_and_the_receiver_accept_each_others_signatures() {
    agree(&BRAINTREE);
}

// mercadopago==3.6.0: mercadopago.webhook.validator.WebhookSignatureValidator
// (its clock injected). The SDK has no signing function. The body is not
// signed: the tampered copy changes the signed x-request-id.
#[test]
fn the_mercadopago_sdk_accepts_what_the_receiver_signs() {
    agree(&Case {
        provider: "mercadopago",
        secret: "interop-mercadopago-secret",
        url: None,
        body: Some(
            r#"{"id":12345678901,"live_mode":true,"type":"payment","date_created":"2024-04-12T10:18:49.000-04:00","user_id":44444,"api_version":"v1","action":"payment.updated","data":{"id":"123456789"}}"#,
        ),
        event_type: "payment.updated",
        sdk_signs: false,
        tamper: Tamper::Header("x-request-id", "bb56a2f1-6aae-46ac-982e-9dcd3581d08e"),
    });
}

/// The interop endpoints: one per provider whose SDK-signed delivery goes
/// through the real receiver.
fn sdk_endpoints(builder: crate::helpers::TestAppBuilder) -> crate::helpers::TestAppBuilder {
    let mut toml = String::new();
    for case in [&STRIPE, &ADYEN, &BRAINTREE] {
        toml.push_str(&format!(
            "[endpoints.sdk-{0}]\nprovider = {0:?}\nsecrets = [{1:?}]\n",
            case.provider, case.secret
        ));
    }
    builder.endpoints_toml(&toml)
}

/// A delivery the SDK signed, posted to the receiver: processed once (with
/// the provider's own acknowledgement where it demands one), replayed when
/// posted again, and a tampered copy refused with the provider's status.
async fn sdk_delivery_round_trip(app: &TestApp, python: &str, case: &Case) {
    let provider = case.provider();
    let endpoint = format!("sdk-{}", case.provider);
    let body = case.body(provider.as_ref());
    let delivery = case.sdk_sign(python, &body, chrono::Utc::now().timestamp(), None);
    let keys = client::identity(provider.as_ref(), &delivery).expect("the keys");

    let endpoint = endpoint.as_str();
    let post = |delivery: SignedDelivery| async move {
        app.post_signed(endpoint, &delivery.headers, &delivery.query, delivery.body)
            .await
    };

    let tampered = post(case.tampered(&delivery)).await;
    let status = provider.invalid_signature_status().unwrap_or(401);
    crate::helpers::problem(tampered, status, "invalid-signature").await;
    assert_eq!(app.count("deliveries").await, 0);

    let first = post(delivery.clone()).await;
    let status = first.status();
    assert!(first.headers().get("idempotent-replayed").is_none());
    let text = first.text().await.expect("a body");
    assert_eq!(status, 200, "{}: {text}", case.provider);
    match provider.acknowledgement() {
        Some(ack) => assert_eq!(text, ack),
        None => {
            let answer: Value = serde_json::from_str(&text).expect("a JSON answer");
            assert_eq!(answer["status"], "processed", "{text}");
        }
    }
    let again = post(delivery.clone()).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(app.count("deliveries").await, keys.len() as i64);
}

crate::both_backends_with! { sdk_endpoints;
    async fn a_delivery_the_stripe_sdk_signed_is_processed_once(app) {
        let Some(python) = python() else { return };
        sdk_delivery_round_trip(app, &python, &STRIPE).await;
    }
}

crate::both_backends_with! { sdk_endpoints;
    async fn a_batch_the_adyen_sdk_signed_is_processed_once_and_accepted(app) {
        let Some(python) = python() else { return };
        sdk_delivery_round_trip(app, &python, &ADYEN).await;
    }
}

crate::both_backends_with! { sdk_endpoints;
    async fn a_notification_the_braintree_sdk_made_is_processed_once(app) {
        let Some(python) = python() else { return };
        sdk_delivery_round_trip(app, &python, &BRAINTREE).await;
    }
}

// twilio==9.13.0: RequestValidator.validate and compute_signature, for a
// form (the parameters sorted into the signature) and for a JSON body
// (signed through bodySHA256 in the URL, compute_hash).
const TWILIO_URL: &str = "https://example.com/webhooks/twilio";

#[test]
fn the_twilio_sdk_and_the_receiver_accept_each_others_form_signatures() {
    agree(&Case {
        provider: "twilio",
        secret: "12345678901234567890123456789012",
        url: Some(TWILIO_URL),
        body: Some(
            "AccountSid=AC0000000000000000000000000000000&MessageSid=SM0000000000000000000000000000000&MessageStatus=delivered&To=%2B15558675310&From=%2B15017122661&Body=Order+4200+shipped&Body=twice",
        ),
        event_type: "delivered",
        sdk_signs: true,
        tamper: Tamper::Body("4200", "4201"),
    });
}

#[test]
fn the_twilio_sdk_and_the_receiver_accept_each_others_json_signatures() {
    agree(&Case {
        provider: "twilio",
        secret: "12345678901234567890123456789012",
        url: Some(TWILIO_URL),
        body: Some(
            r#"{"AccountSid":"AC0000000000000000000000000000000","Level":"ERROR","Payload":"order 4200"}"#,
        ),
        event_type: "ERROR",
        sdk_signs: true,
        tamper: Tamper::Body("4200", "4201"),
    });
}

// hubspot-api-client==12.0.0: hubspot.utils.signature.Signature.is_valid
// and get_signature. The SDK reads the wall clock for v3 (5 minutes).
const HUBSPOT: Case = Case {
    provider: "hubspot",
    secret: "a1b2c3d4-interop-client-secret",
    url: Some("https://example.com/webhooks/hubspot"),
    body: Some(
        r#"[{"eventId":1000001,"subscriptionId":25,"portalId":33,"appId":1160452,"occurredAt":1700000000000,"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":4200,"propertyName":"email","propertyValue":"a@example.com"}]"#,
    ),
    event_type: "contact.propertyChange",
    sdk_signs: true,
    tamper: Tamper::Body("4200", "4201"),
};

#[test]
fn the_hubspot_sdk_and_the_receiver_accept_each_others_v3_signatures() {
    agree(&HUBSPOT);
}

#[test]
fn the_receiver_accepts_the_hubspot_sdks_v1_and_v2_signatures() {
    let Some(python) = python() else { return };
    for variant in ["v1", "v2"] {
        we_accept_what_the_sdk_signs(&python, &HUBSPOT, Some(variant));
    }
}

// coinbase-commerce==1.0.1: Webhook.construct_event; the SDK has no public
// signer, so the driver signs with its private WebhookSignature._compute_signature.
#[test]
fn the_coinbase_commerce_sdk_and_the_receiver_accept_each_others_signatures() {
    agree(&Case {
        provider: "coinbase-commerce",
        secret: "interop-coinbase-shared-secret",
        url: None,
        body: Some(
            r#"{"id":1,"scheduled_for":"2024-04-12T10:18:49Z","attempt_number":1,"event":{"id":"24934862-d980-46cb-9402-43c81b0cdba6","resource":"event","type":"charge:confirmed","api_version":"2018-03-22","created_at":"2024-04-12T10:18:49Z","data":{"code":"66BEOV2A","pricing":{"local":{"amount":"42.00","currency":"USD"}}}}}"#,
        ),
        event_type: "charge:confirmed",
        sdk_signs: true,
        tamper: Tamper::Body("42.00", "42.01"),
    });
}

// discord-interactions==0.4.0: verify_key. Discord's private key signs, which
// neither side holds: the driver signs with PyNaCl (the SDK's dependency)
// under a fixed seed, bytes 0..32, whose public key this is.
#[test]
fn the_discord_sdk_and_the_receiver_accept_the_same_ed25519_signatures() {
    let Some(python) = python() else { return };
    let discord = Case {
        provider: "discord",
        secret: "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8",
        url: None,
        body: Some(
            r#"{"type":2,"id":"1234567890123454200","application_id":"11","token":"t","data":{"name":"order","options":[{"name":"id","value":4200}]}}"#,
        ),
        event_type: "2",
        sdk_signs: true,
        tamper: Tamper::Body("4200", "4201"),
    };
    we_accept_what_the_sdk_signs(&python, &discord, None);
}
