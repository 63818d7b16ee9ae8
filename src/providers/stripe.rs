//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...][,v0=<hex>]`,
//! HMAC-SHA256 over `{t}.{body}` in lowercase hex, keyed with the whole
//! `whsec_...` string as it is (not base64-decoded, unlike Standard
//! Webhooks). The event id (`evt_...`) and type live in the body.

use super::secrets::{generated, parse_each};
use super::signature_list::Format;
use super::{
    Provider, ProviderConfigError, ProviderSpec, Rejection, SignError, SignInput, SignedRequest,
    Verified, check_age, key_at, text_at,
};
use crate::secret::Secret;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;

const HEADER: &str = "Stripe-Signature";
const SECRET_PREFIX: &str = "whsec_";
/// The official SDKs' `DEFAULT_TOLERANCE` (300 s), checked as they check it:
/// only that the timestamp is not older than that, never that it is ahead.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

const FORMAT: Format = Format {
    header: HEADER,
    separator: ',',
    timestamp_key: "t",
    scheme: "v1",
    joiner: ".",
    shape: "expected comma-separated t=<unix>,v1=<hex> pairs",
    no_timestamp: "it has no t= timestamp",
};

#[derive(Debug)]
pub struct Stripe {
    secrets: Vec<Secret>,
    tolerance: Duration,
}

impl Stripe {
    pub fn new(spec: &ProviderSpec) -> Result<Self, ProviderConfigError> {
        Ok(Stripe {
            secrets: parse_each(&spec.secrets, Self::parse_secret)?,
            tolerance: spec.tolerance_or(DEFAULT_TOLERANCE),
        })
    }

    /// `whsec_` followed by the rest of the secret; the whole string, prefix
    /// included, is the HMAC key.
    pub fn parse_secret(secret: &str) -> Result<Secret, &'static str> {
        let Some(rest) = secret.strip_prefix(SECRET_PREFIX) else {
            return Err("expected a signing secret starting with whsec_");
        };
        if rest.is_empty() {
            return Err("nothing follows whsec_");
        }
        generated(secret)
    }

    /// The signature of one message, as it appears after `v1=`.
    pub fn signature(key: &Secret, timestamp: &str, body: &[u8]) -> String {
        FORMAT.signature(key, timestamp, body)
    }
}

