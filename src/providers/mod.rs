//! Signature schemes. A provider is a pure function of (headers, body,
//! secrets, now): it performs no I/O and holds no clock of its own, so old
//! published vectors verify by passing their own `now`.

mod github;
mod hmac;
pub mod mac;
mod paddle;
pub mod paypal;
mod rejection;
mod retry_window;
mod secrets;
mod shopify;
mod signature_list;
mod slack;
mod spec;
mod standard_webhooks;
mod stripe;
#[cfg(test)]
mod test_support;

pub use github::GitHub;
pub use hmac::GenericHmac;
pub use paddle::Paddle;
pub use rejection::Rejection;
pub use retry_window::{RETRY_WINDOWS, RetryWindow, retry_window_of};
pub use shopify::Shopify;
pub use slack::Slack;
pub use spec::{Encoding, HmacSpec, ProviderSpec};
pub use standard_webhooks::StandardWebhooks;
pub use stripe::Stripe;

use actix_web::http::header::HeaderMap;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;

/// The parts of a delivery a verifier looks at: the raw body, never a
/// re-serialisation of it.
pub struct SignedRequest<'a> {
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// A delivery whose signature checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Which configured secret matched (an index, never the value), so that
    /// operators can tell when the old secret of a rotation stops being used.
    pub secret_index: usize,
}

pub trait Provider: Send + Sync + std::fmt::Debug {
    /// The name used in configuration (`provider = "..."`).
    fn name(&self) -> &'static str;

    fn verify(
        &self,
        request: &SignedRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified, Rejection>;

    /// The key of the delivery: the provider's delivery or event id.
    fn delivery_id(
        &self,
        request: &SignedRequest<'_>,
        payload: &Value,
    ) -> Result<String, Rejection>;

    fn event_type(&self, request: &SignedRequest<'_>, payload: &Value) -> Option<String>;

    /// Whether the delivery id is covered by the signature. Where it is not
    /// (GitHub, Shopify), a captured body replayed under a fresh id would look
    /// new, so the receiver also refuses a second delivery of the same body.
    fn delivery_id_is_signed(&self) -> bool {
        true
    }

    /// How long the provider keeps retrying a failed delivery, as it
    /// documents it; a retention shorter than this lets a legitimate retry
    /// run twice. The values and their sources are one table,
    /// [`RETRY_WINDOWS`] (Stripe and Paddle 3 days, Svix about 28 h, Shopify
    /// 4 h, Slack minutes, GitHub none).
    fn retry_window(&self) -> RetryWindow {
        retry_window_of(self.name())
    }

    /// The headers the provider would send for `input.body`, signed with the
    /// first configured secret (for `send`, `sign`, fixtures and tests).
    fn sign(&self, input: &SignInput<'_>) -> Result<Vec<(String, String)>, SignError>;
}

/// What to sign: providers whose id or type live in headers put them there;
/// the others find them in the body.
#[derive(Debug, Clone, Copy)]
pub struct SignInput<'a> {
    pub delivery_id: &'a str,
    pub timestamp: i64,
    pub body: &'a [u8],
    pub event_type: Option<&'a str>,
}

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("the endpoint has no secret to sign with")]
    NoSecret,
    #[error("this provider signs with a private key, which the receiver does not hold")]
    NoSigningKey,
}

/// The provider names `provider = "..."` accepts.
pub const PROVIDERS: &[&str] = &[
    "standard-webhooks",
    "stripe",
    "github",
    "shopify",
    "slack",
    "paddle",
    "hmac",
];

