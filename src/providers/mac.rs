//! HMAC computation and constant-time verification shared by every scheme.

use crate::secret::Secret;
use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// The most signatures one request may carry. A list of them is checked
/// against every configured secret, and an ed25519 signature costs a pass
/// over the whole body each, so an unbounded list would let a sender
/// multiply the work of a single delivery. A rotation sends two or three.
pub const MAX_SIGNATURES: usize = 16;

/// Why a list past [`MAX_SIGNATURES`] is refused: the one wording every
/// scheme answers with (a `'static` reason cannot be formatted, so a test
/// keeps the number in it in step with the constant).
pub const TOO_MANY_SIGNATURES: &str = "it carries more than 16 signatures";

/// The hash under an HMAC scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Only where a sender still signs with it (Intercom, Twilio, Braintree).
    Sha1,
    #[default]
    Sha256,
    Sha512,
}

impl Algorithm {
    /// The tag length in bytes.
    pub fn tag_len(self) -> usize {
        match self {
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
            Algorithm::Sha512 => 64,
        }
    }
}

/// The HMAC of the concatenation of `parts` under `key`. Empty if the key
/// were refused (HMAC takes keys of any length, so it never is): an empty
/// tag is never a valid one, see [`verify`].
pub fn sign(algorithm: Algorithm, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    match algorithm {
        Algorithm::Sha1 => tag::<Hmac<Sha1>>(key, parts),
        Algorithm::Sha256 => tag::<Hmac<Sha256>>(key, parts),
        Algorithm::Sha512 => tag::<Hmac<Sha512>>(key, parts),
    }
}

/// Whether `candidate` is the HMAC of `parts` under `key`. Constant-time, and
/// a candidate of any other length (empty, truncated, a prefix) fails.
pub fn verify(algorithm: Algorithm, key: &[u8], parts: &[&[u8]], candidate: &[u8]) -> bool {
    if candidate.len() != algorithm.tag_len() {
        return false;
    }
    match algorithm {
        Algorithm::Sha1 => check::<Hmac<Sha1>>(key, parts, candidate),
        Algorithm::Sha256 => check::<Hmac<Sha256>>(key, parts, candidate),
        Algorithm::Sha512 => check::<Hmac<Sha512>>(key, parts, candidate),
    }
}

/// The plain hash of `key` followed by `parts`: not a MAC, but what some
/// senders compute (HubSpot's v1 and v2 signatures).
pub fn key_prefixed_hash(algorithm: Algorithm, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    fn digest<D: Digest>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let mut hasher = D::new();
        hasher.update(key);
        for part in parts {
            hasher.update(part);
        }
        hasher.finalize().to_vec()
    }
    match algorithm {
        Algorithm::Sha1 => digest::<Sha1>(key, parts),
        Algorithm::Sha256 => digest::<Sha256>(key, parts),
        Algorithm::Sha512 => digest::<Sha512>(key, parts),
    }
}

/// Whether two byte strings are equal, in time that depends only on their
/// lengths; different lengths are never equal, and an empty `expected`
/// matches nothing.
pub fn equal(expected: &[u8], candidate: &[u8]) -> bool {
    !expected.is_empty()
        && expected.len() == candidate.len()
        && bool::from(expected.ct_eq(candidate))
}

/// Whether any of `candidates` is the HMAC of `parts` under `key`, each
/// checked as [`verify`] checks it.
pub fn verify_any(
    algorithm: Algorithm,
    key: &[u8],
    parts: &[&[u8]],
    candidates: &[Vec<u8>],
) -> bool {
    // The tag is computed once, however many candidates there are: one HMAC
    // of the body per secret, not one per candidate. Every candidate is
    // still compared, so the time does not tell which one matched.
    if candidates.is_empty() {
        return false;
    }
    let expected = sign(algorithm, key, parts);
    candidates
        .iter()
        .fold(false, |any, candidate| equal(&expected, candidate) | any)
}

/// The index of the first of `secrets` under which any of `candidates` is the
/// HMAC of `parts`. The first in configured order wins, so that during a
/// rotation the index reported is stable whichever secrets the sender uses.
pub fn matching_secret(
    algorithm: Algorithm,
    secrets: &[Secret],
    parts: &[&[u8]],
    candidates: &[Vec<u8>],
) -> Option<usize> {
    secrets
        .iter()
        .position(|secret| verify_any(algorithm, secret.expose(), parts, candidates))
}

/// A signature sent as hex digits, decoded; `None` if a character is not a
/// hex digit. An odd number of digits can never be a tag, so it decodes to
/// nothing, which [`verify`] refuses like any other wrong signature rather
/// than as a malformed header.
pub fn hex_candidate(text: &str) -> Option<Vec<u8>> {
    if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(hex::decode(text).unwrap_or_default())
}

/// The MAC of `parts` under `key`, or `None` when `M` refuses the key.
/// There is no fallback key: a refused key verifies nothing (an all-zero
/// key would let anyone who knows of the fallback sign).
fn feed<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Option<M> {
    let mut mac = <M as KeyInit>::new_from_slice(key).ok()?;
    for part in parts {
        mac.update(part);
    }
    Some(mac)
}

fn tag<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    feed::<M>(key, parts).map_or_else(Vec::new, |mac| mac.finalize().into_bytes().to_vec())
}