impl Provider for Stripe {
    fn name(&self) -> &'static str {
        "stripe"
    }

    fn verify(
        &self,
        request: &SignedRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified, Rejection> {
        let matched = FORMAT.verify(&self.secrets, request)?;
        check_age(matched.timestamp, now, self.tolerance)?;
        Ok(Verified {
            secret_index: matched.secret_index,
        })
    }

    fn delivery_id(&self, _: &SignedRequest<'_>, payload: &Value) -> Result<String, Rejection> {
        key_at(payload, "/id")
    }

    fn event_type(&self, _: &SignedRequest<'_>, payload: &Value) -> Option<String> {
        text_at(payload, "/type")
    }

    /// `Stripe-Signature` only: the event id lives in the body, so
    /// `input.delivery_id` (and `input.event_type`) are ignored.
    fn sign(&self, input: &SignInput<'_>) -> Result<Vec<(String, String)>, SignError> {
        let secret = self.secrets.first().ok_or(SignError::NoSecret)?;
        let timestamp = input.timestamp.to_string();
        let signature = Self::signature(secret, &timestamp, input.body);
        Ok(vec![(HEADER.into(), FORMAT.value(&timestamp, &signature))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::signature_list::MAX_SIGNATURES;
    use crate::providers::test_support::{
        delivery_id_for, event_type_for, malformed_in, pairs, spec, verify_request,
    };
    use serde_json::json;

    // Stripe publishes no fixed vector: its documentation shows a header
    // without the secret and body behind it, and the official SDKs' tests
    // (stripe-python `tests/test_webhook.py`, `DUMMY_WEBHOOK_SECRET`;
    // stripe-node `test/Webhook.spec.ts`, `SECRET`; both
    // `"whsec_test_secret"`) compute their headers at test time from the
    // current clock. This vector uses that secret; its signature was computed
    // independently:
    //   python3 -c 'import hmac,hashlib; print(hmac.new(b"whsec_test_secret",
    //     b"1700000000." + BODY, hashlib.sha256).hexdigest())'
    const SECRET: &str = "whsec_test_secret";
    const OTHER: &str = "whsec_another_secret";
    const TIMESTAMP: i64 = 1_700_000_000;
    const BODY: &[u8] =
        br#"{"id":"evt_test_webhook","object":"event","type":"payment_intent.succeeded"}"#;
    const SIGNATURE: &str = "130dc37d5a27b1b232a61e4f2ff00ed245f498112c11e8b747aff3d0fb754056";

    fn provider(secrets: &[&str]) -> Stripe {
        Stripe::new(&spec(secrets, None)).unwrap()
    }

    fn verify_header(p: &Stripe, value: &str, now: i64) -> Result<Verified, Rejection> {
        verify_request(p, &[(HEADER, value)], BODY, now)
    }

    fn verify(p: &Stripe, signature: &str, now: i64) -> Result<Verified, Rejection> {
        verify_header(p, &format!("t={TIMESTAMP},v1={signature}"), now)
    }

    fn malformed(result: Result<Verified, Rejection>) -> bool {
        malformed_in(&result, HEADER)
    }

    #[test]
    fn the_independently_computed_vector_verifies() {
        assert_eq!(
            verify(&provider(&[SECRET]), SIGNATURE, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn signing_reproduces_the_independently_computed_signature() {
        let input = SignInput {
            delivery_id: "ignored",
            timestamp: TIMESTAMP,
            body: BODY,
            event_type: None,
        };
        assert_eq!(
            provider(&[SECRET]).sign(&input).unwrap(),
            vec![(HEADER.into(), format!("t={TIMESTAMP},v1={SIGNATURE}"))]
        );
    }

    #[test]
    fn a_signed_delivery_verifies() {
        let p = provider(&[OTHER]);
        let body = br#"{"id":"evt_1","type":"invoice.paid"}"#;
        let input = SignInput {
            delivery_id: "unused",
            timestamp: 1_750_000_000,
            body,
            event_type: Some("invoice.paid"),
        };
        let signed = p.sign(&input).unwrap();
        assert_eq!(
            verify_request(&p, &pairs(&signed), body, 1_750_000_000),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn the_second_secret_of_a_rotation_matches_with_index_1() {
        assert_eq!(
            verify(&provider(&[OTHER, SECRET]), SIGNATURE, TIMESTAMP),
            Ok(Verified { secret_index: 1 })
        );
    }

    #[test]
    fn any_of_several_v1_signatures_may_match_and_other_schemes_are_ignored() {
        let p = provider(&[SECRET]);
        let zeros = "0".repeat(64);
        let value = format!("t={TIMESTAMP},v1={zeros},v0={zeros},v2=whatever,v1={SIGNATURE}");
        assert_eq!(
            verify_header(&p, &value, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn a_v0_signature_alone_is_invalid() {
        let value = format!("t={TIMESTAMP},v0={SIGNATURE}");
        assert_eq!(
            verify_header(&provider(&[SECRET]), &value, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_wrong_secret_fails() {
        assert_eq!(
            verify(&provider(&[OTHER]), SIGNATURE, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn the_secret_is_not_base64_decoded() {
        // `whsec_test_secret` read the Standard Webhooks way would be the
        // base64 of `test_secret`; keyed with those bytes, nothing matches.
        let p = provider(&["whsec_dGVzdF9zZWNyZXQ="]);
        assert_eq!(
            verify(&p, SIGNATURE, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_changed_body_fails() {
        let value = format!("t={TIMESTAMP},v1={SIGNATURE}");
        let body = br#"{"id":"evt_test_webhook","object":"event","type":"payment_intent.failed"}"#;
        assert_eq!(
            verify_request(&provider(&[SECRET]), &[(HEADER, &value)], body, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn empty_truncated_and_prefix_signatures_are_invalid() {
        let p = provider(&[SECRET]);
        for signature in [
            "",
            &SIGNATURE[..SIGNATURE.len() - 1],
            &SIGNATURE[..SIGNATURE.len() - 2],
            &SIGNATURE[..32],
            &format!("{SIGNATURE}00"),
        ] {
            assert_eq!(
                verify(&p, signature, TIMESTAMP),
                Err(Rejection::InvalidSignature),
                "{signature:?}"
            );
        }
    }

    #[test]
    fn a_stale_timestamp_is_refused_but_one_ahead_is_not() {
        let p = provider(&[SECRET]);
        assert!(verify(&p, SIGNATURE, TIMESTAMP + 300).is_ok());
        assert_eq!(
            verify(&p, SIGNATURE, TIMESTAMP + 301),
            Err(Rejection::StaleTimestamp {
                tolerance_secs: 300
            })
        );
        // As in the SDKs, a timestamp ahead of the receiver's clock passes.
        assert!(verify(&p, SIGNATURE, TIMESTAMP - 86_400).is_ok());
    }

    #[test]
    fn the_signature_is_checked_before_the_timestamp() {
        assert_eq!(
            verify(&provider(&[OTHER]), SIGNATURE, TIMESTAMP + 86_400),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_configured_tolerance_replaces_the_default_and_zero_disables_it() {
        let short = Stripe::new(&spec(&[SECRET], Some(Duration::from_secs(10)))).unwrap();
        assert_eq!(
            verify(&short, SIGNATURE, TIMESTAMP + 11),
            Err(Rejection::StaleTimestamp { tolerance_secs: 10 })
        );
        let off = Stripe::new(&spec(&[SECRET], Some(Duration::ZERO))).unwrap();
        assert!(verify(&off, SIGNATURE, TIMESTAMP + 86_400 * 365).is_ok());
    }

    #[test]
    fn a_missing_header_is_reported_by_name() {
        assert_eq!(
            verify_request(&provider(&[SECRET]), &[], BODY, TIMESTAMP),
            Err(Rejection::MissingHeader(HEADER))
        );
    }

    #[test]
    fn the_header_name_is_case_insensitive() {
        let value = format!("t={TIMESTAMP},v1={SIGNATURE}");
        let pairs = [("stripe-signature", value.as_str())];
        assert!(verify_request(&provider(&[SECRET]), &pairs, BODY, TIMESTAMP).is_ok());
    }

    #[test]
    fn unparseable_headers_are_malformed() {
        let p = provider(&[SECRET]);
        let ts = TIMESTAMP.to_string();
        for value in [
            String::new(),
            "t=,v1=".to_owned(),
            ",,".to_owned(),
            format!("t={ts},,v1={SIGNATURE}"),
            format!("t={ts},v1={SIGNATURE},"),
            format!("v1={SIGNATURE}"),
            format!("t={ts},v1=xyz"),
            format!("t={ts},v1={}g", &SIGNATURE[..63]),
            format!("t=soon,v1={SIGNATURE}"),
            format!("t=-{ts},v1={SIGNATURE}"),
            format!("t=12345,v1={SIGNATURE}"),
            format!("t=99999999999999999999,v1={SIGNATURE}"),
            format!("t={ts},t={ts},v1={SIGNATURE}"),
            format!("t={ts};v1={SIGNATURE}"),
        ] {
            let result = verify_header(&p, &value, TIMESTAMP);
            assert!(malformed(result.clone()), "{value:?}: {result:?}");
        }
    }

    #[test]
    fn a_header_sent_twice_is_malformed() {
        let value = format!("t={TIMESTAMP},v1={SIGNATURE}");
        let pairs = [(HEADER, value.as_str()), (HEADER, value.as_str())];
        assert!(malformed(verify_request(
            &provider(&[SECRET]),
            &pairs,
            BODY,
            TIMESTAMP
        )));
    }

    #[test]
    fn too_many_signatures_are_malformed() {
        let mut value = format!("t={TIMESTAMP}");
        for _ in 0..MAX_SIGNATURES {
            value.push_str(",v1=00");
        }
        let p = provider(&[SECRET]);
        assert_eq!(
            verify_header(&p, &format!("{value},v1={SIGNATURE}"), TIMESTAMP),
            Err(Rejection::MalformedHeader {
                header: HEADER,
                reason: "it carries more than 16 signatures"
            })
        );
    }

    #[test]
    fn the_key_is_the_event_id_in_the_body() {
        let p = provider(&[SECRET]);
        let key = |payload: &Value| delivery_id_for(&p, &[], BODY, payload);
        let payload: Value = serde_json::from_slice(BODY).unwrap();
        assert_eq!(key(&payload).unwrap(), "evt_test_webhook");
        assert_eq!(
            key(&json!({"type": "invoice.paid"})),
            Err(Rejection::MissingKey("/id"))
        );
        assert_eq!(
            key(&json!({"id": ""})),
            Err(Rejection::InvalidKey("it is empty"))
        );
    }

    #[test]
    fn the_event_type_is_read_from_the_body() {
        let p = provider(&[SECRET]);
        let event = |payload: &Value| event_type_for(&p, &[], BODY, payload);
        let payload: Value = serde_json::from_slice(BODY).unwrap();
        assert_eq!(event(&payload).as_deref(), Some("payment_intent.succeeded"));
        assert_eq!(event(&json!({"id": "evt_1"})), None);
    }

    #[test]
    fn malformed_secrets_are_refused_at_configuration_without_echoing_them() {
        for bad in [
            "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
            "whsec_",
            "whsec_ab cd",
            "",
        ] {
            let error = Stripe::new(&spec(&[SECRET, bad], None)).unwrap_err();
            assert!(
                matches!(error, ProviderConfigError::MalformedSecret { index: 1, .. }),
                "{bad:?}"
            );
            // (`whsec_` alone is only the public prefix.)
            if bad.len() > SECRET_PREFIX.len() {
                assert!(!error.to_string().contains(bad));
            }
        }
        assert_eq!(
            Stripe::new(&spec(&[], None)).unwrap_err(),
            ProviderConfigError::NoSecret
        );
    }
}
