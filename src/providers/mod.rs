//! Signature schemes. A provider is a pure function of (headers, body,
//! secrets, now): it performs no I/O and holds no clock of its own, so old
//! published vectors verify by passing their own `now`.

mod catalogue;
mod described;
pub mod description;
mod discord;
mod examples;
pub mod mac;
pub mod paypal;
mod rejection;
mod retry_window;
mod secrets;
mod spec;
mod standard_webhooks;
#[cfg(test)]
mod test_support;

pub use catalogue::{Entry, entries};
pub use described::Described;
pub use description::{Description, Encoding};
pub use examples::{example_body, example_secret};
pub use rejection::Rejection;
pub use retry_window::RetryWindow;
pub use spec::ProviderSpec;
pub use standard_webhooks::StandardWebhooks;

use actix_web::http::header::{HeaderMap, HeaderName};
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use serde_json::Value;
use std::time::Duration;

/// The parts of a delivery a verifier looks at: the raw body, never a
/// re-serialisation of it, and the request line's method and query (some
/// schemes sign the URL the sender posted to).
#[derive(Clone, Copy)]
pub struct SignedRequest<'a> {
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
    pub method: &'a str,
    /// The raw query string, without `?`; empty when there is none.
    pub query: &'a str,
}

impl<'a> SignedRequest<'a> {
    /// A `POST` without a query string, as most providers send.
    pub fn post(headers: &'a HeaderMap, body: &'a [u8]) -> SignedRequest<'a> {
        SignedRequest {
            headers,
            body,
            method: "POST",
            query: "",
        }
    }
}

/// A delivery whose signature checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Which configured secret matched (an index, never the value), so that
    /// operators can tell when the old secret of a rotation stops being used.
    pub secret_index: usize,
}

/// One logical delivery in a request: most requests carry one; a batch
/// (Adyen's `notificationItems`, GoCardless's `events`, HubSpot's array)
/// carries several, and each is its own key.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The provider's delivery or event id: the key.
    pub key: String,
    pub event_type: Option<String>,
    /// A batch item's own payload; `None`: the whole request's payload.
    pub item: Option<Value>,
    /// What identifies the delivery's content where the provider changes
    /// some of it on every attempt (see `Description::volatile`); `None`:
    /// the SHA-256 of what is stored.
    pub fingerprint: Option<String>,
    /// Whether the signature covers the key. Where it does not (GitHub's
    /// delivery header, Razorpay's event-id header), a captured body replayed
    /// under a fresh id would look new, so the receiver also refuses a second
    /// delivery of the same body.
    pub key_signed: bool,
}

impl Delivery {
    /// The one delivery of a request whose signature covers its key (the
    /// hand-written schemes: Standard Webhooks, Discord, PayPal).
    pub fn single_signed(key: String, event_type: Option<String>) -> Vec<Delivery> {
        vec![Delivery {
            key,
            event_type,
            item: None,
            fingerprint: None,
            key_signed: true,
        }]
    }
}

/// What a handshake is answered with instead of processing anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeReply {
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

pub trait Provider: Send + Sync + std::fmt::Debug {
    /// The name used in configuration (`provider = "..."`).
    fn name(&self) -> &'static str;

