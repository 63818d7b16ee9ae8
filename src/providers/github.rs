//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 over the raw body
//! with the webhook's secret as typed, the key in `X-GitHub-Delivery` and the
//! event in `X-GitHub-Event`. GitHub signs no timestamp and not the delivery
//! id, so neither ages out nor is protected against being swapped.

use super::mac::{self, Algorithm};
use super::secrets::{parse_each, typed};
use super::{
    Provider, ProviderConfigError, ProviderSpec, Rejection, SignError, SignInput, SignedRequest,
    Verified, header, key_in_header, required_header,
};
use crate::secret::Secret;
use chrono::{DateTime, Utc};
use serde_json::Value;

const SIGNATURE_HEADER: &str = "X-Hub-Signature-256";
const DELIVERY_HEADER: &str = "X-GitHub-Delivery";
const EVENT_HEADER: &str = "X-GitHub-Event";
const SIGNATURE_PREFIX: &str = "sha256=";
/// The event GitHub sends when a webhook is created.
const DEFAULT_EVENT: &str = "ping";

#[derive(Debug)]
pub struct GitHub {
    secrets: Vec<Secret>,
}

impl GitHub {
    pub fn new(spec: &ProviderSpec) -> Result<Self, ProviderConfigError> {
        Ok(GitHub {
            secrets: parse_each(&spec.secrets, typed)?,
        })
    }

    /// The value of `X-Hub-Signature-256` for `body`.
    pub fn signature(key: &Secret, body: &[u8]) -> String {
        let tag = mac::sign(Algorithm::Sha256, key.expose(), &[body]);
        format!("{SIGNATURE_PREFIX}{}", hex::encode(tag))
    }
}

