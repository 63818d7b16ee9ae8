//! Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>...]`,
//! HMAC-SHA256 over `{ts}:{body}` in lowercase hex, keyed with the
//! notification destination's secret string as it is (`pdl_ntfset_...`).
//! The event id and type live in the body.

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

const HEADER: &str = "Paddle-Signature";
/// Paddle's official SDKs refuse a notification once the clock is more than
/// 5 s past its `ts` (paddle-node-sdk `WebhooksValidator.
/// MAX_VALID_TIME_DIFFERENCE = 5`, paddle-python-sdk and paddle-php-sdk
/// `Verifier(maximum_variance = 5)`), and do not refuse a `ts` ahead of the
/// clock; this follows them: age only, 5 s.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5);

const FORMAT: Format = Format {
    header: HEADER,
    separator: ';',
    timestamp_key: "ts",
    scheme: "h1",
    joiner: ":",
    shape: "expected semicolon-separated ts=<unix>;h1=<hex> pairs",
    no_timestamp: "it has no ts= timestamp",
};

#[derive(Debug)]
pub struct Paddle {
    secrets: Vec<Secret>,
    tolerance: Duration,
}

impl Paddle {
    pub fn new(spec: &ProviderSpec) -> Result<Self, ProviderConfigError> {
        Ok(Paddle {
            secrets: parse_each(&spec.secrets, Self::parse_secret)?,
            tolerance: spec.tolerance_or(DEFAULT_TOLERANCE),
        })
    }

    /// The secret string is the key as it is. Its form has changed over time
    /// (`pdl_ntf_...`, `pdl_ntfset_...`), so no prefix is required, only what
    /// every generated secret is.
    pub fn parse_secret(secret: &str) -> Result<Secret, &'static str> {
        generated(secret)
    }

    /// The signature of one message, as it appears after `h1=`.
    pub fn signature(key: &Secret, timestamp: &str, body: &[u8]) -> String {
        FORMAT.signature(key, timestamp, body)
    }
}

