//! Signed request fixtures for every provider, generated with a fixed clock:
//! `idempotent-receiver fixtures --dir tests/fixtures`. The test suite checks
//! that the committed files are exactly what this produces, then replays them
//! through the real HTTP endpoint with its clock set to [`NOW`].
//!
//! The secrets here are test values, published on purpose; never use them.

#[cfg(test)]
mod proptests;

use crate::client;
use crate::providers::{self, Encoding, HmacSpec, ProviderSpec, SignError, mac::Algorithm};
use serde::{Deserialize, Serialize};

/// The instant the fixtures were signed at (2026-01-01T00:00:00Z).
pub const NOW: i64 = 1_767_225_600;
/// How old a `stale` fixture's timestamp is.
const STALE_BY: i64 = 3600;

/// One provider's fixture endpoint: what it is configured with and what it
/// is sent.
pub struct Source {
    pub provider: &'static str,
    pub secret: &'static str,
    pub other_secret: &'static str,
    pub hmac: Option<HmacSpec>,
    pub delivery_id: &'static str,
    pub event_type: Option<&'static str>,
    pub body: &'static str,
    /// Whether the scheme signs a timestamp (and so has a `stale` case).
    pub timestamped: bool,
}

impl Source {
    /// The endpoint this fixture is posted to.
    pub fn endpoint(&self) -> String {
        format!("fx-{}", self.provider)
    }

    pub fn spec(&self, secret: &str) -> ProviderSpec {
        ProviderSpec {
            secrets: vec![secret.to_owned()],
            tolerance: None,
            hmac: self.hmac.clone(),
        }
    }
}

fn acme_hmac() -> HmacSpec {
    HmacSpec {
        signature_header: "X-Acme-Signature".into(),
        algorithm: Algorithm::Sha256,
        encoding: Encoding::Hex,
        prefix: "sha256=".into(),
        signed_content: "{timestamp}.{body}".into(),
        timestamp_header: Some("X-Acme-Timestamp".into()),
        id_header: None,
        id_pointer: Some("/id".into()),
        id_fields: None,
        id_body_hash: false,
        event_type_header: None,
        event_type_pointer: Some("/type".into()),
    }
}

/// Every provider's fixture source.
pub fn sources() -> Vec<Source> {
    vec![
        Source {
            provider: "standard-webhooks",
            secret: "whsec_Zml4dHVyZS1zdGFuZGFyZC13ZWJob29rcy0wMQ==",
            other_secret: "whsec_d3Jvbmctc2VjcmV0LXN0YW5kYXJkLXdlYmhvb2tz",
            hmac: None,
            delivery_id: "msg_fixture_standard_1",
            event_type: None,
            body: r#"{"type":"payment.succeeded","data":{"id":"pay_fx_1","order_id":"order_fx_1","amount":4200,"currency":"EUR"}}"#,
            timestamped: true,
        },
        Source {
            provider: "stripe",
            secret: "whsec_fixture_stripe_0123456789abcdef",
            other_secret: "whsec_wrong_stripe_0123456789abcdef",
            hmac: None,
            delivery_id: "evt_fixture_stripe_1",
            event_type: None,
            body: r#"{"id":"evt_fixture_stripe_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_fixture_1","object":"payment_intent","amount":4200,"amount_received":4200,"currency":"eur","metadata":{"order_id":"order_fx_2"}}}}"#,
            timestamped: true,
        },
        Source {
            provider: "github",
            secret: "fixture-github-secret",
            other_secret: "wrong-github-secret",
            hmac: None,
            delivery_id: "72d3162e-cc78-11e3-81ab-4c9367dc0958",
            event_type: Some("pull_request"),
            body: r#"{"action":"opened","number":1,"repository":{"full_name":"acme/shop"}}"#,
            timestamped: false,
        },
        Source {
            provider: "shopify",
            secret: "fixture-shopify-client-secret",
            other_secret: "wrong-shopify-client-secret",
            hmac: None,
            delivery_id: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
            event_type: Some("orders/create"),
            body: r#"{"id":820982911946154508,"email":"jon@example.com","total_price":"42.00","currency":"EUR"}"#,
            timestamped: false,
        },
        Source {
            provider: "slack",
            secret: "fixture0slack0signing0secret0000",
            other_secret: "wrong00slack0signing0secret00000",
            hmac: None,
            delivery_id: "Ev_fixture_1",
            event_type: None,
            body: r#"{"type":"event_callback","team_id":"T0001","event_id":"Ev_fixture_1","event":{"type":"app_mention","text":"hello"}}"#,
            timestamped: true,
        },
        Source {
            provider: "paddle",
            secret: "pdl_ntfset_fixture_0123456789abcdef",
            other_secret: "pdl_ntfset_wrong_0123456789abcdef",
            hmac: None,
            delivery_id: "evt_01fixturepaddle",
            event_type: None,
            body: r#"{"event_id":"evt_01fixturepaddle","event_type":"transaction.completed","occurred_at":"2026-01-01T00:00:00Z","data":{"id":"txn_01fixture","currency_code":"EUR","details":{"totals":{"grand_total":"4200"}},"custom_data":{"order_id":"order_fx_3"}}}"#,
            timestamped: true,
        },
        Source {
            provider: "hmac",
            secret: "fixture-acme-secret",
            other_secret: "wrong-acme-secret",
            hmac: Some(acme_hmac()),
            delivery_id: "acme_evt_1",
            event_type: None,
            body: r#"{"id":"acme_evt_1","type":"invoice.paid"}"#,
            timestamped: true,
        },
    ]
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
    pub body: String,
    pub expect: Expect,
}

