//! Signed request fixtures for every provider, generated with a fixed clock:
//! `idempotent-receiver fixtures --dir tests/fixtures`. The test suite checks
//! that the committed files are exactly what this produces, then replays them
//! through the real HTTP endpoint with its clock set to [`NOW`].
//!
//! The secrets here are test values, published on purpose; never use them.
//! They are no part of the library: this file is the `fixtures` command's,
//! and the tests that replay the fixtures include it with `#[path]`
//! (`tests/api`, whose property tests of the providers use them too).

// Not `expect`: the tests use every item, the command only some.
#![allow(
    dead_code,
    reason = "each includer uses part of it: the command writes, the tests read"
)]

use idempotent_receiver::client;
use idempotent_receiver::providers::{
    self, Description, ProviderSpec, SignError, example_body, example_secret,
};
use serde::{Deserialize, Serialize};

/// The instant the fixtures were signed at (2026-01-01T00:00:00Z).
pub const NOW: i64 = 1_767_225_600;
/// How old a `stale` fixture's timestamp is.
const STALE_BY: i64 = 3600;
/// The public URL fixture endpoints are configured with, for the schemes
/// that sign it.
pub const URL: &str = "https://receiver.example/webhooks/fx";

/// One provider's fixture endpoint: what it is configured with and what it
/// is sent.
pub struct Source {
    pub provider: String,
    pub secret: String,
    pub other_secret: String,
    pub hmac: Option<Description>,
    pub delivery_id: String,
    pub event_type: Option<String>,
    pub body: Vec<u8>,
    /// Whether the scheme signs a timestamp (and so has a `stale` case).
    pub timestamped: bool,
    /// Whether the signature covers the body (and so has a `tampered` case):
    /// a static token does not.
    pub body_signed: bool,
    /// For the providers that sign asymmetrically (Discord, PayPal): the
    /// published test private key that signs, and another for the
    /// `wrong-secret` case; `secret` is then the verifying side's setting.
    pub signing_keys: Option<(&'static str, &'static str)>,
    /// PayPal's webhook id and pinned certificate.
    pub webhook_id: Option<&'static str>,
    pub certificate: Option<&'static str>,
}

impl Source {
    /// The endpoint this fixture is posted to.
    pub fn endpoint(&self) -> String {
        format!("fx-{}", self.provider)
    }

    pub fn spec(&self, secret: &str) -> ProviderSpec {
        ProviderSpec {
            secrets: if secret.is_empty() {
                Vec::new()
            } else {
                vec![secret.to_owned()]
            },
            hmac: self.hmac.clone(),
            url: Some(URL.to_owned()),
            webhook_id: self.webhook_id.map(str::to_owned),
            certificate: self.certificate.map(|c| repository_file(c).into()),
            ..ProviderSpec::default()
        }
    }

    /// A catalogue entry's source, derived from its description alone.
    fn of(description: &Description) -> Source {
        let name = description.name.clone();
        let delivery_id = format!("fx_{}_1", name.replace('-', "_"));
        let event_type = event_type_of(description);
        Source {
            secret: example_secret(description, "fixture"),
            other_secret: example_secret(description, "wrong"),
            hmac: None,
            body: example_body(description, &delivery_id, &event_type),
            event_type: Some(event_type),
            delivery_id,
            timestamped: description.signs_timestamp(),
            body_signed: description.signs_body(),
            signing_keys: None,
            webhook_id: None,
            certificate: None,
            provider: name,
        }
    }
}

