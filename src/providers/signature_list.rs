//! Signature headers that are a list of `key=value` pairs: one timestamp and
//! any number of hex HMAC-SHA256 signatures of `{timestamp}{joiner}{body}`
//! (Stripe's `t=..,v1=..`, Paddle's `ts=..;h1=..`). Senders put several
//! signatures in one header while they roll a secret over.

use super::mac::{self, Algorithm};
use super::{Rejection, SignedRequest, parse_timestamp, required_header};
use crate::secret::Secret;

/// The most signatures one header may carry. Each is checked against every
/// secret with an HMAC of the whole body, so an unbounded list would let a
/// sender multiply the work of a single delivery.
pub(super) const MAX_SIGNATURES: usize = 16;

/// One scheme's header: how its pairs are written and what is signed.
pub(super) struct Format {
    pub header: &'static str,
    pub separator: char,
    pub timestamp_key: &'static str,
    /// The one scheme checked; any other key is ignored.
    pub scheme: &'static str,
    /// What stands between the timestamp and the body in the signed message.
    pub joiner: &'static str,
    /// The reason given when a pair has no `=`.
    pub shape: &'static str,
    /// The reason given when there is no timestamp.
    pub no_timestamp: &'static str,
}

/// A header whose signature checked out. Its timestamp is left to the
/// provider, since schemes differ on whether one ahead of the clock is stale.
pub(super) struct Matched {
    pub secret_index: usize,
    pub timestamp: i64,
}

struct Parsed<'a> {
    /// The timestamp exactly as sent, which is what is signed.
    timestamp_text: &'a str,
    timestamp: i64,
    /// The decoded signatures under the expected scheme.
    candidates: Vec<Vec<u8>>,
}

impl Format {
    /// The signature of one message, as it appears after `{scheme}=`.
    pub fn signature(&self, key: &Secret, timestamp: &str, body: &[u8]) -> String {
        hex::encode(mac::sign(
            Algorithm::Sha256,
            key.expose(),
            &self.signed_parts(timestamp, body),
        ))
    }

    /// The header's value for one signature.
    pub fn value(&self, timestamp: &str, signature: &str) -> String {
        format!(
            "{}={timestamp}{}{}={signature}",
            self.timestamp_key, self.separator, self.scheme
        )
    }

    /// Finds the first secret that signed the request. The signature is
    /// checked before the timestamp is judged, so that an unsigned request
    /// learns nothing about the receiver's clock.
    pub fn verify(
        &self,
        secrets: &[Secret],
        request: &SignedRequest<'_>,
    ) -> Result<Matched, Rejection> {
        let value = required_header(request.headers, self.header)?;
        let parsed = self.parse(value)?;
        let secret_index = mac::matching_secret(
            Algorithm::Sha256,
            secrets,
            &self.signed_parts(parsed.timestamp_text, request.body),
            &parsed.candidates,
        )
        .ok_or(Rejection::InvalidSignature)?;
        Ok(Matched {
            secret_index,
            timestamp: parsed.timestamp,
        })
    }

    fn signed_parts<'a>(&self, timestamp: &'a str, body: &'a [u8]) -> [&'a [u8]; 3] {
        [timestamp.as_bytes(), self.joiner.as_bytes(), body]
    }

    /// Any pair without `=` (including an empty one, as in `,,`), a missing or
    /// repeated timestamp, an implausible timestamp, or a signature with a
    /// non-hex character is malformed; an empty signature is merely one that
    /// cannot match.
    fn parse<'a>(&self, value: &'a str) -> Result<Parsed<'a>, Rejection> {
        let malformed = |reason| Rejection::MalformedHeader {
            header: self.header,
            reason,
        };
        let mut timestamp_text = None;
        let mut candidates = Vec::new();
        for pair in value.split(self.separator) {
            let Some((key, text)) = pair.split_once('=') else {
                return Err(malformed(self.shape));
            };
            if key == self.timestamp_key {
                if timestamp_text.replace(text).is_some() {
                    return Err(malformed("the timestamp is given more than once"));
                }
            } else if key == self.scheme {
                let candidate =
                    mac::hex_candidate(text).ok_or_else(|| malformed("a signature is not hex"))?;
                if candidates.len() == MAX_SIGNATURES {
                    return Err(malformed("it carries more than 16 signatures"));
                }
                candidates.push(candidate);
            }
        }
        let timestamp_text = timestamp_text.ok_or_else(|| malformed(self.no_timestamp))?;
        let timestamp = parse_timestamp(timestamp_text, self.header)?;
        Ok(Parsed {
            timestamp_text,
            timestamp,
            candidates,
        })
    }
}
