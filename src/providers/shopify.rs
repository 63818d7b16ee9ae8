//! Shopify: `X-Shopify-Hmac-Sha256: <base64>`, HMAC-SHA256 over the raw body
//! keyed with the app's client secret as shown, the key in
//! `X-Shopify-Webhook-Id` and the topic in `X-Shopify-Topic`. Shopify signs no
//! timestamp and not the webhook id.

use super::mac::{self, Algorithm};
use super::secrets::{parse_each, typed};
use super::{
    Provider, ProviderConfigError, ProviderSpec, Rejection, SignError, SignInput, SignedRequest,
    Verified, header, key_in_header, required_header,
};
use crate::secret::Secret;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;

const SIGNATURE_HEADER: &str = "X-Shopify-Hmac-Sha256";
const WEBHOOK_ID_HEADER: &str = "X-Shopify-Webhook-Id";
const TOPIC_HEADER: &str = "X-Shopify-Topic";
const EVENT_ID_HEADER: &str = "X-Shopify-Event-Id";
const TRIGGERED_AT_HEADER: &str = "X-Shopify-Triggered-At";
const DEFAULT_TOPIC: &str = "orders/create";

#[derive(Debug)]
pub struct Shopify {
    secrets: Vec<Secret>,
}

impl Shopify {
    pub fn new(spec: &ProviderSpec) -> Result<Self, ProviderConfigError> {
        Ok(Shopify {
            secrets: parse_each(&spec.secrets, typed)?,
        })
    }

    /// The value of `X-Shopify-Hmac-Sha256` for `body`.
    pub fn signature(key: &Secret, body: &[u8]) -> String {
        STANDARD.encode(mac::sign(Algorithm::Sha256, key.expose(), &[body]))
    }
}

