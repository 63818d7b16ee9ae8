//! One description of an HMAC-style signature scheme, as data: where the
//! signature is and how it is written, what is signed and with which key,
//! where the timestamp, the delivery id and the event type are, and what the
//! provider demands in answer. The catalogue's entries
//! (`catalogue.toml`) and an operator's own `provider = "hmac"` table are
//! this one type, and [`super::Described`] runs any of them.
//!
//! Field names are those of the generic scheme's table, so that every
//! configuration written for it before still reads the same.

use super::mac::Algorithm;
use serde::Deserialize;

/// A scheme as written in TOML. Only `signature_header` (or another
/// signature location) is required of an operator's own table; the rest has
/// the defaults of the plainest scheme: the hex HMAC-SHA256 of the body.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Description {
    /// The name operators write in `provider = "..."` (catalogue entries).
    #[serde(default)]
    pub name: String,
    /// The provider's own name, for the README and `--help`.
    #[serde(default)]
    pub title: String,

    // Where the signature is: exactly one of these three.
    /// A header.
    pub signature_header: Option<String>,
    /// A JSON pointer into the body, or into each item of a batch.
    pub signature_pointer: Option<String>,
    /// A field of a form-encoded body.
    pub signature_form_field: Option<String>,

    /// How the signature's value is written.
    #[serde(default)]
    pub syntax: Syntax,
    /// Stripped from a `single` value before decoding, e.g. `sha256=`.
    #[serde(default)]
    pub prefix: String,
    /// `pairs`: what separates the pairs (`,` for Stripe, `;` for Paddle).
    pub separator: Option<String>,
    /// `pairs`: the key of the timestamp pair (`t`, `ts`).
    pub timestamp_key: Option<String>,
    /// `pairs` and `versioned`: the key (or version) of the signatures
    /// checked (`v1`, `h1`); any other is ignored.
    pub signature_key: Option<String>,
    #[serde(default)]
    pub encoding: Encoding,
    #[serde(default)]
    pub algorithm: Algorithm,
    #[serde(default)]
    pub mac: MacKind,
    /// How the key is derived from each configured secret.
    #[serde(default)]
    pub key: KeyDerivation,
    /// A prefix every secret of this provider starts with (`whsec_`); a secret
    /// without it is refused at start-up. The key is still the whole string
    /// unless `key` says otherwise.
    pub secret_prefix: Option<String>,

    /// What is signed: a template, see [`super::template`].
    #[serde(default = "default_signed_content")]
    pub signed_content: String,

    // The timestamp: where it is (at most one of these two, or
    // `timestamp_key` of a `pairs` signature), its unit, and how it is checked.
    pub timestamp_header: Option<String>,
    pub timestamp_pointer: Option<String>,
    #[serde(default)]
    pub timestamp_unit: TimestampUnit,
    #[serde(default)]
    pub timestamp_check: TimestampCheck,
    /// The default tolerance, e.g. `"5m"`; an endpoint's `tolerance`
    /// replaces it.
    pub tolerance: Option<String>,

    // The delivery id: exactly one of these.
    pub id_header: Option<String>,
    /// A JSON pointer into the body (or item); `*` matches an object's only
    /// member (Braintree's `/subject/*/id`).
    pub id_pointer: Option<String>,
    /// Several pointers whose values, joined with `:`, make the key.
    pub id_fields: Option<Vec<String>>,
    /// The SHA-256 of the body is the key (for senders that send no id).
    #[serde(default)]
    pub id_body_hash: bool,
    /// A query parameter.
    pub id_query: Option<String>,

    // The event type: at most one of these.
    pub event_type_header: Option<String>,
    pub event_type_pointer: Option<String>,
    /// Several pointers whose values, joined with `.`, make the type
    /// (GoCardless's `resource_type` and `action`).
    pub event_type_fields: Option<Vec<String>>,

    /// A string appended to the event type with `.` when the body has it
    /// (GitHub's `action`: `pull_request.opened`).
    pub event_action_pointer: Option<String>,

    /// A batch: a JSON pointer to the array of items (`""` for a body that
    /// is an array). Each item is its own delivery, keyed by the id
    /// settings read inside the item.
    pub items: Option<String>,
    /// Where in each array element the item is (Adyen's
    /// `/NotificationRequestItem`); default: the element itself.
    pub item: Option<String>,

    /// JSON pointers of fields the provider changes on every attempt (an
    /// attempt number, a send time), in the body or in each batch item.
    /// They are left out of the delivery's fingerprint, so that a retry is
    /// a replay rather than the same key with another payload.
    #[serde(default)]
    pub volatile: Vec<String>,

    /// How the body is read into the payload handlers see.
    #[serde(default)]
    pub payload: PayloadFormat,
    /// A query parameter holding the hex SHA-256 of the body, which must
    /// match it (Twilio signs the URL, and with it this hash, for JSON
    /// bodies).
    pub body_sha256_query: Option<String>,

    /// The handshake the provider demands before it delivers anything.
    pub handshake: Option<Handshake>,
    /// The exact body of the answer to a processed delivery (`[accepted]`).
    pub acknowledgement: Option<String>,
    /// The status of the answer to an invalid signature (GoCardless: 498).
    pub invalid_signature_status: Option<u16>,

    /// Alternative signatures of one provider (HubSpot's v1, v2 and v3),
    /// tried in order: the first whose `when_header` is present (with the
    /// given value, for `Name: value`) is checked. Each variant sets only
    /// signature and timestamp fields.
    #[serde(default)]
    pub variants: Vec<Description>,
    pub when_header: Option<String>,

    // What the README and the retention check say about the provider.
    /// How long the provider retries, e.g. `"3d"`; `"none"` when it never
    /// retries by itself; absent: unknown.
    pub retry_window: Option<String>,
    pub retry_schedule: Option<String>,
    pub retry_source: Option<String>,
    /// Where an operator finds the secret in the provider's dashboard.
    pub secret_location: Option<String>,
    /// What the scheme does not protect against.
    pub weakness: Option<String>,
    /// Which characters a secret may hold.
    #[serde(default)]
    pub secret_format: SecretFormat,
}