/// Builds the provider named in configuration. The error says what is wrong
/// with which secret, never the secret itself.
pub fn build(name: &str, spec: &ProviderSpec) -> Result<Box<dyn Provider>, ProviderConfigError> {
    match name {
        "standard-webhooks" | "svix" => Ok(Box::new(StandardWebhooks::new(spec)?)),
        "stripe" => Ok(Box::new(Stripe::new(spec)?)),
        "github" => Ok(Box::new(GitHub::new(spec)?)),
        "shopify" => Ok(Box::new(Shopify::new(spec)?)),
        "slack" => Ok(Box::new(Slack::new(spec)?)),
        "paddle" => Ok(Box::new(Paddle::new(spec)?)),
        "hmac" => Ok(Box::new(GenericHmac::new(spec)?)),
        _ => Err(ProviderConfigError::UnknownProvider),
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProviderConfigError {
    #[error("unknown provider (expected one of: {})", PROVIDERS.join(", "))]
    UnknownProvider,
    #[error("secret #{index} is malformed: {reason}")]
    MalformedSecret { index: usize, reason: &'static str },
    #[error("no secret is configured")]
    NoSecret,
    /// A provider-specific setting is missing or contradicts another.
    #[error("{0}")]
    Invalid(String),
}

/// A delivery id used as a key: 1 to 255 visible ASCII characters, so that it
/// is safe in logs, URLs and downstream idempotency headers.
pub fn check_key(key: &str) -> Result<(), Rejection> {
    if key.is_empty() {
        return Err(Rejection::InvalidKey("it is empty"));
    }
    if key.len() > 255 {
        return Err(Rejection::InvalidKey("it is longer than 255 characters"));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Rejection::InvalidKey(
            "it has characters other than visible ASCII",
        ));
    }
    Ok(())
}

/// A header's value as text; a header sent twice is ambiguous and refused.
pub(crate) fn header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
) -> Result<Option<&'a str>, Rejection> {
    let mut values = headers.get_all(name);
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Rejection::MalformedHeader {
            header: name,
            reason: "it is sent more than once",
        });
    }
    first
        .to_str()
        .map(Some)
        .map_err(|_| Rejection::MalformedHeader {
            header: name,
            reason: "it is not visible ASCII",
        })
}

/// A header that must be there.
pub(crate) fn required_header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
) -> Result<&'a str, Rejection> {
    header(headers, name)?.ok_or(Rejection::MissingHeader(name))
}

/// The value of the header `name`, as a key.
pub(crate) fn key_in_header(headers: &HeaderMap, name: &'static str) -> Result<String, Rejection> {
    let key = required_header(headers, name)?;
    check_key(key)?;
    Ok(key.to_owned())
}

/// Checks a signed timestamp against `now`, in both directions. A zero
/// tolerance disables the check (for replaying recorded fixtures only).
pub(crate) fn check_timestamp(
    timestamp: i64,
    now: DateTime<Utc>,
    tolerance: Duration,
) -> Result<(), Rejection> {
    within_tolerance(now.timestamp().abs_diff(timestamp), tolerance)
}

/// Checks only that a signed timestamp is not older than the tolerance (the
/// rule of schemes such as Stripe's, which do not refuse clock skew ahead).
pub(crate) fn check_age(
    timestamp: i64,
    now: DateTime<Utc>,
    tolerance: Duration,
) -> Result<(), Rejection> {
    // However far ahead of the clock, a timestamp is not old.
    let age = now.timestamp().saturating_sub(timestamp).max(0);
    within_tolerance(age.unsigned_abs(), tolerance)
}

fn within_tolerance(distance_secs: u64, tolerance: Duration) -> Result<(), Rejection> {
    if !tolerance.is_zero() && distance_secs > tolerance.as_secs() {
        return Err(Rejection::StaleTimestamp {
            tolerance_secs: tolerance.as_secs(),
        });
    }
    Ok(())
}

/// Parses a Unix timestamp in seconds; anything outside 2000..2200 is absurd.
pub(crate) fn parse_timestamp(value: &str, header: &'static str) -> Result<i64, Rejection> {
    const MIN: i64 = 946_684_800; // 2000-01-01
    const MAX: i64 = 7_258_118_400; // 2200-01-01
    let malformed = |reason| Rejection::MalformedHeader { header, reason };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed("it is not a Unix timestamp in seconds"));
    }
    let timestamp: i64 = value
        .parse()
        .map_err(|_| malformed("it is not a Unix timestamp in seconds"))?;
    if !(MIN..=MAX).contains(&timestamp) {
        return Err(malformed("it is not a plausible Unix timestamp"));
    }
    Ok(timestamp)
}

/// The string at JSON pointer `pointer` in the body, as a key. Absent or not
/// a string/number: `MissingKey`.
pub fn key_at(payload: &Value, pointer: &'static str) -> Result<String, Rejection> {
    let key = match payload.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(Rejection::MissingKey(pointer)),
    };
    check_key(&key)?;
    Ok(key)
}

/// The string at `pointer`, if there is one.
pub fn text_at(payload: &Value, pointer: &str) -> Option<String> {
    payload.pointer(pointer)?.as_str().map(str::to_owned)
}
