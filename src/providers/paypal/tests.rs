//! Verification against PayPal's published transmission and the test key.

use super::source::tests::{http, serve_once};
use super::*;
use crate::providers::test_support::{
    assert_tolerated_either_way, delivery_id_for, event_type_for, headers, malformed_in, pairs,
    verify_request,
};
use async_trait::async_trait;
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

// PayPal's sandbox transmission in paypal/PayPal-node-SDK test/notification.js
// (the same values are in paypal/PayPal-Python-SDK
// test/unit_tests/notifications_test.py), signed by the certificate that the
// node SDK's test/mocks/notification.js serves for CERT_URL. Checked
// independently:
//   python3 -c "import zlib; print(zlib.crc32(open('tests/data/paypal/sandbox-2015-body.json','rb').read()))"
//     → 2771810304
//   printf '%s' 'dfb3be50-fd74-11e4-8bf3-77339302725b|2015-05-18T15:45:13Z|4JH86294D6297924G|2771810304' > msg
//   echo "$SIGNATURE" | base64 -d > sig
//   openssl x509 -in tests/data/paypal/sandbox-2015-cert.pem -pubkey -noout > pub.pem
//   openssl dgst -sha256 -verify pub.pem -signature sig msg   → Verified OK
const BODY: &[u8] = include_bytes!("../../../tests/data/paypal/sandbox-2015-body.json");
const BODY_CRC32: u32 = 2_771_810_304;
const TRANSMISSION_ID: &str = "dfb3be50-fd74-11e4-8bf3-77339302725b";
const TIME: &str = "2015-05-18T15:45:13Z";
const TIMESTAMP: i64 = 1_431_963_913;
const WEBHOOK_ID: &str = "4JH86294D6297924G";
const CERT_URL: &str =
    "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77";
const SIGNATURE: &str = "thy4/U002quzxFavHPwbfJGcc46E8rc5jzgyeafWm5mICTBdY/8rl7WJpn8JA0GKA+oDTPsSruqusw+XXg5RLAP7ip53Euh9Xu3UbUhQFX7UgwzE2FeYoY6lyRMiiiQLzy9BvHfIzNIVhPad4KnC339dr6y2l+mN8ALgI4GCdIh3/SoJO5wE64Bh/ueWtt8EVuvsvXfda2Le5a2TrOI9vLEzsm9GS79hAR/5oLexNz8UiZr045Mr5ObroH4w4oNfmkTaDk9Rj0G19uvISs5QzgmBpauKr7Nw++JI0pr/v5mFctQkoWJSGfBGzPRXawrvIIVHQ9Wer48GR2g9ZiApWg==";
const SANDBOX_CERT: &[u8] = include_bytes!("../../../tests/data/paypal/sandbox-2015-cert.pem");

// The published test key and its certificate (valid 2020-01-01 to
// 2040-01-01), generated with the openssl CLI: see tests/data/paypal/README.md.
const TEST_KEY: &str = include_str!("../../../tests/data/paypal/test-key.pem");
const TEST_CERT: &[u8] = include_bytes!("../../../tests/data/paypal/test-cert.pem");
const OTHER_CN_CERT: &[u8] = include_bytes!("../../../tests/data/paypal/test-cert-other-cn.pem");
const TEST_WEBHOOK_ID: &str = "8PT597110X687430LKGECATA";
const TEST_BODY: &[u8] = br#"{"id":"WH-TEST-1","event_type":"PAYMENT.CAPTURE.COMPLETED"}"#;
const TEST_CERT_URL: &str = "https://api-m.paypal.com/v1/notifications/certs/CERT-test-1";

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/paypal")
        .join(name)
}

/// Serves fixed certificates by URL and counts the fetches.
#[derive(Debug, Default)]
struct Fixed {
    pems: HashMap<String, Vec<u8>>,
    fetches: Mutex<Vec<String>>,
}