impl Description {
    /// Whether the (first) signature covers the body: the catalogue's
    /// static tokens and Mercado Pago's manifest do not.
    pub fn signs_body(&self) -> bool {
        let signature = self.variants.first().unwrap_or(self);
        let content = &signature.signed_content;
        signature.mac != MacKind::Token
            && (content.contains("{body}")
                || content.contains("{form")
                || content.contains("{field:")
                || self.body_sha256_query.is_some())
    }

    /// Whether the (first) signature signs a timestamp.
    pub fn signs_timestamp(&self) -> bool {
        let signature = self.variants.first().unwrap_or(self);
        signature.timestamp_header.is_some()
            || signature.timestamp_pointer.is_some()
            || signature.timestamp_key.is_some()
            || signature.syntax == Syntax::List
    }
}

fn default_signed_content() -> String {
    "{body}".to_owned()
}

/// How a signature value is written.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Syntax {
    /// One signature, after an optional `prefix`.
    #[default]
    Single,
    /// `k=v` pairs with a timestamp and any number of signatures
    /// (`t=..,v1=..,v1=..`).
    Pairs,
    /// Space-separated `version,signature` entries (`v1,abc= v1,def=`).
    Versioned,
    /// The timestamp, then signatures, comma-separated (`ts_ms,sig,sig`).
    List,
    /// `keyid|signature` pairs separated by `&`; each configured secret is
    /// `keyid:secret` (Braintree's public and private keys).
    Keyed,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Either case is accepted.
    #[default]
    Hex,
    Base64,
}

/// What computes the tag.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum MacKind {
    #[default]
    Hmac,
    /// The plain hash of the key followed by the signed content (HubSpot's
    /// v1 and v2): weaker than an HMAC, but what the sender computes.
    KeyPrefixedHash,
    /// No MAC: the value is the secret itself, compared in constant time.
    /// It proves the sender knows the secret and nothing about the body.
    Token,
}

/// How a configured secret becomes the key.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum KeyDerivation {
    /// The secret's bytes as typed.
    #[default]
    Bytes,
    Hex,
    Base64,
    /// `whsec_` followed by base64 (Standard Webhooks).
    Whsec,
    /// The SHA-1 of the secret's bytes (Braintree).
    Sha1,
}

/// Whether a secret is a person's choice or the sender's token.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SecretFormat {
    /// Any string without whitespace at either end.
    #[default]
    Typed,
    /// Visible ASCII only: a space is a copy-and-paste accident.
    Generated,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TimestampUnit {
    #[default]
    Seconds,
    Milliseconds,
    /// An RFC 3339 date and time (Twitch).
    Rfc3339,
    /// Seconds or milliseconds, whichever is a plausible time (they never
    /// both are): Mercado Pago's docs show seconds, its SDK's tests
    /// milliseconds. Signing writes seconds.
    Auto,
}

/// Which way a timestamp may be off.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TimestampCheck {
    /// Neither older nor newer than the tolerance.
    #[default]
    Both,
    /// Only not older (Stripe's SDKs accept a clock ahead of the receiver).
    Age,
}

/// How the body becomes the payload.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PayloadFormat {
    #[default]
    Json,
    /// `application/x-www-form-urlencoded`: an object of the fields.
    Form,
    /// Braintree: the form's `bt_payload`, base64 of an XML notification.
    BraintreeXml,
}

/// A handshake the catalogue knows how to answer.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Handshake {
    /// `{"type":"url_verification","challenge":..}`: answer the challenge.
    SlackUrlVerification,
    /// `endpoint.url_validation`: answer `plainToken` and its hex HMAC.
    ZoomUrlValidation,
    /// `Twitch-Eventsub-Message-Type: webhook_callback_verification`: answer
    /// the raw challenge as text.
    TwitchChallenge,
    /// `GET ?bt_challenge=<hex>`, sent when a destination is created in
    /// Braintree's Control Panel: answer `<key id>|<hex HMAC of the
    /// challenge>` under the first secret. Unsigned, so it is answered only
    /// for 20 to 32 hex digits, as Braintree's SDKs do: no such text is the
    /// base64 of an XML notification, so the answer signs nothing a
    /// delivery could carry.
    BraintreeChallenge,
}
