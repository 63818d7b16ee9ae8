//! Slack: `X-Slack-Signature: v0=<hex>`, HMAC-SHA256 over
//! `v0:{timestamp}:{body}` in lowercase hex, where the timestamp is the
//! `X-Slack-Request-Timestamp` header, keyed with the app's signing secret as
//! it is. The Events API's `event_id` and type live in the body.

use super::mac::{self, Algorithm};
use super::secrets::{generated, parse_each};
use super::{
    Provider, ProviderConfigError, ProviderSpec, Rejection, SignError, SignInput, SignedRequest,
    Verified, check_timestamp, key_at, parse_timestamp, required_header, text_at,
};
use crate::secret::Secret;
use actix_web::http::header::HeaderMap;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;

const SIGNATURE_HEADER: &str = "X-Slack-Signature";
const TIMESTAMP_HEADER: &str = "X-Slack-Request-Timestamp";
const VERSION: &str = "v0";
/// Slack's documentation refuses requests more than five minutes from the
/// local clock, and the official SDKs check `abs(now - timestamp) > 300`:
/// both directions, 300 s.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct Slack {
    secrets: Vec<Secret>,
    tolerance: Duration,
}

/// The two headers, as sent.
struct Headers<'a> {
    timestamp: &'a str,
    signature: &'a str,
}

impl Slack {
    pub fn new(spec: &ProviderSpec) -> Result<Self, ProviderConfigError> {
        Ok(Slack {
            secrets: parse_each(&spec.secrets, Self::parse_secret)?,
            tolerance: spec.tolerance_or(DEFAULT_TOLERANCE),
        })
    }

    /// The signing secret is the key as it is. Its form is not checked
    /// beyond what every generated secret is: the documentation's own
    /// example is not hex.
    pub fn parse_secret(secret: &str) -> Result<Secret, &'static str> {
        generated(secret)
    }

    /// The signature of one message, as it appears after `v0=`.
    pub fn signature(key: &Secret, timestamp: &str, body: &[u8]) -> String {
        hex::encode(mac::sign(
            Algorithm::Sha256,
            key.expose(),
            &signed_parts(timestamp, body),
        ))
    }

    fn headers(map: &HeaderMap) -> Result<Headers<'_>, Rejection> {
        Ok(Headers {
            timestamp: required_header(map, TIMESTAMP_HEADER)?,
            signature: required_header(map, SIGNATURE_HEADER)?,
        })
    }
}

/// `v0:{timestamp}:{body}`, with the timestamp exactly as sent.
fn signed_parts<'a>(timestamp: &'a str, body: &'a [u8]) -> [&'a [u8]; 5] {
    [VERSION.as_bytes(), b":", timestamp.as_bytes(), b":", body]
}

/// `v0=<hex>`: the decoded tag. A non-hex character is malformed; an empty or
/// odd-length value is merely one that cannot match.
fn parse_signature(value: &str) -> Result<Vec<u8>, Rejection> {
    let malformed = |reason| Rejection::MalformedHeader {
        header: SIGNATURE_HEADER,
        reason,
    };
    let Some(encoded) = value.strip_prefix("v0=") else {
        return Err(malformed("expected v0=<hex>"));
    };
    mac::hex_candidate(encoded).ok_or_else(|| malformed("the signature is not hex"))
}