/// A file of this repository, by its path from the repository's root.
pub fn repository_file(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// RFC 8032 §7.1 TEST 1 and TEST 2: published ed25519 key pairs (seed,
/// public key).
const ED25519_TEST_1: (&str, &str) = (
    "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
);
const ED25519_TEST_2: &str = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";

/// A type the payments handler books, where the provider has one.
fn event_type_of(description: &Description) -> String {
    if description.event_type_fields.is_some() {
        "payments.confirmed".to_owned()
    } else {
        "payment.succeeded".to_owned()
    }
}

/// The generic scheme's fixture endpoint, described in TOML alone.
const ACME_HMAC: &str = r#"signature_header = "X-Acme-Signature"
prefix = "sha256="
signed_content = "{timestamp}.{body}"
timestamp_header = "X-Acme-Timestamp"
id_pointer = "/id"
event_type_pointer = "/type"
"#;

fn acme_hmac() -> Description {
    toml::from_str(ACME_HMAC).unwrap_or_default()
}

/// Every provider's fixture source: the hand-written schemes', the generic
/// scheme's, then one per catalogue entry.
pub fn sources() -> Vec<Source> {
    let standard = |provider: &str, secret: &str, other: &str| {
        Source {
        provider: provider.to_owned(),
        secret: secret.to_owned(),
        other_secret: other.to_owned(),
        hmac: None,
        delivery_id: format!("msg_fixture_{}_1", provider.replace('-', "_")),
        event_type: None,
        body: br#"{"type":"payment.succeeded","data":{"id":"pay_fx_1","order_id":"order_fx_1","amount":4200,"currency":"EUR"}}"#.to_vec(),
        timestamped: true,
        body_signed: true,
        signing_keys: None,
        webhook_id: None,
        certificate: None,
    }
    };
    let mut sources = vec![
        standard(
            "standard-webhooks",
            "whsec_Zml4dHVyZS1zdGFuZGFyZC13ZWJob29rcy0wMQ==",
            "whsec_d3Jvbmctc2VjcmV0LXN0YW5kYXJkLXdlYmhvb2tz",
        ),
        standard(
            "clerk",
            "whsec_Zml4dHVyZS1jbGVyay13ZWJob29rcy0wMDE=",
            "whsec_d3Jvbmctc2VjcmV0LWNsZXJrLXdlYmhvb2tz",
        ),
        standard(
            "resend",
            "whsec_Zml4dHVyZS1yZXNlbmQtd2ViaG9va3MtMDE=",
            "whsec_d3Jvbmctc2VjcmV0LXJlc2VuZC13ZWJob29r",
        ),
        Source {
            provider: "hmac".into(),
            secret: "fixture-acme-secret".into(),
            other_secret: "wrong-acme-secret".into(),
            hmac: Some(acme_hmac()),
            delivery_id: "acme_evt_1".into(),
            event_type: None,
            body: br#"{"id":"acme_evt_1","type":"invoice.paid"}"#.to_vec(),
            timestamped: true,
            body_signed: true,
            signing_keys: None,
            webhook_id: None,
            certificate: None,
        },
        Source {
            provider: "discord".into(),
            secret: ED25519_TEST_1.1.into(),
            other_secret: ED25519_TEST_1.1.into(),
            hmac: None,
            delivery_id: "787053080478613599".into(),
            event_type: None,
            body: br#"{"id":"787053080478613599","type":2,"data":{"name":"fixture"},"version":1}"#.to_vec(),
            timestamped: true,
            body_signed: true,
            signing_keys: Some((ED25519_TEST_1.0, ED25519_TEST_2)),
            webhook_id: None,
            certificate: None,
        },
        Source {
            provider: "paypal".into(),
            secret: String::new(),
            other_secret: String::new(),
            hmac: None,
            delivery_id: "WH-FIXTURE-PAYPAL-1".into(),
            event_type: None,
            body: br#"{"id":"WH-FIXTURE-PAYPAL-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAP-FX-1","amount":{"value":"42.00","currency_code":"EUR"},"invoice_id":"order_fx_pp"}}"#.to_vec(),
            timestamped: true,
            body_signed: true,
            signing_keys: Some((
                include_str!("../../tests/data/paypal/test-key.pem"),
                include_str!("../../tests/data/paypal/wrong-key.pem"),
            )),
            webhook_id: Some("8PT597110X687430LKGECATA"),
            certificate: Some("tests/data/paypal/test-cert.pem"),
        },
    ];
    sources.extend(providers::entries().iter().map(Source::of));
    sources
}

/// What a fixture should get from the receiver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expect {
    pub status: u16,
    /// The problem `type` suffix, for refusals.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub problem: Option<String>,
}

/// A recorded request, as written to `tests/fixtures/<provider>/<case>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fixture {
    pub provider: String,
    pub endpoint: String,
    pub case: String,
    /// The clock the receiver must use to accept `valid`.
    pub now: i64,
    pub headers: Vec<(String, String)>,
    /// The query string to post with; empty: none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub query: String,
    pub body: String,
    pub expect: Expect,
}

impl Fixture {
    /// The fixed answer body the fixture's provider demands, if any.
    pub fn acknowledgement(&self) -> Option<&'static str> {
        providers::entries()
            .iter()
            .find(|e| e.name == self.provider)
            .and_then(|e| e.acknowledgement.as_deref())
    }
}