impl Provider for GitHub {
    fn name(&self) -> &'static str {
        "github"
    }

    fn verify(&self, request: &SignedRequest<'_>, _: DateTime<Utc>) -> Result<Verified, Rejection> {
        let value = required_header(request.headers, SIGNATURE_HEADER)?;
        // GitHub sends exactly one signature, always with this prefix.
        let encoded = value
            .strip_prefix(SIGNATURE_PREFIX)
            .ok_or(Rejection::MalformedHeader {
                header: SIGNATURE_HEADER,
                reason: "expected sha256=<hex>",
            })?;
        let candidate = hex::decode(encoded).map_err(|_| Rejection::MalformedHeader {
            header: SIGNATURE_HEADER,
            reason: "the signature after sha256= is not hex",
        })?;
        // Constant-time, and any other length fails, so an empty `sha256=` or
        // a prefix of the right tag cannot match.
        let secret_index = mac::matching_secret(
            Algorithm::Sha256,
            &self.secrets,
            &[request.body],
            std::slice::from_ref(&candidate),
        )
        .ok_or(Rejection::InvalidSignature)?;
        Ok(Verified { secret_index })
    }

    fn delivery_id(&self, request: &SignedRequest<'_>, _: &Value) -> Result<String, Rejection> {
        key_in_header(request.headers, DELIVERY_HEADER)
    }

    /// `X-GitHub-Event`, refined by the body's `action` where there is one:
    /// `pull_request.opened`, `issues.closed`, but plain `push`.
    fn event_type(&self, request: &SignedRequest<'_>, payload: &Value) -> Option<String> {
        let event = header(request.headers, EVENT_HEADER).ok()??;
        match payload.get("action").and_then(Value::as_str) {
            Some(action) => Some(format!("{event}.{action}")),
            None => Some(event.to_owned()),
        }
    }

    /// The delivery header is not covered by the signature.
    fn delivery_id_is_signed(&self) -> bool {
        false
    }

    fn sign(&self, input: &SignInput<'_>) -> Result<Vec<(String, String)>, SignError> {
        let secret = self.secrets.first().ok_or(SignError::NoSecret)?;
        Ok(vec![
            (SIGNATURE_HEADER.into(), Self::signature(secret, input.body)),
            (DELIVERY_HEADER.into(), input.delivery_id.into()),
            (
                EVENT_HEADER.into(),
                input.event_type.unwrap_or(DEFAULT_EVENT).into(),
            ),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::{
        delivery_id_for, event_type_for, malformed_in, pairs, spec, verify_request,
    };
    use serde_json::json;

    // The test values in GitHub's "Validating webhook deliveries" documentation
    // (docs.github.com/webhooks/using-webhooks/validating-webhook-deliveries,
    // section "Testing the webhook payload validation").
    const SECRET: &str = "It's a Secret to Everybody";
    const BODY: &[u8] = b"Hello, World!";
    const SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    const DELIVERY: &str = "72d3162e-cc78-11e3-81ab-4c9367dc0958";

    /// GitHub signs no timestamp, so any clock will do.
    const NOW: i64 = 1_700_000_000;

    fn provider(secrets: &[&str]) -> GitHub {
        GitHub::new(&spec(secrets, None)).unwrap()
    }

    fn verify_with(p: &GitHub, pairs: &[(&str, &str)], body: &[u8]) -> Result<Verified, Rejection> {
        verify_request(p, pairs, body, NOW)
    }

    fn verify(p: &GitHub, signature: &str) -> Result<Verified, Rejection> {
        verify_with(
            p,
            &[
                ("x-hub-signature-256", signature),
                ("x-github-delivery", DELIVERY),
                ("x-github-event", "push"),
            ],
            BODY,
        )
    }

    #[test]
    fn the_published_example_verifies() {
        assert_eq!(
            verify(&provider(&[SECRET]), SIGNATURE),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn signing_reproduces_the_published_signature() {
        let input = SignInput {
            delivery_id: DELIVERY,
            timestamp: 0,
            body: BODY,
            event_type: None,
        };
        let headers = provider(&[SECRET]).sign(&input).unwrap();
        assert_eq!(
            headers,
            vec![
                ("X-Hub-Signature-256".into(), SIGNATURE.into()),
                ("X-GitHub-Delivery".into(), DELIVERY.into()),
                ("X-GitHub-Event".into(), "ping".into()),
            ]
        );
    }

    #[test]
    fn what_is_signed_verifies_with_the_delivery_and_event_it_was_given() {
        let p = provider(&["a-fresh-secret"]);
        let body = br#"{"action":"opened","number":1}"#;
        let input = SignInput {
            delivery_id: "d-1",
            timestamp: 0,
            body,
            event_type: Some("pull_request"),
        };
        let signed = p.sign(&input).unwrap();
        let pairs = pairs(&signed);
        let payload: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(
            verify_with(&p, &pairs, body),
            Ok(Verified { secret_index: 0 })
        );
        assert_eq!(
            delivery_id_for(&p, &pairs, body, &payload),
            Ok("d-1".into())
        );
        assert_eq!(
            event_type_for(&p, &pairs, body, &payload),
            Some("pull_request.opened".into())
        );
    }

    #[test]
    fn any_of_several_secrets_may_match_and_is_named_by_index() {
        let p = provider(&["the-new-secret", SECRET]);
        assert_eq!(verify(&p, SIGNATURE), Ok(Verified { secret_index: 1 }));
    }

    #[test]
    fn a_wrong_secret_fails() {
        assert_eq!(
            verify(&provider(&["not the secret"]), SIGNATURE),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_changed_body_fails() {
        let p = provider(&[SECRET]);
        let result = verify_with(&p, &[("x-hub-signature-256", SIGNATURE)], b"Hello, World?");
        assert_eq!(result, Err(Rejection::InvalidSignature));
    }

    #[test]
    fn empty_truncated_and_prefix_signatures_fail() {
        let p = provider(&[SECRET]);
        let hex_part = SIGNATURE.strip_prefix("sha256=").unwrap();
        let half = format!("sha256={}", &hex_part[..32]);
        let short = &SIGNATURE[..SIGNATURE.len() - 2];
        for signature in ["sha256=", half.as_str(), short] {
            assert_eq!(
                verify(&p, signature),
                Err(Rejection::InvalidSignature),
                "{signature:?}"
            );
        }
    }

    #[test]
    fn uppercase_hex_is_the_same_signature() {
        let p = provider(&[SECRET]);
        let upper = format!("sha256={}", SIGNATURE[7..].to_uppercase());
        assert!(verify(&p, &upper).is_ok());
    }

    #[test]
    fn a_signature_without_its_prefix_or_not_in_hex_is_malformed() {
        let p = provider(&[SECRET]);
        let bare = SIGNATURE.strip_prefix("sha256=").unwrap();
        let sha1 = format!("sha1={bare}");
        let odd = &SIGNATURE[..SIGNATURE.len() - 1];
        let two = format!("{SIGNATURE},{SIGNATURE}");
        for signature in [bare, sha1.as_str(), "sha256=zz", odd, "", two.as_str()] {
            let result = verify(&p, signature);
            assert!(
                malformed_in(&result, "X-Hub-Signature-256"),
                "{signature:?}: {result:?}"
            );
        }
    }

    #[test]
    fn a_missing_or_repeated_signature_header_is_refused() {
        let p = provider(&[SECRET]);
        assert_eq!(
            verify_with(&p, &[("x-github-delivery", DELIVERY)], BODY),
            Err(Rejection::MissingHeader("X-Hub-Signature-256"))
        );
        let twice = verify_with(
            &p,
            &[
                ("x-hub-signature-256", SIGNATURE),
                ("x-hub-signature-256", SIGNATURE),
            ],
            BODY,
        );
        assert!(matches!(twice, Err(Rejection::MalformedHeader { .. })));
    }

    #[test]
    fn the_delivery_header_is_the_key_and_is_not_signed() {
        let p = provider(&[SECRET]);
        assert_eq!(
            delivery_id_for(&p, &[("x-github-delivery", DELIVERY)], BODY, &json!({})),
            Ok(DELIVERY.into())
        );
        assert!(!p.delivery_id_is_signed());
    }

    #[test]
    fn a_missing_or_invalid_delivery_header_is_refused() {
        let p = provider(&[SECRET]);
        let key = |pairs: &[(&str, &str)]| delivery_id_for(&p, pairs, BODY, &json!({}));
        assert_eq!(key(&[]), Err(Rejection::MissingHeader("X-GitHub-Delivery")));
        assert!(matches!(
            key(&[("x-github-delivery", "has a space")]),
            Err(Rejection::InvalidKey(_))
        ));
    }

    #[test]
    fn the_event_type_is_the_event_header_and_the_action_if_any() {
        let p = provider(&[SECRET]);
        let event =
            |payload: Value| event_type_for(&p, &[("x-github-event", "issues")], BODY, &payload);
        assert_eq!(
            event(json!({"action": "closed"})),
            Some("issues.closed".into())
        );
        assert_eq!(
            event(json!({"ref": "refs/heads/main"})),
            Some("issues".into())
        );
        assert_eq!(event(json!({"action": 3})), Some("issues".into()));
        assert_eq!(
            event_type_for(&p, &[], BODY, &json!({"action": "closed"})),
            None
        );
    }

    #[test]
    fn empty_secrets_are_refused_at_configuration() {
        assert_eq!(
            GitHub::new(&spec(&[], None)).unwrap_err(),
            ProviderConfigError::NoSecret
        );
        assert!(matches!(
            GitHub::new(&spec(&[SECRET, ""], None)),
            Err(ProviderConfigError::MalformedSecret { index: 1, .. })
        ));
    }
}