fn check<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]], candidate: &[u8]) -> bool {
    feed::<M>(key, parts).is_some_and(|mac| mac.verify_slice(candidate).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 4231, test case 2.
    const KEY: &[u8] = b"Jefe";
    const DATA: &[u8] = b"what do ya want for nothing?";

    #[test]
    fn rfc_4231_test_case_2() {
        assert_eq!(
            hex::encode(sign(Algorithm::Sha256, KEY, &[DATA])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex::encode(sign(Algorithm::Sha512, KEY, &[DATA])),
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
        );
    }

    #[test]
    fn verification_needs_the_whole_tag() {
        let tag = sign(
            Algorithm::Sha256,
            KEY,
            &[b"what do ya ", b"want for nothing?"],
        );
        assert!(verify(Algorithm::Sha256, KEY, &[DATA], &tag));
        assert!(!verify(Algorithm::Sha256, KEY, &[DATA], &tag[..31]));
        assert!(!verify(Algorithm::Sha256, KEY, &[DATA], &[]));
        assert!(!verify(Algorithm::Sha256, b"other", &[DATA], &tag));
    }

    #[test]
    fn the_refusal_names_the_cap() {
        assert_eq!(
            TOO_MANY_SIGNATURES,
            format!("it carries more than {MAX_SIGNATURES} signatures")
        );
    }

    #[test]
    fn any_candidate_of_the_right_length_and_value_verifies() {
        let tag = sign(Algorithm::Sha256, KEY, &[DATA]);
        let wrong = vec![0u8; 32];
        let short = tag[..31].to_vec();
        assert!(verify_any(
            Algorithm::Sha256,
            KEY,
            &[DATA],
            &[wrong.clone(), short.clone(), tag.clone()]
        ));
        assert!(verify_any(
            Algorithm::Sha256,
            KEY,
            &[DATA],
            &[tag.clone(), wrong.clone()]
        ));
        assert!(!verify_any(
            Algorithm::Sha256,
            KEY,
            &[DATA],
            &[wrong, short, Vec::new()]
        ));
        assert!(!verify_any(Algorithm::Sha256, KEY, &[DATA], &[]));
        assert!(!verify_any(Algorithm::Sha256, b"other", &[DATA], &[tag]));
    }

    #[test]
    fn the_first_secret_with_any_matching_candidate_is_reported() {
        let tag = sign(Algorithm::Sha256, KEY, &[DATA]);
        let secrets = [
            Secret::new(&b"other"[..]),
            Secret::new(KEY),
            Secret::new(KEY),
        ];
        let candidates = [vec![0; 32], tag];
        assert_eq!(
            matching_secret(Algorithm::Sha256, &secrets, &[DATA], &candidates),
            Some(1)
        );
        assert_eq!(
            matching_secret(Algorithm::Sha256, &secrets[..1], &[DATA], &candidates),
            None
        );
        assert_eq!(
            matching_secret(Algorithm::Sha256, &secrets, &[DATA], &[]),
            None
        );
    }

    #[test]
    fn hex_candidates_refuse_non_hex_and_empty_odd_lengths() {
        assert_eq!(hex_candidate("0aFf"), Some(vec![0x0a, 0xff]));
        assert_eq!(hex_candidate("abc"), Some(vec![]));
        assert_eq!(hex_candidate(""), Some(vec![]));
        assert_eq!(hex_candidate("0g"), None);
    }

    /// A MAC that, unlike HMAC, takes only 16-byte keys: the one way to reach
    /// the path where a key is refused. Its tag is the key XOR-folded with
    /// the message, which is all a test needs.
    #[derive(Clone)]
    struct FixedKeyMac([u8; 16]);

    mod fixed_key {
        use super::FixedKeyMac;
        use hmac::digest::common::KeySizeUser;
        use hmac::digest::consts::U16;
        use hmac::digest::{FixedOutput, Key, MacMarker, Output, OutputSizeUser, Update};

        impl KeySizeUser for FixedKeyMac {
            type KeySize = U16;
        }
        impl hmac::KeyInit for FixedKeyMac {
            fn new(key: &Key<Self>) -> Self {
                let mut bytes = [0; 16];
                bytes.copy_from_slice(key);
                FixedKeyMac(bytes)
            }
        }
        impl OutputSizeUser for FixedKeyMac {
            type OutputSize = U16;
        }
        impl Update for FixedKeyMac {
            fn update(&mut self, data: &[u8]) {
                for (i, byte) in data.iter().enumerate() {
                    self.0[i % 16] ^= byte;
                }
            }
        }
        impl FixedOutput for FixedKeyMac {
            fn finalize_into(self, out: &mut Output<Self>) {
                out.copy_from_slice(&self.0);
            }
        }
        impl MacMarker for FixedKeyMac {}
    }

    #[test]
    fn a_refused_key_signs_nothing_and_verifies_nothing_not_even_the_zero_keys_tag() {
        // What the former fallback computed: the tag under the all-zero key.
        let zero_key_tag = tag::<FixedKeyMac>(&[0; 16], &[DATA]);
        assert_eq!(zero_key_tag.len(), 16);
        assert!(check::<FixedKeyMac>(&[0; 16], &[DATA], &zero_key_tag));
        // A key of the wrong length used to fall back to that key.
        assert!(!check::<FixedKeyMac>(b"short", &[DATA], &zero_key_tag));
        assert!(tag::<FixedKeyMac>(b"short", &[DATA]).is_empty());
        assert!(!check::<FixedKeyMac>(b"short", &[DATA], &[]));
    }
}
