//! Standard Webhooks (the scheme Svix, Clerk, Resend and others send):
//! `webhook-id`, `webhook-timestamp` and `webhook-signature` (or the same with
//! `svix-`). Every signature is over `{id}.{timestamp}.{body}`, and the
//! signature header is a space-separated list of `<version>,<base64>` entries.
//!
//! An endpoint's `secrets` may hold keys of either kind, mixed, so that a
//! sender can rotate from one to the other:
//!
//! - `whsec_<base64>` (the prefix may be left out, as the specification
//!   allows): a shared key of at least 16 bytes, checked against `v1` entries
//!   (HMAC-SHA256, compared in constant time).
//! - `whpk_<base64 of 32 bytes>` (the prefix is required): the sender's
//!   ed25519 public key, checked against `v1a` entries (the base64 of a 64-byte
//!   ed25519 signature), with strict verification.
//!
//! A `whsk_` private key is refused at configuration: the receiver only
//! verifies, so it needs the public key, and the private one should never
//! leave the sender. Entries of other versions are ignored; a `v1` or `v1a`
//! entry that is not base64 makes the header malformed. `Verified.secret_index`
//! is the position, in the configured list, of the key that matched.
//!
//! `sign` uses the first `whsec_` key; an endpoint with only public keys
//! cannot sign, since the receiver has no private key.

use super::mac::{self, Algorithm, MAX_SIGNATURES, TOO_MANY_SIGNATURES};
use super::secrets::parse_each;
use super::{
    Delivery, Provider, ProviderConfigError, ProviderSpec, Rejection, RetryWindow, SignError,
    SignInput, Signed, SignedRequest, Verified, check_key, check_timestamp, header_named,
    parse_timestamp,
};
use crate::secret::Secret;
use actix_web::http::header::{HeaderMap, HeaderName};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use ed25519_dalek::{PUBLIC_KEY_LENGTH, SIGNATURE_LENGTH, Signature, VerifyingKey};
use serde_json::Value;
use std::time::Duration;

const SECRET_PREFIX: &str = "whsec_";
const PUBLIC_KEY_PREFIX: &str = "whpk_";
const PRIVATE_KEY_PREFIX: &str = "whsk_";
/// Why a `whsk_` key is refused; like every reason here, it never repeats
/// the key.
const PRIVATE_KEY_REFUSED: &str = "it is a whsk_ private key: configure the sender's whpk_ \
    public key instead (the receiver only verifies, and the private key should never leave \
    the sender)";
/// Svix's schedule, which Standard Webhooks senders follow: after the first
/// attempt 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: 27 h 35 min 5 s.
const RETRY_WINDOW: RetryWindow = RetryWindow::Retries {
    window: Duration::from_secs(5 + 5 * 60 + 30 * 60 + 2 * 3600 + 5 * 3600 + 20 * 3600),
    schedule: "Svix: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h",
    source: "https://docs.svix.com/retries",
};
/// The specification's recommended tolerance.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct StandardWebhooks {
    /// `standard-webhooks`, or the name of a provider that sends it
    /// unchanged (`clerk`, `resend`).
    name: &'static str,
    keys: Vec<Key>,
    tolerance: Duration,
}

/// One configured key, in the order of configuration.
#[derive(Debug)]
enum Key {
    /// `whsec_`: checked against `v1` entries.
    Symmetric(Secret),
    /// `whpk_`: checked against `v1a` entries. A public key, so its `Debug`
    /// may show it.
    Public(VerifyingKey),
}