impl Provider for Shopify {
    fn name(&self) -> &'static str {
        "shopify"
    }

    fn verify(&self, request: &SignedRequest<'_>, _: DateTime<Utc>) -> Result<Verified, Rejection> {
        let value = required_header(request.headers, SIGNATURE_HEADER)?;
        // Exactly one signature: a comma or a space is not base64 and fails
        // to decode here.
        let candidate = STANDARD
            .decode(value)
            .map_err(|_| Rejection::MalformedHeader {
                header: SIGNATURE_HEADER,
                reason: "it is not one base64 signature",
            })?;
        // Constant-time, and any other length fails, so an empty value or a
        // prefix of the right tag cannot match.
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
        key_in_header(request.headers, WEBHOOK_ID_HEADER)
    }

    fn event_type(&self, request: &SignedRequest<'_>, _: &Value) -> Option<String> {
        header(request.headers, TOPIC_HEADER)
            .ok()?
            .map(str::to_owned)
    }

    /// The webhook id header is not covered by the signature.
    fn delivery_id_is_signed(&self) -> bool {
        false
    }

    fn sign(&self, input: &SignInput<'_>) -> Result<Vec<(String, String)>, SignError> {
        let secret = self.secrets.first().ok_or(SignError::NoSecret)?;
        let mut headers = vec![
            (SIGNATURE_HEADER.into(), Self::signature(secret, input.body)),
            (WEBHOOK_ID_HEADER.into(), input.delivery_id.into()),
            (
                TOPIC_HEADER.into(),
                input.event_type.unwrap_or(DEFAULT_TOPIC).into(),
            ),
            (EVENT_ID_HEADER.into(), input.delivery_id.into()),
        ];
        // Informational only (unsigned, never checked); left out for a
        // timestamp outside chrono's range rather than made up.
        if let Some(at) = DateTime::from_timestamp(input.timestamp, 0) {
            headers.push((
                TRIGGERED_AT_HEADER.into(),
                at.to_rfc3339_opts(SecondsFormat::Secs, true),
            ));
        }
        Ok(headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::{
        delivery_id_for, event_type_for, malformed_in, pairs, spec, verify_request,
    };
    use serde_json::json;

    // Shopify's documentation gives no worked example. This vector is from
    // Shopify's official Node library, Shopify/shopify-api-js:
    // packages/shopify-api/lib/webhooks/__tests__/validate.test.ts expects
    // this HMAC for the body below, signed with `apiSecretKey` from
    // packages/shopify-api/lib/__tests__/test-config.ts, under the webhook id
    // and topic of __tests__/utils.ts.
    const SECRET: &str = "test_secret_key";
    const BODY: &[u8] = br#"{"foo": "bar"}"#;
    const SIGNATURE: &str = "B23tXN681gZ0qIWNRrgtzBE9XSDo5yaUu6wfmhu3a7g=";
    const WEBHOOK_ID: &str = "123456789";
    const TOPIC: &str = "products/create";

    /// Shopify signs no timestamp, so any clock will do.
    const NOW: i64 = 1_700_000_000;

    fn provider(secrets: &[&str]) -> Shopify {
        Shopify::new(&spec(secrets, None)).unwrap()
    }

    fn verify_with(
        p: &Shopify,
        pairs: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Verified, Rejection> {
        verify_request(p, pairs, body, NOW)
    }

    fn verify(p: &Shopify, signature: &str) -> Result<Verified, Rejection> {
        verify_with(
            p,
            &[
                ("x-shopify-hmac-sha256", signature),
                ("x-shopify-webhook-id", WEBHOOK_ID),
                ("x-shopify-topic", TOPIC),
            ],
            BODY,
        )
    }

    #[test]
    fn the_vector_of_shopifys_own_library_verifies() {
        assert_eq!(
            verify(&provider(&[SECRET]), SIGNATURE),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn signing_reproduces_the_library_vector_with_every_header() {
        let input = SignInput {
            delivery_id: WEBHOOK_ID,
            timestamp: 1_700_000_000,
            body: BODY,
            event_type: None,
        };
        let headers = provider(&[SECRET]).sign(&input).unwrap();
        assert_eq!(
            headers,
            vec![
                ("X-Shopify-Hmac-Sha256".into(), SIGNATURE.into()),
                ("X-Shopify-Webhook-Id".into(), WEBHOOK_ID.into()),
                ("X-Shopify-Topic".into(), "orders/create".into()),
                ("X-Shopify-Event-Id".into(), WEBHOOK_ID.into()),
                (
                    "X-Shopify-Triggered-At".into(),
                    "2023-11-14T22:13:20Z".into()
                ),
            ]
        );
    }

    #[test]
    fn what_is_signed_verifies_with_the_id_and_topic_it_was_given() {
        let p = provider(&["shpss_a-fresh-secret"]);
        let body = br#"{"id":820982911946154508}"#;
        let input = SignInput {
            delivery_id: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
            timestamp: 1_700_000_000,
            body,
            event_type: Some("orders/paid"),
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
            Ok(input.delivery_id.into())
        );
        assert_eq!(
            event_type_for(&p, &pairs, body, &payload),
            Some("orders/paid".into())
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
            verify(&provider(&["another_secret_key"]), SIGNATURE),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_changed_body_fails() {
        let p = provider(&[SECRET]);
        let result = verify_with(
            &p,
            &[("x-shopify-hmac-sha256", SIGNATURE)],
            br#"{"foo":"bar"}"#,
        );
        assert_eq!(result, Err(Rejection::InvalidSignature));
    }

    #[test]
    fn empty_truncated_and_prefix_signatures_fail() {
        let p = provider(&[SECRET]);
        let raw = STANDARD.decode(SIGNATURE).unwrap();
        let prefix = STANDARD.encode(&raw[..16]);
        let short = &SIGNATURE[..SIGNATURE.len() - 4];
        for signature in ["", prefix.as_str(), short] {
            assert_eq!(
                verify(&p, signature),
                Err(Rejection::InvalidSignature),
                "{signature:?}"
            );
        }
    }

    #[test]
    fn the_right_tag_in_hex_is_not_shopifys_form_and_fails() {
        // 64 hex digits are also valid base64 (of 48 bytes), so this is a
        // wrong signature rather than a malformed header.
        let p = provider(&[SECRET]);
        let raw = STANDARD.decode(SIGNATURE).unwrap();
        assert_eq!(
            verify(&p, &hex::encode(&raw)),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn prefixed_or_several_signatures_are_malformed() {
        let p = provider(&[SECRET]);
        let prefixed = format!("sha256={SIGNATURE}");
        let two = format!("{SIGNATURE},{SIGNATURE}");
        let spaced = format!("{SIGNATURE} {SIGNATURE}");
        for signature in [
            prefixed.as_str(),
            two.as_str(),
            spaced.as_str(),
            &SIGNATURE[..SIGNATURE.len() - 1],
        ] {
            let result = verify(&p, signature);
            assert!(
                malformed_in(&result, "X-Shopify-Hmac-Sha256"),
                "{signature:?}: {result:?}"
            );
        }
    }

    #[test]
    fn a_missing_signature_header_is_refused() {
        let p = provider(&[SECRET]);
        assert_eq!(
            verify_with(&p, &[("x-shopify-webhook-id", WEBHOOK_ID)], BODY),
            Err(Rejection::MissingHeader("X-Shopify-Hmac-Sha256"))
        );
    }

    #[test]
    fn the_webhook_id_is_the_key_and_is_not_signed() {
        let p = provider(&[SECRET]);
        assert_eq!(
            delivery_id_for(
                &p,
                &[("x-shopify-webhook-id", WEBHOOK_ID)],
                BODY,
                &json!({})
            ),
            Ok(WEBHOOK_ID.into())
        );
        assert!(!p.delivery_id_is_signed());
    }

    #[test]
    fn a_missing_or_invalid_webhook_id_is_refused() {
        let p = provider(&[SECRET]);
        let key = |pairs: &[(&str, &str)]| delivery_id_for(&p, pairs, BODY, &json!({}));
        assert_eq!(
            key(&[]),
            Err(Rejection::MissingHeader("X-Shopify-Webhook-Id"))
        );
        assert!(matches!(
            key(&[("x-shopify-webhook-id", "")]),
            Err(Rejection::InvalidKey(_))
        ));
    }

    #[test]
    fn the_event_type_is_the_topic_header() {
        let p = provider(&[SECRET]);
        let event = |pairs: &[(&str, &str)]| event_type_for(&p, pairs, BODY, &json!({}));
        assert_eq!(event(&[("x-shopify-topic", TOPIC)]), Some(TOPIC.into()));
        assert_eq!(event(&[]), None);
    }

    #[test]
    fn empty_secrets_are_refused_at_configuration() {
        assert_eq!(
            Shopify::new(&spec(&[], None)).unwrap_err(),
            ProviderConfigError::NoSecret
        );
        assert!(matches!(
            Shopify::new(&spec(&[""], None)),
            Err(ProviderConfigError::MalformedSecret { index: 0, .. })
        ));
    }
}
