//! Discord's interactions endpoint: an ed25519 signature, by the
//! application's key pair, over the `X-Signature-Timestamp` header's value
//! followed directly by the raw body (no separator), sent as 128 hex digits
//! in `X-Signature-Ed25519`.
//!
//! Each entry of `secrets` is the application's public key as the Developer
//! Portal shows it: 64 hex digits. Several may be configured (applications
//! sharing an endpoint); `Verified.secret_index` names the one that matched.
//! The receiver holds no private key, so it cannot sign.
//!
//! Discord's own libraries (discord-interactions-js and -python) check no
//! timestamp at all, so a captured interaction would verify for ever. The
//! timestamp is signed, so this verifier bounds it: 5 minutes either way by
//! default, the endpoint's `tolerance` otherwise (zero: no check).
//!
//! A PING (`"type": 1`) is Discord's handshake, sent when the endpoint URL is
//! saved and now and then after: it is answered `{"type":1}` and claims no
//! key. Every other interaction is keyed by its snowflake `id`, which the
//! signature covers because it is in the body.

use super::secrets::parse_each;
use super::{
    Delivery, HandshakeReply, Provider, ProviderConfigError, ProviderSpec, Rejection, RetryWindow,
    SignError, SignInput, Signed, SignedRequest, Verified, check_timestamp, key_at,
    parse_timestamp, required_header,
};
use chrono::{DateTime, Utc};
use ed25519_dalek::{PUBLIC_KEY_LENGTH, SIGNATURE_LENGTH, Signature, VerifyingKey};
use serde_json::Value;
use std::time::Duration;

const SIGNATURE_HEADER: &str = "X-Signature-Ed25519";
const TIMESTAMP_HEADER: &str = "X-Signature-Timestamp";
/// Not Discord's (its SDKs check none): the window Standard Webhooks and
/// Slack use, wide enough for any sane clock skew.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
/// Discord waits 3 s for the answer and then tells the user that the
/// interaction failed; it sends it again only when the user acts again,
/// which makes a new interaction with a new id.
const RETRY_WINDOW: RetryWindow = RetryWindow::NoAutomaticRetries {
    note: "interactions are not retried: Discord waits 3 s for the answer, then reports the interaction as failed to the user",
    source: "https://discord.com/developers/docs/interactions/receiving-and-responding#responding-to-an-interaction",
};
/// The interaction types, by the names Discord's libraries give them
/// (`InteractionType` in discord-interactions-js); the event type is the
/// name, then `.` and `/data/name` where the interaction has one.
const TYPES: &[(u64, &str)] = &[
    (1, "ping"),
    (2, "application_command"),
    (3, "message_component"),
    (4, "application_command_autocomplete"),
    (5, "modal_submit"),
];
const PING: u64 = 1;

#[derive(Debug)]
pub struct Discord {
    /// Public keys, so their `Debug` may show them.
    keys: Vec<VerifyingKey>,
    tolerance: Duration,
}

impl Discord {
    pub fn new(spec: &ProviderSpec) -> Result<Self, ProviderConfigError> {
        Ok(Discord {
            keys: parse_each(&spec.secrets, Self::parse_key)?,
            tolerance: spec.tolerance_or(DEFAULT_TOLERANCE),
        })
    }

    /// 64 hex digits: a 32-byte ed25519 public key. The reasons are fixed
    /// strings, so that a refused key never reaches a log. A small-order
    /// (weak) key is refused too: `verify_strict` would refuse every
    /// signature under it, an endpoint that silently accepts nothing.
    fn parse_key(text: &str) -> Result<VerifyingKey, &'static str> {
        let bytes: [u8; PUBLIC_KEY_LENGTH] = hex::decode(text)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or("expected the application's public key: 64 hex digits")?;
        VerifyingKey::from_bytes(&bytes)
            .ok()
            .filter(|key| !key.is_weak())
            .ok_or("not an ed25519 public key, or a weak (small-order) one")
    }

    /// The signature header's 64 bytes; `None` for any other length, which
    /// then fails like any other wrong signature.
    fn signature(text: &str) -> Result<Option<Signature>, Rejection> {
        let bytes = hex::decode(text).map_err(|_| Rejection::MalformedHeader {
            header: SIGNATURE_HEADER,
            reason: "it is not hex",
        })?;
        Ok(<[u8; SIGNATURE_LENGTH]>::try_from(bytes.as_slice())
            .ok()
            .map(|bytes| Signature::from_bytes(&bytes)))
    }
}