/// The valid, tampered, wrong-secret and (where the scheme is timestamped)
/// stale fixtures of one source.
pub fn generate(source: &Source) -> Result<Vec<Fixture>, FixtureError> {
    let provider = |secret: &str| {
        providers::build(source.provider, &source.spec(secret))
            .map_err(|e| FixtureError::Provider(source.provider, e.to_string()))
    };
    let good = provider(source.secret)?;
    let wrong = provider(source.other_secret)?;
    let sign = |p: &dyn providers::Provider, timestamp: i64| {
        client::sign(
            p,
            source.delivery_id,
            timestamp,
            source.event_type,
            source.body.as_bytes().to_vec(),
        )
        .map(|d| d.headers)
        .map_err(FixtureError::Sign)
    };
    let fixture = |case: &str, headers, body: String, expect: Expect| Fixture {
        provider: source.provider.to_owned(),
        endpoint: source.endpoint(),
        case: case.to_owned(),
        now: NOW,
        headers,
        body,
        expect,
    };
    let refused = |problem: &str| Expect {
        status: 401,
        problem: Some(problem.to_owned()),
    };
    let mut fixtures = vec![
        fixture(
            "valid",
            sign(good.as_ref(), NOW)?,
            source.body.to_owned(),
            Expect {
                status: 200,
                problem: None,
            },
        ),
        // The same bytes but one: a space after the opening brace is still the
        // same JSON, and no longer the signed body.
        fixture(
            "tampered",
            sign(good.as_ref(), NOW)?,
            source.body.replacen('{', "{ ", 1),
            refused("invalid-signature"),
        ),
        fixture(
            "wrong-secret",
            sign(wrong.as_ref(), NOW)?,
            source.body.to_owned(),
            refused("invalid-signature"),
        ),
    ];
    if source.timestamped {
        fixtures.push(fixture(
            "stale",
            sign(good.as_ref(), NOW - STALE_BY)?,
            source.body.to_owned(),
            refused("stale-timestamp"),
        ));
    }
    Ok(fixtures)
}

/// The TOML of every fixture endpoint (`fx-<provider>`), for a receiver that
/// replays the fixtures.
pub fn endpoints_toml() -> String {
    let mut toml = String::new();
    for source in sources() {
        toml.push_str(&format!(
            "[endpoints.{}]\nprovider = {:?}\nsecrets = [{:?}]\n",
            source.endpoint(),
            source.provider,
            source.secret
        ));
        if let Some(hmac) = &source.hmac {
            toml.push_str(&format!(
                "[endpoints.{}.hmac]\n{}",
                source.endpoint(),
                hmac_toml(hmac)
            ));
        }
    }
    toml
}

fn hmac_toml(spec: &HmacSpec) -> String {
    let mut lines = vec![
        format!("signature_header = {:?}", spec.signature_header),
        format!(
            "algorithm = {:?}",
            format!("{:?}", spec.algorithm).to_lowercase()
        ),
        format!(
            "encoding = {:?}",
            format!("{:?}", spec.encoding).to_lowercase()
        ),
        format!("prefix = {:?}", spec.prefix),
        format!("signed_content = {:?}", spec.signed_content),
    ];
    let optional = [
        ("timestamp_header", &spec.timestamp_header),
        ("id_header", &spec.id_header),
        ("id_pointer", &spec.id_pointer),
        ("event_type_header", &spec.event_type_header),
        ("event_type_pointer", &spec.event_type_pointer),
    ];
    lines.extend(
        optional
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k} = {v:?}"))),
    );
    lines.join("\n") + "\n"
}

#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("cannot build the {0} fixture provider: {1}")]
    Provider(&'static str, String),
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
        let folder = dir.join(source.provider);
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
