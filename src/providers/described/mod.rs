//! The one verifier of every described scheme: the catalogue's entries and
//! operators' own `hmac` tables. A [`Description`] is checked and compiled
//! once, at configuration; a request is then verified by finding the
//! signatures, rendering the signed content and comparing in constant time
//! under every configured key.

mod handshake;
mod ids;
mod payload;
mod sign;
mod signature;
pub mod template;

use super::description::{
    Description, Handshake, KeyDerivation, MacKind, PayloadFormat, SecretFormat, Syntax,
    TimestampCheck, TimestampUnit,
};
use super::mac::{self, Algorithm};
use super::retry_window::RetryWindow;
use super::{
    Delivery, HandshakeReply, Provider, ProviderConfigError, ProviderSpec, Rejection, SignError,
    SignInput, Signed, SignedRequest, Verified, check_age, check_timestamp, header,
};
use crate::duration_text::parse_duration;
use crate::secret::Secret;
use actix_web::http::header::{HeaderMap, HeaderName};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use ids::{EventSource, IdSource};
use serde_json::Value;
use sha1::{Digest, Sha1};
use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use template::{Part, Template, Values};

/// The tolerance of a timestamped scheme that names none.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// A verifier built from a description and an endpoint's settings.
#[derive(Debug)]
pub struct Described {
    name: &'static str,
    /// At least one; several only for providers with versions (HubSpot).
    variants: Vec<Signature>,
    keys: Vec<Key>,
    /// The endpoint's `url`: the public URL the provider posts to.
    url: Option<String>,
    id: IdSource,
    event_type: Option<EventSource>,
    /// A batch: the array's pointer, and the item's inside each element.
    items: Option<(String, Option<String>)>,
    payload: PayloadFormat,
    body_sha256_query: Option<&'static str>,
    handshake: Option<Handshake>,
    acknowledgement: Option<&'static str>,
    invalid_signature_status: Option<u16>,
    retry_window: RetryWindow,
    key_signed: bool,
    volatile: Vec<String>,
}