impl Provider for Paddle {
    fn name(&self) -> &'static str {
        "paddle"
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
        key_at(payload, "/event_id")
    }

    fn event_type(&self, _: &SignedRequest<'_>, payload: &Value) -> Option<String> {
        text_at(payload, "/event_type")
    }

    /// `Paddle-Signature` only: the event id lives in the body, so
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
    use crate::providers::test_support::{
        delivery_id_for, event_type_for, malformed_in, pairs, spec, verify_request,
    };
    use serde_json::json;

    // paddle-node-sdk, `src/__tests__/notifications/webhooks-validator.test.ts`
    // ("Valid signature"): secret `VALID_SECRET`, clock set to 2023-11-01
    // 00:00:00 UTC.
    const SECRET: &str = "VALID_SECRET";
    const TIMESTAMP: i64 = 1_698_796_800;
    const BODY: &[u8] = br#"{"data": ["1", "2"]}"#;
    const SIGNATURE: &str = "a300428748dce5c70e4da19bffd60769591ea969c99dea3105d0ec9612cf43f9";
    // The same file, "Valid signature with multiple hashes".
    const MULTI_BODY: &[u8] = br#"{"data": "value"}"#;
    const MULTI_HEADER: &str = "ts=1698796800;h1=28981e941fae76e53db32f3d2a83cb69db41476595e84e1970a1b5d98f62b261;h1=28981e941fae76e53db32f3d2a83cb69db41476595e84e1970a1b5d98f62b261;h2=RANDOM_HASH";

    // paddle-python-sdk `tests/Unit/Notification/test_Verifier.py` and
    // paddle-php-sdk `tests/Unit/Notifications/VerifierTest.php`
    // (`it_verifies_a_signature`): three secrets, the third correct, body
    // `hello-world`, header
    // `ts=1696195954;h1=dummy;h1=d96299976a6eb066f484d7fde011ac56fc32b38fc9940bc419d6e537fdc6ef02`.
    const ROTATION_SECRETS: [&str; 3] = [
        "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_TjIG2BXbm83HPXqNfziwe506sBEdqL/4",
        "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_vB/yIOnTOCWIvpBadM5jzBZPHc7OmdSo",
        "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_WvRO0eL4Bj9rgYYIBZY6wZhG4EHy9jzh",
    ];
    const ROTATION_TIMESTAMP: i64 = 1_696_195_954;
    const ROTATION_BODY: &[u8] = b"hello-world";
    const ROTATION_SIGNATURE: &str =
        "d96299976a6eb066f484d7fde011ac56fc32b38fc9940bc419d6e537fdc6ef02";

    fn provider(secrets: &[&str]) -> Paddle {
        Paddle::new(&spec(secrets, None)).unwrap()
    }

    fn verify_body(p: &Paddle, value: &str, body: &[u8], now: i64) -> Result<Verified, Rejection> {
        verify_request(p, &[(HEADER, value)], body, now)
    }

    fn verify(p: &Paddle, signature: &str, now: i64) -> Result<Verified, Rejection> {
        verify_body(p, &format!("ts={TIMESTAMP};h1={signature}"), BODY, now)
    }

    fn malformed(result: Result<Verified, Rejection>) -> bool {
        malformed_in(&result, HEADER)
    }

    #[test]
    fn the_published_node_sdk_example_verifies() {
        assert_eq!(
            verify(&provider(&[SECRET]), SIGNATURE, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn the_published_example_with_several_hashes_verifies() {
        assert_eq!(
            verify_body(&provider(&[SECRET]), MULTI_HEADER, MULTI_BODY, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn the_published_rotation_example_matches_the_third_secret() {
        // The SDKs' header also carries `h1=dummy`, which they skip as a
        // non-matching value; here a signature that is not hex makes the
        // header malformed, so the dummy entry is replaced by a hex one that
        // does not match, and the verbatim header is checked to be refused.
        let p = provider(&ROTATION_SECRETS);
        let value = format!(
            "ts={ROTATION_TIMESTAMP};h1={};h1={ROTATION_SIGNATURE}",
            "0".repeat(64)
        );
        assert_eq!(
            verify_body(&p, &value, ROTATION_BODY, ROTATION_TIMESTAMP),
            Ok(Verified { secret_index: 2 })
        );
        let verbatim = format!("ts={ROTATION_TIMESTAMP};h1=dummy;h1={ROTATION_SIGNATURE}");
        assert!(malformed(verify_body(
            &p,
            &verbatim,
            ROTATION_BODY,
            ROTATION_TIMESTAMP
        )));
    }

    #[test]
    fn signing_reproduces_the_published_signature() {
        let input = SignInput {
            delivery_id: "ignored",
            timestamp: TIMESTAMP,
            body: BODY,
            event_type: None,
        };
        assert_eq!(
            provider(&[SECRET]).sign(&input).unwrap(),
            vec![(HEADER.into(), format!("ts={TIMESTAMP};h1={SIGNATURE}"))]
        );
    }

    #[test]
    fn a_signed_delivery_verifies() {
        let p = provider(&[ROTATION_SECRETS[2]]);
        let body = br#"{"event_id":"evt_01h","event_type":"transaction.completed"}"#;
        let input = SignInput {
            delivery_id: "unused",
            timestamp: 1_750_000_000,
            body,
            event_type: None,
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
            verify(
                &provider(&["INVALID_VALID_SECRET", SECRET]),
                SIGNATURE,
                TIMESTAMP
            ),
            Ok(Verified { secret_index: 1 })
        );
    }

    #[test]
    fn a_wrong_secret_fails() {
        // The node SDK's "Invalid secret" case.
        assert_eq!(
            verify(&provider(&["INVALID_VALID_SECRET"]), SIGNATURE, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_reformatted_body_fails() {
        // The node SDK's "Invalid data - has more space" case.
        let value = format!("ts={TIMESTAMP};h1={SIGNATURE}");
        assert_eq!(
            verify_body(
                &provider(&[SECRET]),
                &value,
                br#"{ "data": [ "1", "2" ]}"#,
                TIMESTAMP
            ),
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
    fn a_notification_older_than_5_seconds_is_stale() {
        // The node SDK's clock cases: 00:00:05 passes, 00:00:06 and four days
        // later fail.
        let p = provider(&[SECRET]);
        assert!(verify(&p, SIGNATURE, TIMESTAMP + 5).is_ok());
        let stale = Err(Rejection::StaleTimestamp { tolerance_secs: 5 });
        assert_eq!(verify(&p, SIGNATURE, TIMESTAMP + 6), stale);
        assert_eq!(verify(&p, SIGNATURE, TIMESTAMP + 4 * 86_400), stale);
    }

    #[test]
    fn a_timestamp_ahead_of_the_clock_is_not_refused() {
        assert!(verify(&provider(&[SECRET]), SIGNATURE, TIMESTAMP - 3_600).is_ok());
    }

    #[test]
    fn the_signature_is_checked_before_the_timestamp() {
        assert_eq!(
            verify(
                &provider(&["INVALID_VALID_SECRET"]),
                SIGNATURE,
                TIMESTAMP + 60
            ),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_configured_tolerance_replaces_the_default_and_zero_disables_it() {
        let wide = Paddle::new(&spec(&[SECRET], Some(Duration::from_secs(300)))).unwrap();
        assert!(verify(&wide, SIGNATURE, TIMESTAMP + 300).is_ok());
        assert_eq!(
            verify(&wide, SIGNATURE, TIMESTAMP + 301),
            Err(Rejection::StaleTimestamp {
                tolerance_secs: 300
            })
        );
        let off = Paddle::new(&spec(&[SECRET], Some(Duration::ZERO))).unwrap();
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
    fn unparseable_headers_are_malformed() {
        let p = provider(&[SECRET]);
        let ts = TIMESTAMP.to_string();
        for value in [
            String::new(),
            "ts=;h1=".to_owned(),
            ";;".to_owned(),
            // The node SDK's header cases.
            "invalid_header".to_owned(),
            "h1=invalid_header".to_owned(),
            format!("ts={ts};;h1={SIGNATURE}"),
            format!("h1={SIGNATURE}"),
            format!("ts={ts};h1=invalid_signature"),
            format!("ts=soon;h1={SIGNATURE}"),
            format!("ts=9876;h1={SIGNATURE}"),
            format!("ts={ts};ts={ts};h1={SIGNATURE}"),
            format!("ts={ts},h1={SIGNATURE}"),
        ] {
            let result = verify_body(&p, &value, BODY, TIMESTAMP);
            assert!(malformed(result.clone()), "{value:?}: {result:?}");
        }
    }

    #[test]
    fn a_header_without_h1_is_invalid() {
        // The node SDK's "Missing H1" case: a timestamp but no signature.
        assert_eq!(
            verify_body(
                &provider(&[SECRET]),
                &format!("ts={TIMESTAMP};h2=invalid_header"),
                BODY,
                TIMESTAMP
            ),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn the_key_is_the_event_id_in_the_body() {
        let p = provider(&[SECRET]);
        let key = |payload: &Value| delivery_id_for(&p, &[], BODY, payload);
        let payload = json!({
            "event_id": "evt_01h7ks0e4mqx5wq5xgkdk3kjwk",
            "event_type": "transaction.completed",
            "occurred_at": "2023-08-10T15:16:33.066Z",
            "notification_id": "ntf_01h7ks0e7v2qc7pg1xcpn14kvh",
            "data": {}
        });
        assert_eq!(key(&payload).unwrap(), "evt_01h7ks0e4mqx5wq5xgkdk3kjwk");
        assert_eq!(
            key(&json!({"notification_id": "ntf_1"})),
            Err(Rejection::MissingKey("/event_id"))
        );
    }

    #[test]
    fn the_event_type_is_read_from_the_body() {
        let p = provider(&[SECRET]);
        let event = |payload: &Value| event_type_for(&p, &[], BODY, payload);
        assert_eq!(
            event(&json!({"event_type": "subscription.created"})).as_deref(),
            Some("subscription.created")
        );
        assert_eq!(event(&json!({"type": "x"})), None);
    }

    #[test]
    fn malformed_secrets_are_refused_at_configuration_without_echoing_them() {
        for bad in ["", "pdl_ntfset_abc def", "pdl_ntfset_abc\t"] {
            let error = Paddle::new(&spec(&[SECRET, bad], None)).unwrap_err();
            assert!(
                matches!(error, ProviderConfigError::MalformedSecret { index: 1, .. }),
                "{bad:?}"
            );
            if !bad.is_empty() {
                assert!(!error.to_string().contains(bad));
            }
        }
        assert_eq!(
            Paddle::new(&spec(&[], None)).unwrap_err(),
            ProviderConfigError::NoSecret
        );
    }
}