    /// Work a verification needs done away from the request's thread before
    /// [`Provider::verify`]: fetching a signing certificate (PayPal). Most
    /// schemes need none, and say so with `None` rather than a future that
    /// does nothing: a boxed future is an allocation on every request.
    fn prepare<'a>(
        &'a self,
        _headers: &'a HeaderMap,
    ) -> Option<BoxFuture<'a, Result<(), Rejection>>> {
        None
    }

    /// Checks the signature (every item's, where each item is signed) and
    /// then the timestamp, against `now`.
    fn verify(
        &self,
        request: &SignedRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified, Rejection>;

    /// The verified payload as JSON: the body itself for most providers; the
    /// form fields or a decoded document for the others.
    fn payload(&self, request: &SignedRequest<'_>) -> Result<Value, Rejection> {
        crate::payload::parse_payload(request.body).map_err(|_| Rejection::MalformedBody)
    }

    /// A handshake the provider demands before it delivers anything (Slack's
    /// `url_verification`, Twitch's challenge): verified like a delivery,
    /// answered in the provider's form, and never claims a key.
    fn handshake(
        &self,
        _request: &SignedRequest<'_>,
        _payload: &Value,
        _verified: &Verified,
    ) -> Result<Option<HandshakeReply>, Rejection> {
        Ok(None)
    }

    /// The answer to an unsigned `GET` a provider sends to check a new
    /// destination (Braintree's `bt_challenge`), from its query string;
    /// `None`: this provider sends none, and `GET` is refused.
    fn challenge(&self, _query: &str) -> Option<HandshakeReply> {
        None
    }

    /// The deliveries the request carries, each with its key.
    fn deliveries(
        &self,
        request: &SignedRequest<'_>,
        payload: &Value,
    ) -> Result<Vec<Delivery>, Rejection>;

    /// The key of the request's one delivery, where a header carries it and
    /// the body is not needed to find it (Standard Webhooks' `webhook-id`).
    /// The webhook face uses it to answer an exact repeat from the replay
    /// cache before it parses the body: a hit needs the same key and the
    /// same body bytes as the delivery stored, so a scheme may name a key
    /// here only where [`Provider::deliveries`] takes that same header as
    /// the key of a single delivery whose stored payload is the body itself
    /// (no batch, no form or document, no handshake, no volatile fields).
    /// `None`, the default: the body decides.
    fn header_key<'r>(&self, _request: &SignedRequest<'r>) -> Option<&'r str> {
        None
    }

    /// The exact body a provider demands for a processed delivery (Adyen's
    /// `[accepted]`); `None`: the receiver's own JSON answer.
    fn acknowledgement(&self) -> Option<&'static str> {
        None
    }

    /// The status a provider asks for on an invalid signature (GoCardless:
    /// 498); `None`: 401.
    fn invalid_signature_status(&self) -> Option<u16> {
        None
    }

    /// How long the provider keeps retrying a failed delivery, as it
    /// documents it; a retention shorter than this lets a legitimate retry
    /// run twice.
    fn retry_window(&self) -> RetryWindow;

    /// The request the provider would send for `input.body`, signed with the
    /// first configured secret (for `send`, `sign`, fixtures and tests).
    fn sign(&self, input: &SignInput<'_>) -> Result<Signed, SignError>;
}

/// What to sign: providers whose id or type live in headers put them there;
/// the others find them in the body.
#[derive(Debug, Clone, Copy)]
pub struct SignInput<'a> {
    pub delivery_id: &'a str,
    pub timestamp: i64,
    pub body: &'a [u8],
    pub event_type: Option<&'a str>,
    /// A private key to sign with, for the schemes whose senders sign
    /// asymmetrically and whose receivers hold only the public half
    /// (Discord: the ed25519 seed in hex; PayPal: an RSA key in PKCS#8 PEM).
    /// Only for tests and fixtures: the receiver never holds such a key.
    pub signing_key: Option<&'a str>,
}

/// A signed request: its headers, and the body and query string where the
/// scheme changes or sets them (a signature inside the body, a form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub headers: Vec<(String, String)>,
    /// `None`: the input body as it is.
    pub body: Option<Vec<u8>>,
    /// The query string to post to, without `?`; empty: none.
    pub query: String,
}

impl Signed {
    pub fn headers(headers: Vec<(String, String)>) -> Signed {
        Signed {
            headers,
            body: None,
            query: String::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("the endpoint has no secret to sign with")]
    NoSecret,
    #[error("this provider signs with a private key, which the receiver does not hold")]
    NoSigningKey,
    #[error("cannot sign this body: {0}")]
    Body(String),
}

/// The provider names `provider = "..."` accepts: the catalogue's, the
/// hand-written schemes' and the generic `hmac`.
pub fn names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = HAND_WRITTEN.to_vec();
    names.extend(catalogue::entries().iter().map(|d| d.name.as_str()));
    names.push("hmac");
    names.sort_unstable();
    names
}

/// The schemes that are code rather than catalogue entries: asymmetric
/// signatures, and the Standard Webhooks family.
const HAND_WRITTEN: &[&str] = &["standard-webhooks", "clerk", "resend", "discord", "paypal"];