/// The valid, tampered, wrong-secret and (where the scheme is timestamped)
/// stale fixtures of one source.
pub fn generate(source: &Source) -> Result<Vec<Fixture>, FixtureError> {
    let provider = |secret: &str| {
        providers::build(&source.provider, &source.spec(secret))
            .map_err(|e| FixtureError::Provider(source.provider.clone(), e.to_string()))
    };
    let good = provider(&source.secret)?;
    let wrong = provider(&source.other_secret)?;
    let sign_as = |p: &dyn providers::Provider, timestamp: i64, key: Option<&str>| {
        client::sign_with_key(
            p,
            &source.delivery_id,
            timestamp,
            source.event_type.as_deref(),
            source.body.clone(),
            key,
        )
        .map_err(FixtureError::Sign)
    };
    let key = source.signing_keys.map(|(key, _)| key);
    let sign = |p: &dyn providers::Provider, timestamp: i64| sign_as(p, timestamp, key);
    let fixture = |case: &str, delivery: client::SignedDelivery, expect: Expect| Fixture {
        provider: source.provider.clone(),
        endpoint: source.endpoint(),
        case: case.to_owned(),
        now: NOW,
        headers: delivery.headers,
        query: delivery.query,
        body: String::from_utf8_lossy(&delivery.body).into_owned(),
        expect,
    };
    let refused = |problem: &str| Expect {
        status: 401,
        problem: Some(problem.to_owned()),
    };
    let valid = sign(good.as_ref(), NOW)?;
    let invalid_status = good.invalid_signature_status().unwrap_or(401);
    let mut fixtures = vec![fixture(
        "valid",
        valid.clone(),
        Expect {
            status: 200,
            problem: None,
        },
    )];
    if source.body_signed {
        let mut tampered = valid.clone();
        tampered.body = tamper(&tampered.body, &source.delivery_id);
        fixtures.push(fixture(
            "tampered",
            tampered,
            Expect {
                status: invalid_status,
                ..refused("invalid-signature")
            },
        ));
    }
    let wrong_signature = match source.signing_keys {
        Some((_, other)) => sign_as(good.as_ref(), NOW, Some(other))?,
        None => sign(wrong.as_ref(), NOW)?,
    };
    fixtures.push(fixture(
        "wrong-secret",
        wrong_signature,
        Expect {
            status: invalid_status,
            ..refused("invalid-signature")
        },
    ));
    if source.timestamped {
        fixtures.push(fixture(
            "stale",
            sign(good.as_ref(), NOW - STALE_BY)?,
            refused("stale-timestamp"),
        ));
    }
    Ok(fixtures)
}

/// The same request but for one signed byte: the delivery id changed where
/// the body last carries it (the id field itself: a scheme that signs only
/// some fields, such as Adyen's, signs that one, not the example payment's
/// `pay_<id>` before it), or else a space after the opening brace of JSON
/// (still the same JSON, no longer the signed bytes), or else a changed last
/// character of a form's last field.
fn tamper(body: &[u8], delivery_id: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(body);
    if let Some(at) = text.rfind(delivery_id) {
        let end = at + delivery_id.len();
        return format!("{}x{}", &text[..end], &text[end..]).into_bytes();
    }
    if text.starts_with('{') || text.starts_with('[') {
        return text.replacen(['{', '['], "{ ", 1).into_bytes();
    }
    let mut bytes = body.to_vec();
    if let Some(last) = bytes.last_mut() {
        *last = if *last == b'A' { b'B' } else { b'A' };
    }
    bytes
}

/// The TOML of every fixture endpoint (`fx-<provider>`), for a receiver that
/// replays the fixtures.
pub fn endpoints_toml() -> String {
    let mut toml = String::new();
    for source in sources() {
        toml.push_str(&format!(
            "[endpoints.{}]\nprovider = {:?}\nurl = {URL:?}\n",
            source.endpoint(),
            source.provider,
        ));
        if !source.secret.is_empty() {
            toml.push_str(&format!("secrets = [{:?}]\n", source.secret));
        }
        if let Some(webhook_id) = source.webhook_id {
            toml.push_str(&format!("webhook_id = {webhook_id:?}\n"));
        }
        if let Some(certificate) = source.certificate {
            toml.push_str(&format!(
                "certificate = {:?}\n",
                repository_file(certificate)
            ));
        }
        if source.hmac.is_some() {
            toml.push_str(&format!(
                "[endpoints.{}.hmac]\n{ACME_HMAC}",
                source.endpoint(),
            ));
        }
    }
    toml
}

#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("cannot build the {0} fixture provider: {1}")]
    Provider(String, String),
    #[error(transparent)]
    Sign(#[from] SignError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Writes every fixture under `dir/<provider>/<case>.json`.
pub fn write_all(dir: &std::path::Path) -> Result<usize, FixtureError> {
    let mut written = 0;
    for source in sources() {
        let folder = dir.join(&source.provider);
        let write_error = |path: &std::path::Path, source| FixtureError::Write {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&folder).map_err(|e| write_error(&folder, e))?;
        for fixture in generate(&source)? {
            let path = folder.join(format!("{}.json", fixture.case));
            let mut text = serde_json::to_string_pretty(&fixture)
                .map_err(|e| write_error(&path, std::io::Error::other(e)))?;
            text.push('\n');
            std::fs::write(&path, text).map_err(|e| write_error(&path, e))?;
            written += 1;
        }
    }
    Ok(written)
}