/// A header's names, the specification's first and Svix's second: each is
/// made once, here, rather than checked again on every delivery.
type Names = [(HeaderName, &'static str); 2];

static ID_HEADERS: Names = [
    (HeaderName::from_static("webhook-id"), "webhook-id"),
    (HeaderName::from_static("svix-id"), "svix-id"),
];
static TIMESTAMP_HEADERS: Names = [
    (
        HeaderName::from_static("webhook-timestamp"),
        "webhook-timestamp",
    ),
    (HeaderName::from_static("svix-timestamp"), "svix-timestamp"),
];
static SIGNATURE_HEADERS: Names = [
    (
        HeaderName::from_static("webhook-signature"),
        "webhook-signature",
    ),
    (HeaderName::from_static("svix-signature"), "svix-signature"),
];

/// The header under its first name, else under its second; missing under
/// both is refused by the first.
fn either<'a>(
    map: &'a HeaderMap,
    [(primary, label), (alias, alias_label)]: &Names,
) -> Result<&'a str, Rejection> {
    match header_named(map, primary, label)? {
        Some(value) => Ok(value),
        None => header_named(map, alias, alias_label)?.ok_or(Rejection::MissingHeader(label)),
    }
}

/// The three headers, each under its `webhook-` or its `svix-` name.
struct Headers<'a> {
    id: &'a str,
    timestamp: &'a str,
    signature: &'a str,
}

/// The decoded entries of a signature header that this verifier can check.
#[derive(Default)]
struct Candidates {
    /// `v1` entries, of any length: `mac::verify_any` refuses a wrong one.
    hmac: Vec<Vec<u8>>,
    /// `v1a` entries of the one possible length.
    ed25519: Vec<Signature>,
}

impl StandardWebhooks {
    pub fn new(spec: &ProviderSpec) -> Result<Self, ProviderConfigError> {
        Self::named("standard-webhooks", spec)
    }

    /// The scheme under the name of a provider that sends it as it is.
    pub fn named(name: &'static str, spec: &ProviderSpec) -> Result<Self, ProviderConfigError> {
        Ok(StandardWebhooks {
            name,
            keys: parse_each(&spec.secrets, Self::parse_key)?,
            tolerance: spec.tolerance_or(DEFAULT_TOLERANCE),
        })
    }

    /// Tells the kinds of key apart by their prefixes. The reasons are fixed
    /// strings, so that a refused key never reaches a log or an error.
    fn parse_key(key: &str) -> Result<Key, &'static str> {
        if key.starts_with(PRIVATE_KEY_PREFIX) {
            return Err(PRIVATE_KEY_REFUSED);
        }
        match key.strip_prefix(PUBLIC_KEY_PREFIX) {
            Some(encoded) => Self::parse_public_key(encoded).map(Key::Public),
            None => Self::parse_secret(key).map(Key::Symmetric),
        }
    }

    /// `whsec_` followed by base64; the prefix is optional, as in the spec.
    pub fn parse_secret(secret: &str) -> Result<Secret, &'static str> {
        let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| "expected whsec_ followed by base64")?;
        if key.len() < 16 {
            return Err("the key is shorter than 16 bytes");
        }
        Ok(Secret::new(key))
    }

    /// The base64 after `whpk_`: a 32-byte ed25519 public key.
    fn parse_public_key(encoded: &str) -> Result<VerifyingKey, &'static str> {
        let bytes = STANDARD
            .decode(encoded)
            .map_err(|_| "expected whpk_ followed by base64")?;
        let bytes = <[u8; PUBLIC_KEY_LENGTH]>::try_from(bytes.as_slice())
            .map_err(|_| "a whpk_ key must be 32 bytes (an ed25519 public key)")?;
        let key = VerifyingKey::from_bytes(&bytes)
            .map_err(|_| "the whpk_ key is not a valid ed25519 public key")?;
        // `verify_strict` refuses every signature under a small-order key;
        // saying so now beats an endpoint that silently accepts nothing.
        if key.is_weak() {
            return Err("the whpk_ key is a weak (small-order) ed25519 key");
        }
        Ok(key)
    }

    /// The signature of one message, as it appears after `v1,`.
    pub fn signature(key: &Secret, id: &str, timestamp: &str, body: &[u8]) -> String {
        STANDARD.encode(mac::sign(
            Algorithm::Sha256,
            key.expose(),
            &signed_parts(id, timestamp, body),
        ))
    }

    fn headers<'a>(map: &'a HeaderMap) -> Result<Headers<'a>, Rejection> {
        Ok(Headers {
            id: Self::id(map)?,
            timestamp: either(map, &TIMESTAMP_HEADERS)?,
            signature: either(map, &SIGNATURE_HEADERS)?,
        })
    }

    fn id(map: &HeaderMap) -> Result<&str, Rejection> {
        either(map, &ID_HEADERS)
    }

    /// Splits the signature header into the entries this verifier checks.
    /// Whether an entry is well-formed does not depend on which keys are
    /// configured, so a header is refused or accepted the same everywhere.
    fn candidates(signature: &str) -> Result<Candidates, Rejection> {
        let malformed = |reason| Rejection::MalformedHeader {
            header: "webhook-signature",
            reason,
        };
        let mut candidates = Candidates::default();
        for entry in signature.split(' ').filter(|e| !e.is_empty()) {
            let Some((version, encoded)) = entry.split_once(',') else {
                return Err(malformed(
                    "expected space-separated v1,<base64> or v1a,<base64> entries",
                ));
            };
            if matches!(version, "v1" | "v1a")
                && candidates.hmac.len() + candidates.ed25519.len() == MAX_SIGNATURES
            {
                return Err(malformed(TOO_MANY_SIGNATURES));
            }
            match version {
                "v1" => {
                    let decoded = STANDARD
                        .decode(encoded)
                        .map_err(|_| malformed("a v1 signature is not base64"))?;
                    candidates.hmac.push(decoded);
                }
                "v1a" => {
                    let decoded = STANDARD
                        .decode(encoded)
                        .map_err(|_| malformed("a v1a signature is not base64"))?;
                    // Any other length cannot be an ed25519 signature: it is
                    // left out, so that it fails like any other wrong one.
                    if let Ok(bytes) = <[u8; SIGNATURE_LENGTH]>::try_from(decoded.as_slice()) {
                        candidates.ed25519.push(Signature::from_bytes(&bytes));
                    }
                }
                // Versions this verifier does not know (`v2`, ...) are
                // someone else's; anything not shaped like a version is a
                // broken header, not a future scheme.
                other if is_version(other) => {}
                _ => return Err(malformed("an entry's version is not v<digits><letters>")),
            }
        }
        Ok(candidates)
    }
}