/// Builds the provider named in configuration. The error says what is wrong
/// with which secret, never the secret itself.
pub fn build(name: &str, spec: &ProviderSpec) -> Result<Box<dyn Provider>, ProviderConfigError> {
    match name {
        "standard-webhooks" | "svix" => Ok(Box::new(StandardWebhooks::new(spec)?)),
        "clerk" => Ok(Box::new(StandardWebhooks::named("clerk", spec)?)),
        "resend" => Ok(Box::new(StandardWebhooks::named("resend", spec)?)),
        "discord" => Ok(Box::new(discord::Discord::new(spec)?)),
        "paypal" => {
            let webhook_id = spec.webhook_id.as_deref().ok_or_else(|| {
                ProviderConfigError::Invalid(
                    "provider = \"paypal\" needs webhook_id (the webhook's id in the PayPal dashboard)"
                        .to_owned(),
                )
            })?;
            Ok(Box::new(paypal::PayPal::new(
                webhook_id,
                spec.certificate.as_deref(),
                spec.tolerance,
            )?))
        }
        "hmac" => {
            let description = spec.hmac.as_ref().ok_or_else(|| {
                ProviderConfigError::Invalid(
                    "provider = \"hmac\" needs an hmac table, with at least signature_header"
                        .to_owned(),
                )
            })?;
            // An operator's own description runs under the name `hmac`,
            // whatever it calls itself: metrics and logs name it so.
            let description = Description {
                name: "hmac".to_owned(),
                ..description.clone()
            };
            Ok(Box::new(Described::new(&description, spec)?))
        }
        _ => match catalogue::find(name) {
            Some(description) => Ok(Box::new(Described::new(description, spec)?)),
            None => Err(ProviderConfigError::UnknownProvider),
        },
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProviderConfigError {
    #[error("unknown provider (expected one of: {})", names().join(", "))]
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
    // Looked up by a `&str`, a name that is not a standard header is copied
    // into a new `HeaderName` on every call (three per Standard Webhooks
    // delivery, twice over); a static name borrows it. `from_static` takes
    // only lowercase token characters, so other names keep the copy.
    let static_name = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && !name.is_empty();
    if static_name {
        header_named(headers, &HeaderName::from_static(name), name)
    } else {
        single_value(headers.get_all(name), name)
    }
}

/// [`header`] by a name made once: a `static` `HeaderName` skips the
/// checks `from_static` otherwise makes of the name on every lookup (a
/// scheme's fixed headers, on every delivery). `label` names it in a
/// refusal.
pub(crate) fn header_named<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    label: &'static str,
) -> Result<Option<&'a str>, Rejection> {
    single_value(headers.get_all(name), label)
}

fn single_value<'a>(
    mut values: impl Iterator<Item = &'a actix_web::http::header::HeaderValue>,
    name: &'static str,
) -> Result<Option<&'a str>, Rejection> {
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
    parse_timestamp_text(value).ok_or(Rejection::MalformedHeader {
        header,
        reason: "it is not a plausible Unix timestamp in seconds",
    })
}

/// A Unix timestamp in seconds between 2000 and 2200, written in digits only.
pub(crate) fn parse_timestamp_text(value: &str) -> Option<i64> {
    const MIN: i64 = 946_684_800; // 2000-01-01
    const MAX: i64 = 7_258_118_400; // 2200-01-01
    if value.is_empty() || value.len() > 12 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok().filter(|t| (MIN..=MAX).contains(t))
}

/// The string at JSON pointer `pointer` in the body, as a key. Absent or not
/// a string/number: `MissingKey`.
pub fn key_at(payload: &Value, pointer: &'static str) -> Result<String, Rejection> {
    let key = match crate::json_pointer::get(payload, pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(Rejection::MissingKey(pointer)),
    };
    check_key(&key)?;
    Ok(key)
}

/// The string at `pointer`, if there is one.
pub fn text_at(payload: &Value, pointer: &str) -> Option<String> {
    crate::json_pointer::get(payload, pointer)?
        .as_str()
        .map(str::to_owned)
}