/// One way the provider signs, compiled.
#[derive(Debug)]
pub struct Signature {
    location: Location,
    syntax: Syntax,
    prefix: String,
    separator: String,
    timestamp_key: Option<String>,
    signature_key: String,
    encoding: super::description::Encoding,
    algorithm: Algorithm,
    mac: MacKind,
    template: Template,
    timestamp: Option<TimestampSource>,
    unit: TimestampUnit,
    check: TimestampCheck,
    tolerance: Duration,
    /// The header (and value) that selects this variant.
    when: Option<(&'static str, Option<String>)>,
}

#[derive(Debug)]
enum Location {
    Header(&'static str),
    Pointer(&'static str),
    Form(&'static str),
}

#[derive(Debug)]
enum TimestampSource {
    /// Inside the signature value (`pairs`, `list`).
    Signature,
    Header(&'static str),
    Pointer(&'static str),
}

/// A configured secret as a key; `id` for the `keyed` syntax.
#[derive(Debug)]
struct Key {
    id: Option<String>,
    key: Secret,
}

impl Signature {
    fn malformed(&self, reason: &'static str) -> Rejection {
        match self.location {
            Location::Header(header) => Rejection::MalformedHeader { header, reason },
            Location::Pointer(field) | Location::Form(field) => {
                Rejection::MalformedField { field, reason }
            }
        }
    }

    fn tag(&self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        match self.mac {
            MacKind::Hmac => mac::sign(self.algorithm, key, parts),
            MacKind::KeyPrefixedHash => mac::key_prefixed_hash(self.algorithm, key, parts),
            MacKind::Token => key.to_vec(),
        }
    }

    /// Whether this variant applies to a request with `headers`.
    fn applies(&self, headers: &HeaderMap) -> bool {
        match &self.when {
            None => true,
            Some((name, value)) => match header(headers, name) {
                Ok(Some(sent)) => value.as_deref().is_none_or(|v| v == sent),
                _ => false,
            },
        }
    }
}

fn invalid(message: impl Into<String>) -> ProviderConfigError {
    ProviderConfigError::Invalid(message.into())
}

impl Described {
    pub fn new(
        description: &Description,
        spec: &ProviderSpec,
    ) -> Result<Described, ProviderConfigError> {
        let name = intern(&description.name);
        let variants = if description.variants.is_empty() {
            vec![compile_signature(description, description)?]
        } else {
            description
                .variants
                .iter()
                .map(|variant| compile_signature(variant, description))
                .collect::<Result<Vec<_>, _>>()?
        };
        let keyed = variants.iter().any(|v| v.syntax == Syntax::Keyed);
        let keys = super::secrets::parse_each(&spec.secrets, |secret| {
            parse_key(description, keyed, secret)
        })?;
        let uses = |part: &Part| variants.iter().any(|v| v.template.uses(part));
        if uses(&Part::Url) && spec.url.is_none() {
            return Err(invalid(format!(
                "provider {name:?} signs the URL it posts to: set url to the endpoint's public URL (without its query)"
            )));
        }
        let items = description
            .items
            .as_ref()
            .map(|array| {
                let item = description
                    .item
                    .as_deref()
                    .map(|p| pointer_in("item", p).map(str::to_owned))
                    .transpose()?;
                if !array.is_empty() {
                    pointer_in("items", array)?;
                }
                Ok::<_, ProviderConfigError>((array.clone(), item))
            })
            .transpose()?;
        let id = ids::id_source(description, items.is_some())?;
        let key_signed = ids::key_signed(&id, &variants, description.body_sha256_query.is_some());
        let body_signed = variants.iter().all(|v| {
            v.mac != MacKind::Token
                && (v.template.uses(&Part::Body)
                    || v.template.uses(&Part::FormSorted)
                    || v.template
                        .parts()
                        .any(|p| matches!(p, Part::Form(_) | Part::Field(_))))
        }) || description.body_sha256_query.is_some();
        if !body_signed && !ids::unsigned_allowed(description) {
            return Err(invalid(
                "signed_content must include {body} (or the body's fields): a signature that leaves out the body proves nothing about it",
            ));
        }
        Ok(Described {
            name,
            keys,
            url: spec.url.clone(),
            event_type: ids::event_source(description)?,
            items,
            payload: description.payload,
            body_sha256_query: description.body_sha256_query.as_deref().map(intern),
            handshake: description.handshake,
            acknowledgement: description.acknowledgement.as_deref().map(intern),
            invalid_signature_status: description.invalid_signature_status,
            retry_window: retry_window(description)?,
            key_signed,
            volatile: description
                .volatile
                .iter()
                .map(|p| pointer_in("volatile", p).map(str::to_owned))
                .collect::<Result<_, _>>()?,
            id,
            variants: apply_tolerance(variants, spec.tolerance),
        })
    }

    /// The variant that applies to `headers`: the first whose selecting
    /// header is there, or, for a one-variant scheme, that one.
    fn variant(&self, headers: &HeaderMap) -> Result<&Signature, Rejection> {
        self.variants
            .iter()
            .find(|v| v.applies(headers))
            .ok_or_else(|| match self.variants.first().map(|v| &v.location) {
                Some(Location::Header(name)) => Rejection::MissingHeader(name),
                _ => Rejection::InvalidSignature,
            })
    }

    /// Whether the request is the JSON form of a scheme that signs forms:
    /// Twilio puts the body's hash in the signed URL instead.
    fn json_variant(&self, request: &SignedRequest<'_>) -> bool {
        self.body_sha256_query
            .is_some_and(|name| template::query_param(request.query, name).is_some())
    }

    fn form(&self, request: &SignedRequest<'_>) -> Vec<(String, String)> {
        if self.json_variant(request) {
            return Vec::new();
        }
        match self.payload {
            PayloadFormat::Form | PayloadFormat::BraintreeXml => payload::form_fields(request.body),
            PayloadFormat::Json => Vec::new(),
        }
    }

    /// The index of the first key under which one of `found`'s candidates is
    /// the tag of `parts`. Keys are tried in configured order, so that during
    /// a rotation the index reported is stable.
    fn matching_key(
        &self,
        signature: &Signature,
        parts: &[&[u8]],
        candidates: &[signature::Candidate],
    ) -> Option<usize> {
        self.keys.iter().position(|key| {
            let usable: Vec<&signature::Candidate> = candidates
                .iter()
                .filter(|c| c.key_id.is_none() || c.key_id == key.id)
                .collect();
            if usable.is_empty() {
                return false;
            }
            let expected = signature.tag(key.key.expose(), parts);
            usable.iter().any(|c| mac::equal(&expected, &c.tag))
        })
    }

    /// Verifies one signed unit: the whole request, or one batch item.
    fn verify_unit(
        &self,
        signature: &Signature,
        request: &SignedRequest<'_>,
        fields: Option<&Value>,
        form: &[(String, String)],
        now: DateTime<Utc>,
    ) -> Result<usize, Rejection> {
        let value = signature::raw(signature, request.headers, fields, form)?;
        let found = signature::parse(signature, value)?;
        let timestamp_text: Option<String> = match &signature.timestamp {
            None => None,
            Some(TimestampSource::Signature) => found.timestamp.map(str::to_owned),
            Some(TimestampSource::Header(name)) => Some(
                header(request.headers, name)?
                    .ok_or(Rejection::MissingHeader(name))?
                    .to_owned(),
            ),
            Some(TimestampSource::Pointer(pointer)) => Some(
                match fields.and_then(|f| crate::json_pointer::get(f, pointer)) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) => n.to_string(),
                    _ => return Err(Rejection::MissingField(pointer)),
                },
            ),
        };
        let id = match &self.id {
            IdSource::Header(name) if signature.template.uses(&Part::Id) => {
                Some(header(request.headers, name)?.ok_or(Rejection::MissingHeader(name))?)
            }
            _ => None,
        };
        let values = Values {
            request,
            url: self.url.as_deref(),
            id,
            timestamp: timestamp_text.as_deref(),
            fields,
            form,
        };
        // A timestamp that is no timestamp makes the request malformed
        // before any MAC is computed; whether it is too old is judged after.
        let timestamp = timestamp_text
            .as_deref()
            .map(|text| parse_timestamp(signature, text))
            .transpose()?;
        let pieces = signature.template.render(&values)?;
        let parts: Vec<&[u8]> = pieces.iter().map(|p| p.as_ref()).collect();
        let index = self
            .matching_key(signature, &parts, &found.candidates)
            .ok_or(Rejection::InvalidSignature)?;
        // The signature is checked before the timestamp is judged, so that
        // an unsigned request learns nothing about the receiver's clock.
        if let Some(timestamp) = timestamp {
            match signature.check {
                TimestampCheck::Both => check_timestamp(timestamp, now, signature.tolerance)?,
                TimestampCheck::Age => check_age(timestamp, now, signature.tolerance)?,
            }
        }
        Ok(index)
    }

    /// The fingerprint of `payload` without its volatile fields; `None`
    /// when the description names none.
    fn fingerprint(&self, payload: &Value) -> Option<String> {
        if self.volatile.is_empty() {
            return None;
        }
        let mut stable = payload.clone();
        for pointer in &self.volatile {
            let (parent, field) = pointer.rsplit_once('/')?;
            if let Some(Value::Object(map)) = stable.pointer_mut(parent) {
                map.remove(field);
            }
        }
        // serde_json's maps are ordered by key: the same content is the same
        // bytes whatever order the sender wrote it in.
        let bytes = serde_json::to_vec(&stable).ok()?;
        Some(crate::digest_hex::sha256_hex(&bytes))
    }

    /// The batch's items, each as the JSON the item settings point at.
    fn items<'a>(&self, payload: &'a Value) -> Result<Option<Vec<&'a Value>>, Rejection> {
        let Some((array, item)) = &self.items else {
            return Ok(None);
        };
        let elements = crate::json_pointer::get(payload, array)
            .and_then(Value::as_array)
            .filter(|items| !items.is_empty())
            .ok_or(Rejection::MalformedBody)?;
        elements
            .iter()
            .map(|element| match item {
                Some(pointer) => {
                    crate::json_pointer::get(element, pointer).ok_or(Rejection::MalformedBody)
                }
                None => Ok(element),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

impl Provider for Described {
    fn name(&self) -> &'static str {
        self.name
    }

    fn verify(
        &self,
        request: &SignedRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified, Rejection> {
        let signature = self.variant(request.headers)?;
        let form = self.form(request);
        let per_item = matches!(signature.location, Location::Pointer(_)) && self.items.is_some();
        let uses_fields = per_item
            || matches!(signature.location, Location::Pointer(_))
            || matches!(signature.timestamp, Some(TimestampSource::Pointer(_)))
            || signature
                .template
                .parts()
                .any(|p| matches!(p, Part::Field(_)));
        let body = if uses_fields {
            Some(self.payload(request)?)
        } else {
            None
        };
        let secret_index = match (per_item, &body) {
            (true, Some(body)) => {
                let items = self.items(body)?.unwrap_or_default();
                let mut first = None;
                for item in items {
                    let index = self.verify_unit(signature, request, Some(item), &form, now)?;
                    first.get_or_insert(index);
                }
                first.ok_or(Rejection::MalformedBody)?
            }
            _ => self.verify_unit(signature, request, body.as_ref(), &form, now)?,
        };
        if let Some(name) = self.body_sha256_query {
            // The hash is in the signed URL; the body must be what it hashes.
            if let Some(expected) = template::query_param(request.query, name) {
                let actual = crate::digest_hex::sha256_hex(request.body);
                if !mac::equal(actual.as_bytes(), expected.to_ascii_lowercase().as_bytes()) {
                    return Err(Rejection::InvalidSignature);
                }
            } else if !signature.template.uses(&Part::FormSorted) || form.is_empty() {
                return Err(Rejection::MissingField(name));
            }
        }
        Ok(Verified { secret_index })
    }

    fn payload(&self, request: &SignedRequest<'_>) -> Result<Value, Rejection> {
        if self.json_variant(request) {
            return payload::read(PayloadFormat::Json, request.body);
        }
        payload::read(self.payload, request.body)
    }

    fn handshake(
        &self,
        request: &SignedRequest<'_>,
        payload: &Value,
        verified: &Verified,
    ) -> Result<Option<HandshakeReply>, Rejection> {
        let Some(kind) = self.handshake else {
            return Ok(None);
        };
        let key = self.keys.get(verified.secret_index).map(|k| &k.key);
        handshake::answer(kind, request, payload, key)
    }

    fn challenge(&self, query: &str) -> Option<HandshakeReply> {
        if self.handshake != Some(Handshake::BraintreeChallenge) {
            return None;
        }
        let key = self.keys.first()?;
        let signature = self.variants.first()?;
        handshake::braintree_challenge(query, key.id.as_deref(), &key.key, signature.algorithm)
    }

    fn deliveries(
        &self,
        request: &SignedRequest<'_>,
        payload: &Value,
    ) -> Result<Vec<Delivery>, Rejection> {
        match self.items(payload)? {
            Some(items) => items
                .into_iter()
                .map(|item| {
                    Ok(Delivery {
                        key: ids::key(&self.id, request, item)?,
                        event_type: ids::event_type(self.event_type.as_ref(), request, item),
                        item: Some(item.clone()),
                        fingerprint: self.fingerprint(item),
                        key_signed: self.key_signed,
                    })
                })
                .collect(),
            None => Ok(vec![Delivery {
                key: ids::key(&self.id, request, payload)?,
                event_type: ids::event_type(self.event_type.as_ref(), request, payload),
                item: None,
                fingerprint: self.fingerprint(payload),
                key_signed: self.key_signed,
            }]),
        }
    }

    /// The id header of a scheme whose one delivery's stored payload is the
    /// body: not a batch, a form or a document, without a handshake (which
    /// the body decides) or volatile fields (whose fingerprint is not the
    /// body's).
    fn header_key<'r>(&self, request: &SignedRequest<'r>) -> Option<&'r str> {
        let body_is_the_payload = self.items.is_none()
            && self.handshake.is_none()
            && self.volatile.is_empty()
            && self.payload == PayloadFormat::Json;
        match self.id {
            IdSource::Header(name) if body_is_the_payload => {
                header(request.headers, name).ok().flatten()
            }
            _ => None,
        }
    }

    fn acknowledgement(&self) -> Option<&'static str> {
        self.acknowledgement
    }

    fn invalid_signature_status(&self) -> Option<u16> {
        self.invalid_signature_status
    }

    fn retry_window(&self) -> RetryWindow {
        self.retry_window
    }

    fn sign(&self, input: &SignInput<'_>) -> Result<Signed, SignError> {
        sign::sign(self, input)
    }
}

/// The timestamp as a Unix time in seconds; anything outside 2000..2200 is
/// absurd.
fn parse_timestamp(signature: &Signature, text: &str) -> Result<i64, Rejection> {
    let malformed = |reason| match signature.timestamp {
        Some(TimestampSource::Header(header)) => Rejection::MalformedHeader { header, reason },
        Some(TimestampSource::Pointer(field)) => Rejection::MalformedField { field, reason },
        _ => signature.malformed(reason),
    };
    let millis = || {
        if text.len() > 3 && text.bytes().all(|b| b.is_ascii_digit()) {
            super::parse_timestamp_text(&text[..text.len() - 3])
        } else {
            None
        }
    };
    let seconds = match signature.unit {
        TimestampUnit::Seconds => super::parse_timestamp_text(text)
            .ok_or_else(|| malformed("the timestamp is not a plausible Unix time in seconds"))?,
        TimestampUnit::Milliseconds => millis().ok_or_else(|| {
            malformed("the timestamp is not a plausible Unix time in milliseconds")
        })?,
        // 2000..2200 in seconds has at most 10 digits, in milliseconds 13:
        // a text is never plausible as both.
        TimestampUnit::Auto => super::parse_timestamp_text(text)
            .or_else(millis)
            .ok_or_else(|| {
                malformed("the timestamp is not a plausible Unix time in seconds or milliseconds")
            })?,
        TimestampUnit::Rfc3339 => DateTime::parse_from_rfc3339(text)
            .map(|t| t.timestamp())
            .map_err(|_| malformed("the timestamp is not an RFC 3339 time"))?,
    };
    Ok(seconds)
}

/// Compiles the signature fields of `variant`, with the scheme's defaults
/// from `scheme` where a variant leaves them out.
fn compile_signature(
    variant: &Description,
    scheme: &Description,
) -> Result<Signature, ProviderConfigError> {
    let locations = [
        variant
            .signature_header
            .as_deref()
            .map(|h| header_name("signature_header", h).map(Location::Header)),
        variant
            .signature_pointer
            .as_deref()
            .map(|p| pointer_in("signature_pointer", p).map(|p| Location::Pointer(intern(p)))),
        variant
            .signature_form_field
            .as_deref()
            .map(|f| Ok(Location::Form(intern(f)))),
    ];
    let mut set = locations.into_iter().flatten();
    let location = match (set.next(), set.next()) {
        (Some(location), None) => location?,
        _ => {
            return Err(invalid(
                "set exactly one of signature_header, signature_pointer, signature_form_field",
            ));
        }
    };
    let template = Template::parse(&variant.signed_content)?;
    let syntax = variant.syntax;
    let timestamp = match (
        &variant.timestamp_header,
        &variant.timestamp_pointer,
        syntax,
        &variant.timestamp_key,
    ) {
        (None, None, Syntax::List, _) | (None, None, Syntax::Pairs, Some(_)) => {
            Some(TimestampSource::Signature)
        }
        (
            Some(name),
            None,
            Syntax::Single | Syntax::Versioned | Syntax::Keyed | Syntax::Pairs,
            None,
        ) => Some(TimestampSource::Header(header_name(
            "timestamp_header",
            name,
        )?)),
        (None, Some(pointer), _, None) => Some(TimestampSource::Pointer(intern(pointer_in(
            "timestamp_pointer",
            pointer,
        )?))),
        (None, None, _, None) => None,
        _ => {
            return Err(invalid(
                "set at most one of timestamp_header, timestamp_pointer and a pairs signature's timestamp_key",
            ));
        }
    };
    let signs_timestamp = template.uses(&Part::Timestamp);
    match (&timestamp, signs_timestamp) {
        (None, true) => {
            return Err(invalid(
                "signed_content uses {timestamp}, which needs timestamp_header (or a timestamp in the signature)",
            ));
        }
        (Some(TimestampSource::Header(_)), false) => {
            return Err(invalid(
                "timestamp_header is set but signed_content has no {timestamp}: an unsigned timestamp cannot be trusted",
            ));
        }
        _ => {}
    }
    if template.uses(&Part::Id) && variant.id_header.is_none() && scheme.id_header.is_none() {
        return Err(invalid("signed_content uses {id}, which needs id_header"));
    }
    let signature_key = variant
        .signature_key
        .clone()
        .unwrap_or_else(|| "v1".to_owned());
    if syntax == Syntax::Pairs && variant.signature_key.is_none() {
        return Err(invalid("a pairs signature needs signature_key (e.g. v1)"));
    }
    let tolerance = match &variant.tolerance {
        Some(text) => parse_duration(text).map_err(|e| invalid(format!("tolerance: {e}")))?,
        None => DEFAULT_TOLERANCE,
    };
    let when = variant
        .when_header
        .as_deref()
        .map(|text| {
            let (name, value) = match text.split_once(':') {
                Some((name, value)) => (name.trim(), Some(value.trim().to_owned())),
                None => (text.trim(), None),
            };
            header_name("when_header", name).map(|name| (name, value))
        })
        .transpose()?;
    Ok(Signature {
        location,
        syntax,
        prefix: variant.prefix.clone(),
        separator: variant.separator.clone().unwrap_or_else(|| ",".to_owned()),
        timestamp_key: variant.timestamp_key.clone(),
        signature_key,
        encoding: variant.encoding,
        algorithm: variant.algorithm,
        mac: variant.mac,
        template,
        timestamp,
        unit: variant.timestamp_unit,
        check: variant.timestamp_check,
        tolerance,
        when,
    })
}

/// An endpoint's `tolerance` replaces every variant's default.
fn apply_tolerance(mut variants: Vec<Signature>, tolerance: Option<Duration>) -> Vec<Signature> {
    if let Some(tolerance) = tolerance {
        for variant in &mut variants {
            variant.tolerance = tolerance;
        }
    }
    variants
}

/// A configured secret as the description derives its key. The reasons are
/// fixed strings: a refused secret never reaches a log or an error.
fn parse_key(description: &Description, keyed: bool, secret: &str) -> Result<Key, &'static str> {
    let (id, secret) = if keyed {
        let (id, secret) = secret
            .split_once(':')
            .ok_or("expected <key id>:<secret>, e.g. <public key>:<private key>")?;
        if id.is_empty() {
            return Err("the key id before ':' is empty");
        }
        (Some(id.to_owned()), secret)
    } else {
        (None, secret)
    };
    let checked = match description.secret_format {
        SecretFormat::Typed => super::secrets::typed(secret)?,
        SecretFormat::Generated => super::secrets::generated(secret)?,
    };
    if let Some(prefix) = &description.secret_prefix {
        match secret.strip_prefix(prefix.as_str()) {
            None => {
                return Err(
                    "the secret lacks the provider's prefix (see the README's provider table)",
                );
            }
            Some("") => return Err("nothing follows the secret's prefix"),
            Some(_) => {}
        }
    }
    let key = match description.key {
        KeyDerivation::Bytes => checked,
        KeyDerivation::Hex => Secret::new(hex::decode(secret).map_err(|_| "expected hex")?),
        KeyDerivation::Base64 => {
            Secret::new(STANDARD.decode(secret).map_err(|_| "expected base64")?)
        }
        KeyDerivation::Whsec => {
            let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
            Secret::new(
                STANDARD
                    .decode(encoded)
                    .map_err(|_| "expected whsec_ followed by base64")?,
            )
        }
        KeyDerivation::Sha1 => Secret::new(Sha1::digest(secret.as_bytes()).to_vec()),
    };
    if key.expose().is_empty() {
        return Err("the key is empty");
    }
    Ok(Key { id, key })
}

fn retry_window(description: &Description) -> Result<RetryWindow, ProviderConfigError> {
    let schedule = intern(description.retry_schedule.as_deref().unwrap_or(""));
    let source = intern(description.retry_source.as_deref().unwrap_or(""));
    Ok(match description.retry_window.as_deref() {
        None => RetryWindow::Unknown,
        Some("none") => RetryWindow::NoAutomaticRetries {
            note: schedule,
            source,
        },
        Some(text) => RetryWindow::Retries {
            window: parse_duration(text).map_err(|e| invalid(format!("retry_window: {e}")))?,
            schedule,
            source,
        },
    })
}

/// A configured header name, checked and made `'static` for `Rejection`.
fn header_name(field: &str, name: &str) -> Result<&'static str, ProviderConfigError> {
    if HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(invalid(format!("{field} is not a valid header name")));
    }
    Ok(intern(name))
}