impl Fixed {
    fn serving(url: &str, pem: &[u8]) -> Arc<Fixed> {
        Arc::new(Fixed {
            pems: HashMap::from([(url.to_owned(), pem.to_vec())]),
            ..Fixed::default()
        })
    }

    fn fetches(&self) -> usize {
        self.fetches.lock().unwrap().len()
    }
}

#[async_trait]
impl CertificateSource for Fixed {
    async fn fetch(&self, url: &CertUrl) -> Result<Vec<u8>, FetchFailed> {
        self.fetches.lock().unwrap().push(url.as_str().to_owned());
        self.pems.get(url.as_str()).cloned().ok_or(FetchFailed)
    }
}

fn pinned(webhook_id: &str, cert: &str) -> PayPal {
    PayPal::with_source(
        webhook_id,
        Some(&data(cert)),
        None,
        Arc::new(Fixed::default()),
    )
    .unwrap()
}

fn fetching(source: Arc<Fixed>) -> PayPal {
    PayPal::with_source(WEBHOOK_ID, None, None, source).unwrap()
}

/// The published transmission's headers, with `change` applied.
fn published(change: impl FnOnce(&mut Vec<(&'static str, String)>)) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("paypal-transmission-id", TRANSMISSION_ID.to_owned()),
        ("paypal-transmission-time", TIME.to_owned()),
        ("paypal-transmission-sig", SIGNATURE.to_owned()),
        ("paypal-cert-url", CERT_URL.to_owned()),
        ("paypal-auth-algo", "SHA256withRSA".to_owned()),
    ];
    change(&mut headers);
    headers
}

fn set(headers: &mut [(&'static str, String)], name: &str, value: &str) {
    for (n, v) in headers.iter_mut() {
        if *n == name {
            *v = value.to_owned();
        }
    }
}

fn verify_at(
    p: &PayPal,
    headers: &[(&'static str, String)],
    body: &[u8],
    now: i64,
) -> Result<Verified, Rejection> {
    let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    verify_request(p, &pairs, body, now)
}

async fn prepare(p: &PayPal, pairs: &[(&str, &str)]) -> Result<(), Rejection> {
    let headers = headers(pairs);
    match p.prepare(&headers) {
        Some(preparing) => preparing.await,
        None => Ok(()),
    }
}

/// The test key's headers for TEST_BODY at `timestamp`.
fn signed_by_test_key(timestamp: i64) -> Vec<(String, String)> {
    let input = SignInput {
        delivery_id: "WH-TEST-1",
        timestamp,
        body: TEST_BODY,
        event_type: None,
        signing_key: None,
    };
    sign_with_key(TEST_KEY, TEST_CERT_URL, TEST_WEBHOOK_ID, &input).unwrap()
}

const OK: Result<Verified, Rejection> = Ok(Verified { secret_index: 0 });

#[test]
fn the_crc32_is_the_unsigned_decimal_of_the_body_s_crc32() {
    assert_eq!(crc32fast::hash(BODY), BODY_CRC32);
    assert_eq!(
        signed_message(TRANSMISSION_ID, TIME, WEBHOOK_ID, BODY),
        "dfb3be50-fd74-11e4-8bf3-77339302725b|2015-05-18T15:45:13Z|4JH86294D6297924G|2771810304"
    );
}

#[test]
fn paypal_s_published_transmission_verifies_at_its_own_time_with_the_pinned_certificate() {
    let p = pinned(WEBHOOK_ID, "sandbox-2015-cert.pem");
    assert_eq!(verify_at(&p, &published(|_| {}), BODY, TIMESTAMP), OK);
}

#[tokio::test]
async fn paypal_s_published_transmission_verifies_with_the_fetched_certificate() {
    let source = Fixed::serving(CERT_URL, SANDBOX_CERT);
    let p = fetching(source.clone());
    let headers = published(|_| {});
    let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    // Before `prepare`, verification has no certificate and says so.
    assert_eq!(
        verify_at(&p, &headers, BODY, TIMESTAMP),
        Err(Rejection::CertificateUnavailable)
    );
    prepare(&p, &pairs).await.unwrap();
    prepare(&p, &pairs).await.unwrap();
    assert_eq!(source.fetches(), 1, "the certificate is cached by URL");
    assert_eq!(verify_at(&p, &headers, BODY, TIMESTAMP), OK);
}

#[test]
fn a_tampered_body_is_refused() {
    let p = pinned(WEBHOOK_ID, "sandbox-2015-cert.pem");
    let mut body = BODY.to_vec();
    let last = body.len() - 3;
    body[last] = b' ';
    assert_eq!(
        verify_at(&p, &published(|_| {}), &body, TIMESTAMP),
        Err(Rejection::InvalidSignature)
    );
}

#[test]
fn each_tampered_signed_header_is_refused() {
    let p = pinned(WEBHOOK_ID, "sandbox-2015-cert.pem");
    let tampered = [
        (
            "paypal-transmission-id",
            "dfb3be50-fd74-11e4-8bf3-77339302725c",
        ),
        // The same instant written differently is a different message.
        ("paypal-transmission-time", "2015-05-18T15:45:13+00:00"),
        ("paypal-transmission-time", "2015-05-18T15:45:14Z"),
    ];
    for (name, value) in tampered {
        let headers = published(|h| set(h, name, value));
        assert_eq!(
            verify_at(&p, &headers, BODY, TIMESTAMP),
            Err(Rejection::InvalidSignature),
            "{name}: {value}"
        );
    }
}

#[test]
fn a_tampered_signature_is_refused() {
    let p = pinned(WEBHOOK_ID, "sandbox-2015-cert.pem");
    let mut signature = STANDARD.decode(SIGNATURE).unwrap();
    for index in [0, 128, 255] {
        signature[index] ^= 0x01;
        let encoded = STANDARD.encode(&signature);
        let headers = published(|h| set(h, "paypal-transmission-sig", &encoded));
        assert_eq!(
            verify_at(&p, &headers, BODY, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
        signature[index] ^= 0x01;
    }
    // A prefix, or the signature with a byte more, is not the signature.
    for wrong_length in [
        &signature[..255],
        &[signature.as_slice(), &[0]].concat()[..],
    ] {
        let encoded = STANDARD.encode(wrong_length);
        let headers = published(|h| set(h, "paypal-transmission-sig", &encoded));
        assert_eq!(
            verify_at(&p, &headers, BODY, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }
}

#[test]
fn an_oversized_or_malformed_signature_is_refused_before_decoding() {
    let p = pinned(WEBHOOK_ID, "sandbox-2015-cert.pem");
    let oversized = "A".repeat(1028);
    for bad in [oversized.as_str(), "not base64!", "thy4/U002", "thy4 U002"] {
        let headers = published(|h| set(h, "paypal-transmission-sig", bad));
        let result = verify_at(&p, &headers, BODY, TIMESTAMP);
        assert!(
            malformed_in(&result, "paypal-transmission-sig"),
            "{bad}: {result:?}"
        );
    }
    // Empty is valid base64 for no bytes: not a signature of the key's length.
    let headers = published(|h| set(h, "paypal-transmission-sig", ""));
    assert_eq!(
        verify_at(&p, &headers, BODY, TIMESTAMP),
        Err(Rejection::InvalidSignature)
    );
}

#[test]
fn the_wrong_webhook_id_is_refused() {
    let p = pinned("4JH86294D6297924H", "sandbox-2015-cert.pem");
    assert_eq!(
        verify_at(&p, &published(|_| {}), BODY, TIMESTAMP),
        Err(Rejection::InvalidSignature)
    );
}

#[test]
fn an_algorithm_other_than_sha256_with_rsa_is_refused() {
    let p = pinned(WEBHOOK_ID, "sandbox-2015-cert.pem");
    for algo in [
        "SHA1withRSA",
        "sha256WithRSAEncryption",
        "sha256",
        "SHA256withECDSA",
        "",
    ] {
        let headers = published(|h| set(h, "paypal-auth-algo", algo));
        assert!(
            malformed_in(
                &verify_at(&p, &headers, BODY, TIMESTAMP),
                "paypal-auth-algo"
            ),
            "{algo}"
        );
    }
}

#[test]
fn each_missing_header_is_named() {
    let p = fetching(Arc::new(Fixed::default()));
    for name in [
        "paypal-transmission-id",
        "paypal-transmission-time",
        "paypal-transmission-sig",
        "paypal-cert-url",
        "paypal-auth-algo",
    ] {
        let headers = published(|h| h.retain(|(n, _)| *n != name));
        assert_eq!(
            verify_at(&p, &headers, BODY, TIMESTAMP),
            Err(Rejection::MissingHeader(name))
        );
    }
}

#[test]
fn a_header_sent_twice_or_a_malformed_time_is_refused() {
    let p = pinned(WEBHOOK_ID, "sandbox-2015-cert.pem");
    let twice = published(|h| h.push(("paypal-transmission-id", "other".into())));
    assert!(malformed_in(
        &verify_at(&p, &twice, BODY, TIMESTAMP),
        "paypal-transmission-id"
    ));
    for time in ["1431963913", "2015-05-18 15:45:13", "yesterday", ""] {
        let headers = published(|h| set(h, "paypal-transmission-time", time));
        assert!(
            malformed_in(
                &verify_at(&p, &headers, BODY, TIMESTAMP),
                "paypal-transmission-time"
            ),
            "{time}"
        );
    }
    let long_id = "a".repeat(256);
    let headers = published(|h| set(h, "paypal-transmission-id", &long_id));
    assert!(malformed_in(
        &verify_at(&p, &headers, BODY, TIMESTAMP),
        "paypal-transmission-id"
    ));
}

#[test]
fn the_transmission_time_is_tolerated_five_minutes_either_way() {
    let p = pinned(WEBHOOK_ID, "sandbox-2015-cert.pem");
    let headers = published(|_| {});
    assert_tolerated_either_way(|now| verify_at(&p, &headers, BODY, now), TIMESTAMP, 300);
}

#[test]
fn the_test_key_signs_as_openssl_does() {
    // A second implementation of the same signature, from the test key:
    //   printf '%s' 'openssl-1|2026-12-01T12:00:00Z|8PT597110X687430LKGECATA|2077941293' > msg
    //   openssl dgst -sha256 -sign tests/data/paypal/test-key.pem msg | base64 -w0
    // and 2077941293 is python3 -c "import zlib; print(zlib.crc32(b'<TEST_BODY>'))".
    // PKCS#1 v1.5 is deterministic, so the bytes must match.
    const OPENSSL_SIGNATURE: &str = "DO1Au54r2Ouft4JvjO5gGmvcdZSUd7GXGOsUZ4eR0tTaddXcA+nscwvnzMcJnJAUn9Gvvs6W8R61RGQhz8seyYydBX7qSt+7d8Ocz7WDDJkHmuBzmyhnyHu9wZLY0kg4LHhKkUa+bx68d1wbrXze3Wc+XI9gGYHZelvPPcpt4JSRlZ7JCAfOsGK+kAvuZhPapCFD4QY1m6+cwfSPXOWAy3E3SI2Z748XUFroLj1ENEJzIFcsqWpH9exvLH1QLTaZPxMCe0JtTtqv4vW8rGSSP9ohBzFDvr+AD7O3VrzAdzv5YoX2dRXJFqiBpMDYzHBgI+m9PGb3TXmfyLrVZT36nA==";
    assert_eq!(crc32fast::hash(TEST_BODY), 2_077_941_293);
    let p = pinned(TEST_WEBHOOK_ID, "test-cert.pem");
    let headers = vec![
        ("paypal-transmission-id", "openssl-1".to_owned()),
        (
            "paypal-transmission-time",
            "2026-12-01T12:00:00Z".to_owned(),
        ),
        ("paypal-transmission-sig", OPENSSL_SIGNATURE.to_owned()),
        ("paypal-cert-url", TEST_CERT_URL.to_owned()),
        ("paypal-auth-algo", "SHA256withRSA".to_owned()),
    ];
    assert_eq!(verify_at(&p, &headers, TEST_BODY, 1_796_126_400), OK);
}

#[test]
fn what_sign_with_key_produces_verifies() {
    let p = pinned(TEST_WEBHOOK_ID, "test-cert.pem");
    let signed = signed_by_test_key(1_796_126_400);
    assert_eq!(
        verify_request(&p, &pairs(&signed), TEST_BODY, 1_796_126_400),
        OK
    );
    assert_eq!(signed[1].1, "2026-12-01T12:00:00Z");
    // Reproducible, for fixtures.
    assert_eq!(signed, signed_by_test_key(1_796_126_400));
}

#[test]
fn a_certificate_not_valid_at_the_transmission_time_is_refused() {
    let p = pinned(TEST_WEBHOOK_ID, "test-cert.pem");
    let untrusted = Err(Rejection::UntrustedCertificate(
        "it was not valid at the transmission time",
    ));
    // One second before notBefore, one second after notAfter, each checked
    // at its own time so that only the certificate's validity can refuse it.
    for timestamp in [1_577_836_799, 2_208_988_801] {
        let signed = signed_by_test_key(timestamp);
        assert_eq!(
            verify_request(&p, &pairs(&signed), TEST_BODY, timestamp),
            untrusted
        );
    }
    for timestamp in [1_577_836_800, 2_208_988_800] {
        let signed = signed_by_test_key(timestamp);
        assert_eq!(
            verify_request(&p, &pairs(&signed), TEST_BODY, timestamp),
            OK
        );
    }
}

#[test]
fn the_pinned_certificate_is_used_whatever_the_cert_url_says() {
    let p = pinned(TEST_WEBHOOK_ID, "test-cert.pem");
    let mut signed = signed_by_test_key(1_796_126_400);
    signed[3].1 = "http://evil.example/cert.pem".into();
    assert_eq!(
        verify_request(&p, &pairs(&signed), TEST_BODY, 1_796_126_400),
        OK
    );
}

#[test]
fn the_delivery_id_and_event_type_come_from_the_body() {
    let p = pinned(WEBHOOK_ID, "sandbox-2015-cert.pem");
    let payload: Value = serde_json::from_slice(BODY).unwrap();
    let headers: Vec<(&str, &str)> = Vec::new();
    assert_eq!(
        delivery_id_for(&p, &headers, BODY, &payload).unwrap(),
        "WH-0G2756385H040842W-5Y612302CV158622M"
    );
    assert_eq!(
        event_type_for(&p, &headers, BODY, &payload).as_deref(),
        Some("PAYMENT.SALE.COMPLETED")
    );
    assert_eq!(
        delivery_id_for(&p, &headers, BODY, &json!({"event_type": "X"})),
        Err(Rejection::MissingKey("/id"))
    );
}

#[test]
fn the_receiver_cannot_sign_as_paypal() {
    let p = pinned(WEBHOOK_ID, "sandbox-2015-cert.pem");
    let input = SignInput {
        delivery_id: "WH-1",
        timestamp: TIMESTAMP,
        body: BODY,
        event_type: None,
        signing_key: None,
    };
    assert!(matches!(p.sign(&input), Err(SignError::NoSigningKey)));
    assert_eq!(
        sign_with_key("not a key", TEST_CERT_URL, TEST_WEBHOOK_ID, &input),
        Err(SignWithKeyError::MalformedKey)
    );
}

#[test]
fn configuration_errors_are_caught_at_start_up() {
    let source = || -> Arc<dyn CertificateSource> { Arc::new(Fixed::default()) };
    let build = |id: &str, cert: Option<&str>| {
        PayPal::with_source(id, cert.map(data).as_deref(), None, source())
    };
    for id in ["", "has space", "WH|1", &"A".repeat(101)] {
        assert!(build(id, None).is_err(), "{id}");
    }
    let message = |result: Result<PayPal, ProviderConfigError>| result.unwrap_err().to_string();
    assert!(message(build(WEBHOOK_ID, Some("missing.pem"))).contains("missing.pem"));
    assert!(
        message(build(WEBHOOK_ID, Some("test-key.pem")))
            .ends_with("its PEM block is not a CERTIFICATE")
    );
    assert!(
        message(build(WEBHOOK_ID, Some("test-cert-other-cn.pem")))
            .ends_with("its subject common name does not end with .paypal.com")
    );
    assert!(build(WEBHOOK_ID, Some("test-cert.pem")).is_ok());
}

#[tokio::test]
async fn a_hostile_cert_url_is_refused_without_a_fetch() {
    let source = Arc::new(Fixed::default());
    let p = fetching(source.clone());
    for url in [
        "http://api.paypal.com/v1/notifications/certs/CERT-1",
        "https://api.paypal.com.evil.com/v1/notifications/certs/CERT-1",
        "https://evil.com/api.paypal.com/v1/notifications/certs/CERT-1",
        "https://api.paypal.com@evil.com/v1/notifications/certs/CERT-1",
        "https://api.paypal.com:8443/v1/notifications/certs/CERT-1",
    ] {
        let result = prepare(&p, &[("paypal-cert-url", url)]).await;
        assert!(
            matches!(
                result,
                Err(Rejection::MalformedHeader {
                    header: "paypal-cert-url",
                    ..
                })
            ),
            "{url}"
        );
        let headers = published(|h| set(h, "paypal-cert-url", url));
        assert!(malformed_in(
            &verify_at(&p, &headers, BODY, TIMESTAMP),
            "paypal-cert-url"
        ));
    }
    assert_eq!(source.fetches(), 0);
}

#[tokio::test]
async fn a_failed_fetch_is_unavailable_and_not_cached() {
    let source = Arc::new(Fixed::default());
    let p = fetching(source.clone());
    let pairs = [("paypal-cert-url", CERT_URL)];
    assert_eq!(
        prepare(&p, &pairs).await,
        Err(Rejection::CertificateUnavailable)
    );
    assert_eq!(
        prepare(&p, &pairs).await,
        Err(Rejection::CertificateUnavailable)
    );
    assert_eq!(source.fetches(), 2);
}

#[tokio::test]
async fn a_fetched_certificate_outside_paypal_com_is_refused() {
    let p = fetching(Fixed::serving(CERT_URL, OTHER_CN_CERT));
    assert_eq!(
        prepare(&p, &[("paypal-cert-url", CERT_URL)]).await,
        Err(Rejection::UntrustedCertificate(
            "its subject common name does not end with .paypal.com"
        ))
    );
}

#[tokio::test]
async fn a_certificate_fetched_for_one_url_does_not_serve_another() {
    let source = Fixed::serving(CERT_URL, SANDBOX_CERT);
    let p = fetching(source);
    prepare(&p, &[("paypal-cert-url", CERT_URL)]).await.unwrap();
    let other = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-other";
    let headers = published(|h| set(h, "paypal-cert-url", other));
    assert_eq!(
        verify_at(&p, &headers, BODY, TIMESTAMP),
        Err(Rejection::CertificateUnavailable)
    );
}

#[tokio::test]
async fn the_https_source_fetches_through_a_local_server_end_to_end() {
    let (base, server) = serve_once(http("200 OK", "", TEST_CERT));
    let source = Arc::new(HttpsSource::rebased(&base));
    let p = PayPal::with_source(TEST_WEBHOOK_ID, None, None, source).unwrap();
    let signed = signed_by_test_key(1_796_126_400);
    let pairs = pairs(&signed);
    prepare(&p, &pairs).await.unwrap();
    assert_eq!(
        server.join().unwrap(),
        "GET /v1/notifications/certs/CERT-test-1 HTTP/1.1"
    );
    assert_eq!(verify_request(&p, &pairs, TEST_BODY, 1_796_126_400), OK);
}