/// `v` followed by a digit and then letters or digits, as in `v1`, `v1a`.
fn is_version(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next() == Some('v')
        && chars.next().is_some_and(|c| c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_alphanumeric())
}

/// `{id}.{timestamp}.{body}`, with the timestamp exactly as sent.
fn signed_parts<'a>(id: &'a str, timestamp: &'a str, body: &'a [u8]) -> [&'a [u8]; 5] {
    [id.as_bytes(), b".", timestamp.as_bytes(), b".", body]
}

impl Provider for StandardWebhooks {
    fn name(&self) -> &'static str {
        self.name
    }

    fn verify(
        &self,
        request: &SignedRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified, Rejection> {
        let headers = Self::headers(request.headers)?;
        let timestamp = parse_timestamp(headers.timestamp, "webhook-timestamp")?;
        let candidates = Self::candidates(headers.signature)?;
        let parts = signed_parts(headers.id, headers.timestamp, request.body);
        // ed25519 signs one contiguous message; it is only assembled when
        // there is a `v1a` entry to check it against.
        let message = if candidates.ed25519.is_empty() {
            Vec::new()
        } else {
            parts.concat()
        };
        let matched = self.keys.iter().position(|key| match key {
            // Constant-time, and any other length fails, so an empty `v1,`
            // or a prefix of the right tag cannot match.
            Key::Symmetric(secret) => {
                mac::verify_any(Algorithm::Sha256, secret.expose(), &parts, &candidates.hmac)
            }
            // Strict: refuses non-canonical signatures and small-order
            // points, so a captured signature cannot be altered into a
            // second one that also passes.
            Key::Public(public) => candidates
                .ed25519
                .iter()
                .any(|signature| public.verify_strict(&message, signature).is_ok()),
        });
        let secret_index = matched.ok_or(Rejection::InvalidSignature)?;
        check_timestamp(timestamp, now, self.tolerance)?;
        Ok(Verified { secret_index })
    }

    /// The `webhook-id` is the key, and the signature covers it.
    fn deliveries(
        &self,
        request: &SignedRequest<'_>,
        payload: &Value,
    ) -> Result<Vec<Delivery>, Rejection> {
        let id = Self::headers(request.headers)?.id;
        check_key(id)?;
        Ok(Delivery::single_signed(
            id.to_owned(),
            payload
                .get("type")
                .and_then(Value::as_str)
                .map(str::to_owned),
        ))
    }

    /// The `webhook-id` (or `svix-id`), as [`Provider::deliveries`] takes
    /// it.
    fn header_key<'r>(&self, request: &SignedRequest<'r>) -> Option<&'r str> {
        // Asked only of a verified request, whose three headers were there.
        Self::id(request.headers).ok()
    }

    fn retry_window(&self) -> RetryWindow {
        RETRY_WINDOW
    }

    /// Signs with the first `whsec_` key. Public keys cannot sign: the
    /// private half stays with the sender.
    fn sign(&self, input: &SignInput<'_>) -> Result<Signed, SignError> {
        let secret = self
            .keys
            .iter()
            .find_map(|key| match key {
                Key::Symmetric(secret) => Some(secret),
                Key::Public(_) => None,
            })
            .ok_or(if self.keys.is_empty() {
                SignError::NoSecret
            } else {
                SignError::NoSigningKey
            })?;
        let timestamp = input.timestamp.to_string();
        let signature = Self::signature(secret, input.delivery_id, &timestamp, input.body);
        // Clerk and Resend send the `svix-` names; either is accepted.
        let prefix = if self.name == "standard-webhooks" {
            "webhook"
        } else {
            "svix"
        };
        Ok(Signed::headers(vec![
            (format!("{prefix}-id"), input.delivery_id.into()),
            (format!("{prefix}-timestamp"), timestamp),
            (format!("{prefix}-signature"), format!("v1,{signature}")),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::{
        assert_tolerated_either_way, malformed_in, spec, verify_request,
    };

    // The example in Svix's "Verifying webhooks manually" documentation, which
    // is also the Standard Webhooks specification's worked example.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn provider(secrets: &[&str]) -> StandardWebhooks {
        StandardWebhooks::new(&spec(secrets, None)).unwrap()
    }

    fn verify(p: &StandardWebhooks, signature: &str, now: i64) -> Result<Verified, Rejection> {
        let ts = TIMESTAMP.to_string();
        let pairs = [
            ("webhook-id", ID),
            ("webhook-timestamp", &ts),
            ("webhook-signature", signature),
        ];
        verify_request(p, &pairs, BODY, now)
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
            delivery_id: ID,
            timestamp: TIMESTAMP,
            body: BODY,
            event_type: None,
            signing_key: None,
        };
        let headers = provider(&[SECRET]).sign(&input).unwrap();
        assert_eq!(
            headers.headers[2],
            ("webhook-signature".into(), SIGNATURE.into())
        );
    }

    #[test]
    fn any_of_several_signatures_and_any_of_several_secrets_may_match() {
        let other = "whsec_c2VjcmV0LW51bWJlci10d28tMTIzNDU2Nzg=";
        let p = provider(&[other, SECRET]);
        let list = format!("v1,AAAA v1a,AAAA v2,ignored {SIGNATURE}");
        assert_eq!(
            verify(&p, &list, TIMESTAMP),
            Ok(Verified { secret_index: 1 })
        );
    }

    #[test]
    fn at_most_sixteen_signatures_are_checked() {
        let p = provider(&[SECRET]);
        let wrong = format!("v1,{}", STANDARD.encode([7u8; 32]));
        // Fifteen wrong ones and the right one last: checked, and it matches.
        let sixteen = format!("{} {SIGNATURE}", vec![wrong.as_str(); 15].join(" "));
        assert_eq!(
            verify(&p, &sixteen, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
        // Entries of versions this verifier does not check cost nothing and
        // are not counted.
        let with_foreign = format!("{} {sixteen}", vec!["v2,AAAA"; 40].join(" "));
        assert_eq!(
            verify(&p, &with_foreign, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
        // A seventeenth `v1` or `v1a` entry refuses the header before any
        // HMAC is computed, whichever entry would have matched.
        for extra in [wrong.as_str(), "v1a,AAAA"] {
            let seventeen = format!("{SIGNATURE} {} {extra}", vec![wrong.as_str(); 15].join(" "));
            assert!(
                malformed_in(&verify(&p, &seventeen, TIMESTAMP), "webhook-signature"),
                "{extra}"
            );
        }
    }

    #[test]
    fn empty_truncated_and_prefix_signatures_fail() {
        let p = provider(&[SECRET]);
        let full = SIGNATURE.strip_prefix("v1,").unwrap();
        let raw = STANDARD.decode(full).unwrap();
        let prefix = format!("v1,{}", STANDARD.encode(&raw[..16]));
        for signature in [
            "v1,",
            "",
            " ",
            "v2,abc",
            &prefix,
            &SIGNATURE[..SIGNATURE.len() - 4],
        ] {
            let result = verify(&p, signature, TIMESTAMP);
            assert!(result.is_err(), "{signature:?} must not verify");
        }
        assert_eq!(
            verify(&p, "v1,", TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
        assert_eq!(
            verify(&p, &prefix, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_wrong_secret_fails() {
        let p = provider(&["whsec_c2VjcmV0LW51bWJlci10d28tMTIzNDU2Nzg="]);
        assert_eq!(
            verify(&p, SIGNATURE, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn the_timestamp_is_checked_in_both_directions() {
        let p = provider(&[SECRET]);
        assert_tolerated_either_way(|now| verify(&p, SIGNATURE, now), TIMESTAMP, 300);
    }

    #[test]
    fn a_zero_tolerance_accepts_an_old_recorded_delivery() {
        let p = StandardWebhooks::new(&spec(&[SECRET], Some(Duration::ZERO))).unwrap();
        assert!(verify(&p, SIGNATURE, TIMESTAMP + 86_400 * 365).is_ok());
    }

    #[test]
    fn svix_header_names_are_accepted() {
        let ts = TIMESTAMP.to_string();
        let pairs = [
            ("svix-id", ID),
            ("svix-timestamp", &ts),
            ("svix-signature", SIGNATURE),
        ];
        assert!(verify_request(&provider(&[SECRET]), &pairs, BODY, TIMESTAMP).is_ok());
    }

    fn verify_headers(pairs: &[(&str, &str)]) -> Result<Verified, Rejection> {
        verify_request(&provider(&[SECRET]), pairs, BODY, TIMESTAMP)
    }

    #[test]
    fn missing_and_malformed_headers_are_told_apart() {
        let ts = TIMESTAMP.to_string();
        assert_eq!(
            verify_headers(&[("webhook-id", ID), ("webhook-signature", SIGNATURE)]),
            Err(Rejection::MissingHeader("webhook-timestamp"))
        );
        let cases = [
            ("soon", SIGNATURE, "webhook-timestamp"),
            (ts.as_str(), "v1,!!notbase64", "webhook-signature"),
        ];
        for (timestamp, signature, header) in cases {
            let result = verify_headers(&[
                ("webhook-id", ID),
                ("webhook-timestamp", timestamp),
                ("webhook-signature", signature),
            ]);
            assert!(malformed_in(&result, header), "{result:?}");
        }
    }

    #[test]
    fn malformed_secrets_are_refused_at_configuration() {
        for bad in ["whsec_", "whsec_!!!", "whsec_c2hvcnQ="] {
            assert!(matches!(
                StandardWebhooks::new(&spec(&[bad], None)),
                Err(ProviderConfigError::MalformedSecret { index: 0, .. })
            ));
        }
        assert_eq!(
            StandardWebhooks::new(&spec(&[], None)).unwrap_err(),
            ProviderConfigError::NoSecret
        );
    }

    // The one published v1a vector: the Go library's TestAsymmetricWebhookSign
    // (standard-webhooks/standard-webhooks, libraries/go/webhook_asymmetric_test.go)
    // signs ID, TIMESTAMP and BODY with the 32-byte seed
    // "VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=" and expects this
    // signature. It publishes no public key; this one was derived from the
    // seed with Python's `cryptography` 48.0.0
    // (`Ed25519PrivateKey.from_private_bytes(seed).public_key()`), which also
    // verifies the signature and reproduces it.
    const GO_PUBLIC_KEY: &str = "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g=";
    const GO_SIGNATURE: &str = "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==";

    // No other v1a vector is published (the JavaScript, Python and Rust
    // libraries test only v1). This second key pair was generated with
    // Python's `cryptography` 48.0.0 from the fixed seed
    // b"IDEMPOTENT-RECEIVER-V1A-TESTKEY2", signing the same ID, TIMESTAMP
    // and BODY, so that rotation and wrong-key cases do not rest on our code.
    const SECOND_PUBLIC_KEY: &str = "whpk_0YjePZaTtS5gmFmbd056XD0dKulMRjpVFFPWfq5VW8c=";
    const SECOND_SIGNATURE: &str = "v1a,V6wf0Eq7dcaWDGdpVKibLwzPkZxiANviuZIPaNRtKCh87D3IPxuQRgnuVSqX6ZTTFrD+zuEoT2c4gLAhYs42DQ==";

    fn config_error(secret: &str) -> ProviderConfigError {
        match StandardWebhooks::new(&spec(&[secret], None)) {
            Ok(_) => panic!("{secret:?} must be refused"),
            Err(e) => e,
        }
    }

    /// The raw bytes of a `v1a,<base64>` entry.
    fn raw(entry: &str) -> Vec<u8> {
        STANDARD
            .decode(entry.strip_prefix("v1a,").unwrap())
            .unwrap()
    }

    fn v1a(bytes: &[u8]) -> String {
        format!("v1a,{}", STANDARD.encode(bytes))
    }

    #[test]
    fn the_go_library_v1a_vector_verifies_under_its_public_key() {
        assert_eq!(
            verify(&provider(&[GO_PUBLIC_KEY]), GO_SIGNATURE, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
        assert_eq!(
            verify(&provider(&[SECOND_PUBLIC_KEY]), SECOND_SIGNATURE, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn a_v1a_signature_by_another_key_fails() {
        assert_eq!(
            verify(&provider(&[SECOND_PUBLIC_KEY]), GO_SIGNATURE, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_v1a_signature_fails_for_another_body_id_or_timestamp() {
        let p = provider(&[GO_PUBLIC_KEY]);
        let ts = TIMESTAMP.to_string();
        let later = (TIMESTAMP + 1).to_string();
        let cases: [(&str, &str, &[u8]); 3] = [
            (ID, &ts, br#"{"test": 2432232315}"#),
            ("msg_p5jXN8AQM9LWM0D4loKWxJel", &ts, BODY),
            (ID, &later, BODY),
        ];
        for (id, timestamp, body) in cases {
            let pairs = [
                ("webhook-id", id),
                ("webhook-timestamp", timestamp),
                ("webhook-signature", GO_SIGNATURE),
            ];
            assert_eq!(
                verify_request(&p, &pairs, body, TIMESTAMP),
                Err(Rejection::InvalidSignature),
                "{id} {timestamp}"
            );
        }
    }

    #[test]
    fn v1a_entries_are_checked_only_against_public_keys_and_v1_only_against_secrets() {
        // The same bytes under the other version must not match.
        let v1a_as_v1 = GO_SIGNATURE.replacen("v1a,", "v1,", 1);
        let v1_as_v1a = SIGNATURE.replacen("v1,", "v1a,", 1);
        let both = provider(&[SECRET, GO_PUBLIC_KEY]);
        for signature in [v1a_as_v1.as_str(), v1_as_v1a.as_str()] {
            assert_eq!(
                verify(&both, signature, TIMESTAMP),
                Err(Rejection::InvalidSignature),
                "{signature}"
            );
        }
        assert_eq!(
            verify(&provider(&[SECRET]), GO_SIGNATURE, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
        assert_eq!(
            verify(&provider(&[GO_PUBLIC_KEY]), SIGNATURE, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn secrets_and_public_keys_mix_and_the_index_names_the_key_that_matched() {
        let p = provider(&[SECRET, SECOND_PUBLIC_KEY, GO_PUBLIC_KEY]);
        assert_eq!(
            verify(&p, SIGNATURE, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
        assert_eq!(
            verify(&p, SECOND_SIGNATURE, TIMESTAMP),
            Ok(Verified { secret_index: 1 })
        );
        assert_eq!(
            verify(&p, GO_SIGNATURE, TIMESTAMP),
            Ok(Verified { secret_index: 2 })
        );
        // A sender rotating from a shared key to a key pair sends both; the
        // first configured key that matches is the one reported.
        let rotating = format!("{SIGNATURE} {GO_SIGNATURE}");
        let p = provider(&[GO_PUBLIC_KEY, SECRET]);
        assert_eq!(
            verify(&p, &rotating, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
        let p = provider(&[SECOND_PUBLIC_KEY, SECRET]);
        assert_eq!(
            verify(&p, &rotating, TIMESTAMP),
            Ok(Verified { secret_index: 1 })
        );
    }

    #[test]
    fn a_v1a_entry_that_is_not_base64_makes_the_header_malformed() {
        let p = provider(&[GO_PUBLIC_KEY]);
        for signature in [
            "v1a,!!notbase64",
            "v1a,abc",
            &format!("{GO_SIGNATURE} v1a,@"),
        ] {
            assert!(
                malformed_in(&verify(&p, signature, TIMESTAMP), "webhook-signature"),
                "{signature:?}"
            );
        }
    }

    #[test]
    fn v1a_signatures_of_the_wrong_length_or_tampered_with_fail_without_panicking() {
        let p = provider(&[GO_PUBLIC_KEY]);
        let good = raw(GO_SIGNATURE);
        let mut flipped = good.clone();
        flipped[10] ^= 1;
        // A valid R with an S far above the group order: not canonical.
        let mut big_s = good.clone();
        big_s[32..].fill(0xff);
        let mut longer = good.clone();
        longer.push(0);
        for signature in [
            "v1a,".to_owned(),
            v1a(&good[..63]),
            v1a(&good[..32]),
            v1a(&longer),
            v1a(&[0; 64]),
            v1a(&[0xff; 64]),
            v1a(&flipped),
            v1a(&big_s),
        ] {
            assert_eq!(
                verify(&p, &signature, TIMESTAMP),
                Err(Rejection::InvalidSignature),
                "{signature}"
            );
        }
    }

    #[test]
    fn the_timestamp_is_checked_for_v1a_signatures_too() {
        let p = provider(&[GO_PUBLIC_KEY]);
        assert!(verify(&p, GO_SIGNATURE, TIMESTAMP + 300).is_ok());
        assert_eq!(
            verify(&p, GO_SIGNATURE, TIMESTAMP + 301),
            Err(Rejection::StaleTimestamp {
                tolerance_secs: 300
            })
        );
    }

    #[test]
    fn svix_header_names_carry_v1a_signatures_too() {
        let ts = TIMESTAMP.to_string();
        let pairs = [
            ("svix-id", ID),
            ("svix-timestamp", ts.as_str()),
            ("svix-signature", GO_SIGNATURE),
        ];
        assert_eq!(
            verify_request(&provider(&[GO_PUBLIC_KEY]), &pairs, BODY, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn a_private_key_is_refused_with_a_reason_that_asks_for_the_public_key() {
        let private = "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=";
        let error = config_error(private);
        assert!(matches!(
            error,
            ProviderConfigError::MalformedSecret { index: 0, .. }
        ));
        let message = error.to_string();
        assert!(
            message.contains("configure the sender's whpk_ public key instead"),
            "{message}"
        );
        assert!(!message.contains("VEVTVFNJ"), "{message}");
        // Even when it comes after a good key.
        assert!(matches!(
            StandardWebhooks::new(&spec(&[GO_PUBLIC_KEY, private], None)),
            Err(ProviderConfigError::MalformedSecret { index: 1, .. })
        ));
    }

    #[test]
    fn malformed_public_keys_are_refused_at_configuration() {
        for bad in [
            "whpk_",
            "whpk_!!!",
            // 31 and 33 bytes.
            "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248cw==",
            "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/gA",
            // y = 2 is the y of no point on the curve (checked in Python:
            // (y² - 1) / (d·y² + 1) is not a square modulo 2²⁵⁵ - 19).
            "whpk_AgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            // y = 1: the identity, a small-order (weak) key.
            "whpk_AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        ] {
            assert!(
                matches!(
                    config_error(bad),
                    ProviderConfigError::MalformedSecret { index: 0, .. }
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_endpoint_with_only_public_keys_cannot_sign() {
        let input = SignInput {
            delivery_id: ID,
            timestamp: TIMESTAMP,
            body: BODY,
            event_type: None,
            signing_key: None,
        };
        let p = provider(&[GO_PUBLIC_KEY, SECOND_PUBLIC_KEY]);
        assert!(matches!(p.sign(&input), Err(SignError::NoSigningKey)));
    }

    #[test]
    fn signing_uses_the_first_secret_even_after_public_keys() {
        let input = SignInput {
            delivery_id: ID,
            timestamp: TIMESTAMP,
            body: BODY,
            event_type: None,
            signing_key: None,
        };
        let headers = provider(&[GO_PUBLIC_KEY, SECRET]).sign(&input).unwrap();
        assert_eq!(
            headers.headers[2],
            ("webhook-signature".into(), SIGNATURE.into())
        );
    }

    // Interoperability with the official client, the `svix` crate: its
    // signatures verify here, and ours verify there.

    const INTEROP_SECRETS: [&str; 2] = [SECRET, "whsec_c2VjcmV0LW51bWJlci10d28tMTIzNDU2Nzg="];
    const INTEROP_BODIES: [&[u8]; 3] = [
        BODY,
        b"",
        "{\"type\":\"user.created\",\"name\":\"Zo\u{eb} \u{1f600}\"}".as_bytes(),
    ];

    #[test]
    fn signatures_made_by_the_svix_crate_verify_under_both_header_names() {
        let ids = ["msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", ID];
        let timestamp = 1_674_087_231;
        let ts = timestamp.to_string();
        for (index, secret) in INTEROP_SECRETS.iter().enumerate() {
            let svix = svix::webhooks::Webhook::new(secret).unwrap();
            let ours = provider(&INTEROP_SECRETS);
            for id in ids {
                for body in INTEROP_BODIES {
                    let signature = svix.sign(id, timestamp, body).unwrap();
                    for prefix in ["webhook", "svix"] {
                        let pairs = [
                            (format!("{prefix}-id"), id),
                            (format!("{prefix}-timestamp"), ts.as_str()),
                            (format!("{prefix}-signature"), signature.as_str()),
                        ];
                        let pairs = pairs.each_ref().map(|(n, v)| (n.as_str(), *v));
                        assert_eq!(
                            verify_request(&ours, &pairs, body, timestamp),
                            Ok(Verified {
                                secret_index: index
                            }),
                            "{prefix} {id} {body:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn signatures_made_here_verify_with_the_svix_crate() {
        // svix's `verify` checks the timestamp against the real clock.
        let now = Utc::now().timestamp();
        for secret in INTEROP_SECRETS {
            let svix = svix::webhooks::Webhook::new(secret).unwrap();
            for body in INTEROP_BODIES {
                let input = SignInput {
                    delivery_id: "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
                    timestamp: now,
                    body,
                    event_type: None,
                    signing_key: None,
                };
                let mut map = http::HeaderMap::new();
                for (name, value) in provider(&[secret]).sign(&input).unwrap().headers {
                    map.insert(
                        http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                        http::HeaderValue::from_str(&value).unwrap(),
                    );
                }
                assert!(svix.verify(body, &map).is_ok(), "{secret} {body:?}");
                // And svix does check: another body fails there.
                assert!(svix.verify(b"{}", &map).is_err(), "{secret} {body:?}");
            }
        }
    }
}