/// A JSON pointer that names something inside the body (so not `""`, which
/// is the whole body).
fn pointer_in<'a>(field: &str, pointer: &'a str) -> Result<&'a str, ProviderConfigError> {
    if !pointer.starts_with('/') {
        return Err(invalid(format!(
            "{field} must be a JSON pointer such as /id"
        )));
    }
    Ok(pointer)
}

/// The configured names a `Rejection` carries are `&'static str`. Each
/// distinct name is leaked once per process and then reused, so building
/// providers again (tests, the `sign` and `send` commands) leaks nothing more.
fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_auto_timestamp_reads_seconds_or_milliseconds() {
        let d = Description {
            signature_header: Some("X-Sig".into()),
            timestamp_header: Some("X-Ts".into()),
            signed_content: "{timestamp}.{body}".into(),
            timestamp_unit: TimestampUnit::Auto,
            ..Description::default()
        };
        let signature = compile_signature(&d, &d).unwrap();
        assert_eq!(parse_timestamp(&signature, "1742505638"), Ok(1_742_505_638));
        assert_eq!(
            parse_timestamp(&signature, "1742505638683"),
            Ok(1_742_505_638)
        );
        // Eleven digits are neither a plausible second nor millisecond.
        for bad in ["17425056386", "123", "", "1742505638.5"] {
            assert!(parse_timestamp(&signature, bad).is_err(), "{bad}");
        }
    }
}