impl Provider for Slack {
    fn name(&self) -> &'static str {
        "slack"
    }

    fn verify(
        &self,
        request: &SignedRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified, Rejection> {
        let headers = Self::headers(request.headers)?;
        let timestamp = parse_timestamp(headers.timestamp, TIMESTAMP_HEADER)?;
        let candidate = parse_signature(headers.signature)?;
        let secret_index = mac::matching_secret(
            Algorithm::Sha256,
            &self.secrets,
            &signed_parts(headers.timestamp, request.body),
            std::slice::from_ref(&candidate),
        )
        .ok_or(Rejection::InvalidSignature)?;
        check_timestamp(timestamp, now, self.tolerance)?;
        Ok(Verified { secret_index })
    }

    fn delivery_id(&self, _: &SignedRequest<'_>, payload: &Value) -> Result<String, Rejection> {
        key_at(payload, "/event_id")
    }

    /// The Events API's `event.type` (`app_mention`), else the envelope's
    /// `type` (`url_verification`, `event_callback`).
    fn event_type(&self, _: &SignedRequest<'_>, payload: &Value) -> Option<String> {
        text_at(payload, "/event/type").or_else(|| text_at(payload, "/type"))
    }

    /// The two headers: the event id lives in the body, so `input.delivery_id`
    /// (and `input.event_type`) are ignored.
    fn sign(&self, input: &SignInput<'_>) -> Result<Vec<(String, String)>, SignError> {
        let secret = self.secrets.first().ok_or(SignError::NoSecret)?;
        let timestamp = input.timestamp.to_string();
        let signature = Self::signature(secret, &timestamp, input.body);
        Ok(vec![
            (TIMESTAMP_HEADER.into(), timestamp),
            (SIGNATURE_HEADER.into(), format!("{VERSION}={signature}")),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::{
        assert_tolerated_either_way, delivery_id_for, event_type_for, malformed_in, pairs, spec,
        verify_request,
    };
    use serde_json::json;

    // The example in Slack's "Verifying requests from Slack" documentation
    // (https://docs.slack.dev/authentication/verifying-requests-from-slack/),
    // as pinned in python-slack-sdk
    // `tests/slack_sdk/signature/test_signature_verifier.py`
    // (`signing_secret`, `body`, `timestamp`, `valid_signature`): a slash
    // command, so the body is form-encoded rather than JSON.
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TIMESTAMP: i64 = 1_531_420_618;
    const BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
    const OTHER: &str = "0123456789abcdef0123456789abcdef";

    fn provider(secrets: &[&str]) -> Slack {
        Slack::new(&spec(secrets, None)).unwrap()
    }

    fn verify_headers(p: &Slack, pairs: &[(&str, &str)], now: i64) -> Result<Verified, Rejection> {
        verify_request(p, pairs, BODY, now)
    }

    fn verify(p: &Slack, signature: &str, now: i64) -> Result<Verified, Rejection> {
        let ts = TIMESTAMP.to_string();
        verify_headers(
            p,
            &[(TIMESTAMP_HEADER, &ts), (SIGNATURE_HEADER, signature)],
            now,
        )
    }

    #[test]
    fn the_published_example_verifies() {
        assert_eq!(
            verify(&provider(&[SECRET]), SIGNATURE, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
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
            vec![
                (TIMESTAMP_HEADER.into(), TIMESTAMP.to_string()),
                (SIGNATURE_HEADER.into(), SIGNATURE.into()),
            ]
        );
    }

    #[test]
    fn a_signed_delivery_verifies() {
        let p = provider(&[OTHER]);
        let body = br#"{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention"}}"#;
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
            verify(&provider(&[OTHER, SECRET]), SIGNATURE, TIMESTAMP),
            Ok(Verified { secret_index: 1 })
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
    fn a_changed_body_fails() {
        // python-slack-sdk's `test_is_valid_request_invalid_body`.
        let ts = TIMESTAMP.to_string();
        let pairs = [
            (TIMESTAMP_HEADER, ts.as_str()),
            (SIGNATURE_HEADER, SIGNATURE),
        ];
        let body = [BODY, b"------"].concat();
        assert_eq!(
            verify_request(&provider(&[SECRET]), &pairs, &body, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_changed_timestamp_fails() {
        let ts = (TIMESTAMP + 1).to_string();
        assert_eq!(
            verify_headers(
                &provider(&[SECRET]),
                &[(TIMESTAMP_HEADER, &ts), (SIGNATURE_HEADER, SIGNATURE)],
                TIMESTAMP
            ),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn empty_truncated_and_prefix_signatures_are_invalid() {
        let p = provider(&[SECRET]);
        for signature in [
            "v0=",
            &SIGNATURE[..SIGNATURE.len() - 1],
            &SIGNATURE[..SIGNATURE.len() - 2],
            &SIGNATURE[..35],
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
    fn the_timestamp_is_checked_in_both_directions() {
        let p = provider(&[SECRET]);
        assert_tolerated_either_way(|now| verify(&p, SIGNATURE, now), TIMESTAMP, 300);
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
        let short = Slack::new(&spec(&[SECRET], Some(Duration::from_secs(10)))).unwrap();
        assert_eq!(
            verify(&short, SIGNATURE, TIMESTAMP - 11),
            Err(Rejection::StaleTimestamp { tolerance_secs: 10 })
        );
        let off = Slack::new(&spec(&[SECRET], Some(Duration::ZERO))).unwrap();
        assert!(verify(&off, SIGNATURE, TIMESTAMP + 86_400 * 365).is_ok());
    }

    #[test]
    fn missing_headers_are_reported_by_name() {
        let p = provider(&[SECRET]);
        let ts = TIMESTAMP.to_string();
        assert_eq!(
            verify_headers(&p, &[(SIGNATURE_HEADER, SIGNATURE)], TIMESTAMP),
            Err(Rejection::MissingHeader(TIMESTAMP_HEADER))
        );
        assert_eq!(
            verify_headers(&p, &[(TIMESTAMP_HEADER, &ts)], TIMESTAMP),
            Err(Rejection::MissingHeader(SIGNATURE_HEADER))
        );
    }

    #[test]
    fn unparseable_headers_are_malformed() {
        let p = provider(&[SECRET]);
        let ts = TIMESTAMP.to_string();
        let ts = ts.as_str();
        let hex = &SIGNATURE[3..];
        let (v1, upper, twice) = (
            format!("v1={hex}"),
            format!("V0={hex}"),
            format!("v0={hex},v0={hex}"),
        );
        let cases: [(&str, &str, &str); 12] = [
            ("", SIGNATURE, TIMESTAMP_HEADER),
            ("soon", SIGNATURE, TIMESTAMP_HEADER),
            ("-1531420618", SIGNATURE, TIMESTAMP_HEADER),
            ("1531420618.5", SIGNATURE, TIMESTAMP_HEADER),
            ("12345", SIGNATURE, TIMESTAMP_HEADER),
            ("99999999999999999999", SIGNATURE, TIMESTAMP_HEADER),
            (ts, "", SIGNATURE_HEADER),
            (ts, hex, SIGNATURE_HEADER),
            (ts, &v1, SIGNATURE_HEADER),
            (ts, &upper, SIGNATURE_HEADER),
            (ts, "v0=xyz", SIGNATURE_HEADER),
            (ts, &twice, SIGNATURE_HEADER),
        ];
        for (timestamp, signature, header) in cases {
            let result = verify_headers(
                &p,
                &[(TIMESTAMP_HEADER, timestamp), (SIGNATURE_HEADER, signature)],
                TIMESTAMP,
            );
            assert!(
                malformed_in(&result, header),
                "{timestamp:?} {signature:?}: {result:?}"
            );
        }
    }

    #[test]
    fn a_header_sent_twice_is_malformed() {
        let ts = TIMESTAMP.to_string();
        let result = verify_headers(
            &provider(&[SECRET]),
            &[
                (TIMESTAMP_HEADER, &ts),
                (SIGNATURE_HEADER, SIGNATURE),
                (SIGNATURE_HEADER, SIGNATURE),
            ],
            TIMESTAMP,
        );
        assert!(malformed_in(&result, SIGNATURE_HEADER));
    }

    #[test]
    fn the_key_is_the_event_id_in_the_body() {
        let p = provider(&[SECRET]);
        let key = |payload: &Value| delivery_id_for(&p, &[], BODY, payload);
        let payload = json!({
            "type": "event_callback",
            "event_id": "Ev08MFMKH6",
            "event_time": 1_531_420_618,
            "event": {"type": "app_mention", "text": "hi"}
        });
        assert_eq!(key(&payload).unwrap(), "Ev08MFMKH6");
        assert_eq!(
            key(&json!({"type": "url_verification", "challenge": "abc"})),
            Err(Rejection::MissingKey("/event_id"))
        );
    }

    #[test]
    fn the_event_type_is_the_inner_type_else_the_envelope_type() {
        let p = provider(&[SECRET]);
        let event = |payload: &Value| event_type_for(&p, &[], BODY, payload);
        let callback = json!({"type": "event_callback", "event": {"type": "app_mention"}});
        assert_eq!(event(&callback).as_deref(), Some("app_mention"));
        let challenge = json!({"type": "url_verification", "challenge": "abc"});
        assert_eq!(event(&challenge).as_deref(), Some("url_verification"));
        assert_eq!(event(&json!({"event": {}})), None);
    }

    #[test]
    fn malformed_secrets_are_refused_at_configuration_without_echoing_them() {
        for bad in ["", "8f742231b10e 8888abcd", "8f742231b10e8888abcd\n"] {
            let error = Slack::new(&spec(&[SECRET, bad], None)).unwrap_err();
            assert!(
                matches!(error, ProviderConfigError::MalformedSecret { index: 1, .. }),
                "{bad:?}"
            );
            if !bad.is_empty() {
                assert!(!error.to_string().contains(bad));
            }
        }
        assert_eq!(
            Slack::new(&spec(&[], None)).unwrap_err(),
            ProviderConfigError::NoSecret
        );
    }
}