/// The interaction's type as a name (an unknown one as its number), with
/// the command's name after a `.`: `application_command.ping`.
fn event_type(payload: &Value) -> Option<String> {
    let number = payload.get("type")?.as_u64()?;
    let kind = TYPES
        .iter()
        .find(|(n, _)| *n == number)
        .map_or_else(|| number.to_string(), |(_, name)| (*name).to_owned());
    match crate::json_pointer::get(payload, "/data/name").and_then(Value::as_str) {
        Some(name) => Some(format!("{kind}.{name}")),
        None => Some(kind),
    }
}

impl Provider for Discord {
    fn name(&self) -> &'static str {
        "discord"
    }

    fn verify(
        &self,
        request: &SignedRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified, Rejection> {
        let signature = Self::signature(required_header(request.headers, SIGNATURE_HEADER)?)?;
        let timestamp = required_header(request.headers, TIMESTAMP_HEADER)?;
        let message = [timestamp.as_bytes(), request.body].concat();
        // Strict: refuses non-canonical signatures and small-order points,
        // so that a captured signature cannot be altered into a second one
        // that also passes (and so be taken for a new delivery).
        let secret_index = signature
            .and_then(|signature| {
                self.keys
                    .iter()
                    .position(|key| key.verify_strict(&message, &signature).is_ok())
            })
            .ok_or(Rejection::InvalidSignature)?;
        // The signature is checked before the timestamp is judged, so that
        // an unsigned request learns nothing about the receiver's clock.
        check_timestamp(
            parse_timestamp(timestamp, TIMESTAMP_HEADER)?,
            now,
            self.tolerance,
        )?;
        Ok(Verified { secret_index })
    }

    fn handshake(
        &self,
        _request: &SignedRequest<'_>,
        payload: &Value,
        _verified: &Verified,
    ) -> Result<Option<HandshakeReply>, Rejection> {
        if payload.get("type").and_then(Value::as_u64) != Some(PING) {
            return Ok(None);
        }
        Ok(Some(HandshakeReply {
            content_type: "application/json",
            body: br#"{"type":1}"#.to_vec(),
        }))
    }

    /// One interaction per request, keyed by its signed `id`.
    fn deliveries(
        &self,
        _request: &SignedRequest<'_>,
        payload: &Value,
    ) -> Result<Vec<Delivery>, Rejection> {
        Ok(Delivery::single_signed(
            key_at(payload, "/id")?,
            event_type(payload),
        ))
    }

    fn retry_window(&self) -> RetryWindow {
        RETRY_WINDOW
    }

    /// Discord signs with its private key, which the receiver never holds:
    /// only a test key given as `signing_key` (the 32-byte seed in hex)
    /// signs, for fixtures and `sign --signing-key`.
    fn sign(&self, input: &SignInput<'_>) -> Result<Signed, SignError> {
        let seed = input.signing_key.ok_or(SignError::NoSigningKey)?;
        let seed = hex::decode(seed.trim())
            .ok()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes.as_slice()).ok())
            .ok_or_else(|| {
                SignError::Body("the signing key must be 64 hex digits (an ed25519 seed)".into())
            })?;
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let timestamp = input.timestamp.to_string();
        let message = [timestamp.as_bytes(), input.body].concat();
        let signature = ed25519_dalek::Signer::sign(&key, &message);
        Ok(Signed::headers(vec![
            (
                SIGNATURE_HEADER.to_owned(),
                hex::encode(signature.to_bytes()),
            ),
            (TIMESTAMP_HEADER.to_owned(), timestamp),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::{
        assert_tolerated_either_way, headers, malformed_in, spec, verify_request,
    };

    // RFC 8032 §7.1 TEST 1: the secret key
    // 9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60, its
    // public key, and the signature of the empty message.
    const RFC_PUBLIC_KEY: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
    const RFC_EMPTY_SIGNATURE: &str = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";
    // RFC 8032 §7.1 TEST 2's public key: another application's.
    const OTHER_PUBLIC_KEY: &str =
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";

    // Discord publishes no fixed vector (discord-interactions-js's tests make
    // a fresh key pair per run). These are signed with the RFC 8032 TEST 1
    // key by a second implementation, Python's `cryptography` 48:
    // python3 -c 'from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey as K;print(K.from_private_bytes(bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")).sign(b"1700000000"+BODY).hex())'
    // The PING body is the SDK tests' `pingRequestBody`.
    const TIMESTAMP: i64 = 1_700_000_000;
    const PING_BODY: &[u8] =
        br#"{"id":"787053080478613555","token":"ThisIsATokenFromDiscordThatIsVeryLong","type":1,"version":1}"#;
    const PING_SIGNATURE: &str = "f0bd878adcef1f6d475c9644421905bd02b5de38e0d3ecfc6f58a711962c69ccc8dd7c9db312f9bdf08b1e1b8182e27a844da728c5e0dbb5507bf9931c1ed80b";
    const COMMAND_BODY: &[u8] =
        br#"{"id":"787053080478613556","type":2,"data":{"name":"ping"},"version":1}"#;
    const COMMAND_SIGNATURE: &str = "a763893c7c37569ced8d4b940d503398fb0ea6eecf10ddf36b6b565aa6a68f52bd42ad2555b067b4a859aa885853a3695e12b6216a0a8f8f42ca4efbed7acd09";

    fn provider(keys: &[&str]) -> Discord {
        Discord::new(&spec(keys, None)).unwrap()
    }

    fn verify_with(
        p: &Discord,
        signature: &str,
        timestamp: &str,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, Rejection> {
        let pairs = [(SIGNATURE_HEADER, signature), (TIMESTAMP_HEADER, timestamp)];
        verify_request(p, &pairs, body, now)
    }

    fn verify_ping(p: &Discord, signature: &str, now: i64) -> Result<Verified, Rejection> {
        verify_with(p, signature, &TIMESTAMP.to_string(), PING_BODY, now)
    }

    #[test]
    fn the_rfc_8032_test_1_key_verifies_its_published_signature() {
        let key = Discord::parse_key(RFC_PUBLIC_KEY).unwrap();
        let signature = Discord::signature(RFC_EMPTY_SIGNATURE).unwrap().unwrap();
        assert!(key.verify_strict(b"", &signature).is_ok());
        assert!(key.verify_strict(b"x", &signature).is_err());
    }

    #[test]
    fn the_rfc_vector_as_a_request_passes_the_signature_and_then_fails_its_empty_timestamp() {
        // Timestamp "" and body "" sign the empty message: the signature
        // matches, and only then is the timestamp judged.
        let result = verify_with(
            &provider(&[RFC_PUBLIC_KEY]),
            RFC_EMPTY_SIGNATURE,
            "",
            b"",
            TIMESTAMP,
        );
        assert!(malformed_in(&result, TIMESTAMP_HEADER), "{result:?}");
    }

    #[test]
    fn a_ping_verifies_and_is_answered_with_a_pong() {
        let p = provider(&[RFC_PUBLIC_KEY]);
        let verified = verify_ping(&p, PING_SIGNATURE, TIMESTAMP).unwrap();
        assert_eq!(verified, Verified { secret_index: 0 });
        let map = headers(&[]);
        let request = SignedRequest::post(&map, PING_BODY);
        let payload = p.payload(&request).unwrap();
        let reply = p.handshake(&request, &payload, &verified).unwrap().unwrap();
        assert_eq!(reply.body, br#"{"type":1}"#);
        assert_eq!(reply.content_type, "application/json");
    }

    #[test]
    fn a_command_is_keyed_by_its_signed_id_and_typed_by_its_kind_and_name() {
        let p = provider(&[RFC_PUBLIC_KEY]);
        let ts = TIMESTAMP.to_string();
        assert!(verify_with(&p, COMMAND_SIGNATURE, &ts, COMMAND_BODY, TIMESTAMP).is_ok());
        let map = headers(&[]);
        let request = SignedRequest::post(&map, COMMAND_BODY);
        let payload = p.payload(&request).unwrap();
        assert_eq!(
            p.handshake(&request, &payload, &Verified { secret_index: 0 }),
            Ok(None)
        );
        let deliveries = p.deliveries(&request, &payload).unwrap();
        assert_eq!(
            deliveries,
            vec![Delivery {
                key: "787053080478613556".into(),
                event_type: Some("application_command.ping".into()),
                item: None,
                fingerprint: None,
                key_signed: true,
            }]
        );
    }

    #[test]
    fn event_types_name_the_kind_and_keep_unknown_kinds_as_numbers() {
        let cases = [
            (
                r#"{"type":3,"data":{"custom_id":"b"}}"#,
                Some("message_component"),
            ),
            (r#"{"type":5}"#, Some("modal_submit")),
            (
                r#"{"type":4,"data":{"name":"find"}}"#,
                Some("application_command_autocomplete.find"),
            ),
            (r#"{"type":9}"#, Some("9")),
            (r#"{"type":"2"}"#, None),
            (r#"{}"#, None),
        ];
        for (body, expected) in cases {
            let payload: Value = serde_json::from_str(body).unwrap();
            assert_eq!(event_type(&payload).as_deref(), expected, "{body}");
        }
    }

    #[test]
    fn an_interaction_without_an_id_has_no_key() {
        let map = headers(&[]);
        let request = SignedRequest::post(&map, b"{}");
        let payload = serde_json::json!({"type": 2});
        assert_eq!(
            provider(&[RFC_PUBLIC_KEY]).deliveries(&request, &payload),
            Err(Rejection::MissingKey("/id"))
        );
    }

    #[test]
    fn a_changed_body_timestamp_or_signature_is_refused() {
        let p = provider(&[RFC_PUBLIC_KEY]);
        let ts = TIMESTAMP.to_string();
        let later = (TIMESTAMP + 1).to_string();
        let body = String::from_utf8(PING_BODY.to_vec())
            .unwrap()
            .replace("555", "556");
        let mut flipped = hex::decode(PING_SIGNATURE).unwrap();
        flipped[10] ^= 1;
        let flipped = hex::encode(flipped);
        let cases: [(&str, &str, &[u8]); 4] = [
            (PING_SIGNATURE, &ts, body.as_bytes()),
            (PING_SIGNATURE, &later, PING_BODY),
            (&flipped, &ts, PING_BODY),
            (COMMAND_SIGNATURE, &ts, PING_BODY),
        ];
        for (signature, timestamp, body) in cases {
            assert_eq!(
                verify_with(&p, signature, timestamp, body, TIMESTAMP),
                Err(Rejection::InvalidSignature),
                "{signature} {timestamp}"
            );
        }
    }

    #[test]
    fn another_applications_key_fails_and_the_index_names_the_key_that_matched() {
        assert_eq!(
            verify_ping(&provider(&[OTHER_PUBLIC_KEY]), PING_SIGNATURE, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
        assert_eq!(
            verify_ping(
                &provider(&[OTHER_PUBLIC_KEY, RFC_PUBLIC_KEY]),
                PING_SIGNATURE,
                TIMESTAMP
            ),
            Ok(Verified { secret_index: 1 })
        );
        // Upper-case hex is the same key.
        let upper = RFC_PUBLIC_KEY.to_ascii_uppercase();
        assert!(verify_ping(&provider(&[&upper]), PING_SIGNATURE, TIMESTAMP).is_ok());
    }

    #[test]
    fn the_timestamp_is_bounded_both_ways_though_discords_sdks_do_not_check_it() {
        let p = provider(&[RFC_PUBLIC_KEY]);
        assert_tolerated_either_way(|now| verify_ping(&p, PING_SIGNATURE, now), TIMESTAMP, 300);
        let minute = Discord::new(&spec(&[RFC_PUBLIC_KEY], Some(Duration::from_secs(60)))).unwrap();
        assert_tolerated_either_way(
            |now| verify_ping(&minute, PING_SIGNATURE, now),
            TIMESTAMP,
            60,
        );
        let unchecked = Discord::new(&spec(&[RFC_PUBLIC_KEY], Some(Duration::ZERO))).unwrap();
        assert!(verify_ping(&unchecked, PING_SIGNATURE, TIMESTAMP + 86_400 * 365).is_ok());
    }

    #[test]
    fn a_stale_request_with_a_bad_signature_says_only_that_the_signature_is_bad() {
        let p = provider(&[OTHER_PUBLIC_KEY]);
        assert_eq!(
            verify_ping(&p, PING_SIGNATURE, TIMESTAMP + 86_400),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_told_apart() {
        let p = provider(&[RFC_PUBLIC_KEY]);
        let ts = TIMESTAMP.to_string();
        let only = |pairs: &[(&str, &str)]| verify_request(&p, pairs, PING_BODY, TIMESTAMP);
        assert_eq!(
            only(&[(TIMESTAMP_HEADER, &ts)]),
            Err(Rejection::MissingHeader(SIGNATURE_HEADER))
        );
        assert_eq!(
            only(&[(SIGNATURE_HEADER, PING_SIGNATURE)]),
            Err(Rejection::MissingHeader(TIMESTAMP_HEADER))
        );
        let twice = only(&[
            (SIGNATURE_HEADER, PING_SIGNATURE),
            (SIGNATURE_HEADER, PING_SIGNATURE),
            (TIMESTAMP_HEADER, &ts),
        ]);
        assert!(malformed_in(&twice, SIGNATURE_HEADER), "{twice:?}");
        for bad in ["zz", "abc", "not hex at all"] {
            let result = verify_ping(&p, bad, TIMESTAMP);
            assert!(malformed_in(&result, SIGNATURE_HEADER), "{bad}: {result:?}");
        }
    }

    #[test]
    fn signatures_of_the_wrong_length_or_not_canonical_fail_without_panicking() {
        let p = provider(&[RFC_PUBLIC_KEY]);
        let good = hex::decode(PING_SIGNATURE).unwrap();
        let mut longer = good.clone();
        longer.push(0);
        // A valid R with an S far above the group order.
        let mut big_s = good.clone();
        big_s[32..].fill(0xff);
        for signature in [
            String::new(),
            hex::encode(&good[..63]),
            hex::encode(&longer),
            hex::encode([0u8; 64]),
            hex::encode([0xffu8; 64]),
            hex::encode(&big_s),
        ] {
            assert_eq!(
                verify_ping(&p, &signature, TIMESTAMP),
                Err(Rejection::InvalidSignature),
                "{signature}"
            );
        }
    }

    #[test]
    fn malformed_public_keys_are_refused_at_configuration_without_repeating_them() {
        for bad in [
            "",
            "not-hex",
            &RFC_PUBLIC_KEY[..62],
            &format!("{RFC_PUBLIC_KEY}00"),
            // y = 2 is the y of no point on the curve.
            "0200000000000000000000000000000000000000000000000000000000000000",
            // y = 1: the identity, a small-order (weak) key.
            "0100000000000000000000000000000000000000000000000000000000000000",
        ] {
            match Discord::new(&spec(&[RFC_PUBLIC_KEY, bad], None)) {
                Err(error @ ProviderConfigError::MalformedSecret { index: 1, .. }) => {
                    assert!(bad.len() < 8 || !error.to_string().contains(bad), "{error}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert_eq!(
            Discord::new(&spec(&[], None)).unwrap_err(),
            ProviderConfigError::NoSecret
        );
    }

    #[test]
    fn the_receiver_cannot_sign_and_discord_does_not_retry() {
        let input = SignInput {
            delivery_id: "787053080478613555",
            timestamp: TIMESTAMP,
            body: PING_BODY,
            event_type: None,
            signing_key: None,
        };
        let p = provider(&[RFC_PUBLIC_KEY]);
        assert!(matches!(p.sign(&input), Err(SignError::NoSigningKey)));
        assert_eq!(p.retry_window().window(), None);
        assert!(matches!(
            p.retry_window(),
            RetryWindow::NoAutomaticRetries { .. }
        ));
    }

    proptest::proptest! {
        // Discord is not among the fixture sources (it cannot sign), so the
        // crate-wide property tests do not reach it: noise never verifies,
        // never panics, and a PING's one-byte change is always refused.
        #[test]
        fn noise_never_verifies(
            signature in "[0-9a-fA-F]{0,140}|[ -~]{0,40}",
            timestamp in "[0-9]{0,12}|[ -~]{0,12}",
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
            now in 0i64..8_000_000_000,
        ) {
            let p = provider(&[RFC_PUBLIC_KEY]);
            let pairs = [(SIGNATURE_HEADER, signature.as_str()), (TIMESTAMP_HEADER, timestamp.as_str())];
            proptest::prop_assert!(verify_request(&p, &pairs, &body, now).is_err());
        }

        #[test]
        fn any_changed_byte_of_a_ping_is_refused(index in 0..PING_BODY.len(), flip in 1u8..=255) {
            let mut body = PING_BODY.to_vec();
            body[index] ^= flip;
            proptest::prop_assert_eq!(
                verify_with(&provider(&[RFC_PUBLIC_KEY]), PING_SIGNATURE, &TIMESTAMP.to_string(), &body, TIMESTAMP),
                Err(Rejection::InvalidSignature)
            );
        }
    }
}
