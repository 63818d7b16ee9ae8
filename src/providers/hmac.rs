//! The generic HMAC scheme (`provider = "hmac"`), for senders that follow no
//! published standard: one signature in a configured header, HMAC-SHA256 or
//! -SHA512 of a template over `{id}`, `{timestamp}` and `{body}`, hex or
//! base64, optionally behind a prefix such as `sha256=`. Secrets are used as
//! the bytes of the configured string.

use super::mac::{self, Algorithm};
use super::secrets::{parse_each, typed};
use super::{
    Encoding, HmacSpec, Provider, ProviderConfigError, ProviderSpec, Rejection, SignError,
    SignInput, SignedRequest, Verified, check_key, check_timestamp, header, key_at, key_in_header,
    parse_timestamp, required_header, text_at,
};
use crate::secret::Secret;
use actix_web::http::header::HeaderName;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The tolerance when `timestamp_header` is set and `tolerance` is not.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct GenericHmac {
    secrets: Vec<Secret>,
    signature_header: &'static str,
    algorithm: Algorithm,
    encoding: Encoding,
    prefix: String,
    template: Vec<Part>,
    /// `id_header`, when the template signs it.
    signed_id_header: Option<&'static str>,
    timestamp_header: Option<&'static str>,
    tolerance: Duration,
    key: KeySource,
    event_type: Option<EventSource>,
}

/// A piece of `signed_content`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Id,
    Timestamp,
    Body,
}

#[derive(Debug)]
enum KeySource {
    Header(&'static str),
    Pointer(&'static str),
    Fields(Vec<&'static str>),
    BodyHash,
}

#[derive(Debug)]
enum EventSource {
    Header(&'static str),
    Pointer(String),
}

impl GenericHmac {
    pub fn new(spec: &ProviderSpec) -> Result<Self, ProviderConfigError> {
        let secrets = parse_each(&spec.secrets, typed)?;
        let hmac = spec.hmac.as_ref().ok_or_else(|| {
            invalid("provider = \"hmac\" needs an hmac table, with at least signature_header")
        })?;
        let template = parse_template(&hmac.signed_content)?;
        let signs = |part: Part| template.contains(&part);
        if !signs(Part::Body) {
            return Err(invalid(
                "signed_content must include {body}: a signature that leaves out the body proves nothing about it",
            ));
        }
        if signs(Part::Id) && hmac.id_header.is_none() {
            return Err(invalid("signed_content uses {id}, which needs id_header"));
        }
        match (&hmac.timestamp_header, signs(Part::Timestamp)) {
            (None, true) => {
                return Err(invalid(
                    "signed_content uses {timestamp}, which needs timestamp_header",
                ));
            }
            (Some(_), false) => {
                return Err(invalid(
                    "timestamp_header is set but signed_content has no {timestamp}: an unsigned timestamp cannot be trusted",
                ));
            }
            _ => {}
        }
        let key = key_source(hmac)?;
        let signed_id_header = match key {
            KeySource::Header(name) if signs(Part::Id) => Some(name),
            _ => None,
        };
        Ok(GenericHmac {
            secrets,
            signature_header: header_name("signature_header", &hmac.signature_header)?,
            algorithm: hmac.algorithm,
            encoding: hmac.encoding,
            prefix: hmac.prefix.clone(),
            signed_id_header,
            timestamp_header: hmac
                .timestamp_header
                .as_deref()
                .map(|name| header_name("timestamp_header", name))
                .transpose()?,
            tolerance: spec.tolerance_or(DEFAULT_TOLERANCE),
            key,
            event_type: event_source(hmac)?,
            template,
        })
    }

    /// The signed content's pieces, in order.
    fn signed_parts<'a>(
        &'a self,
        id: &'a str,
        timestamp: &'a str,
        body: &'a [u8],
    ) -> Vec<&'a [u8]> {
        self.template
            .iter()
            .map(|part| match part {
                Part::Text(text) => text.as_bytes(),
                Part::Id => id.as_bytes(),
                Part::Timestamp => timestamp.as_bytes(),
                Part::Body => body,
            })
            .collect()
    }

    /// The signature header's value, decoded: exactly one signature, behind
    /// the configured prefix.
    fn candidate(&self, value: &str) -> Result<Vec<u8>, Rejection> {
        let malformed = |reason| Rejection::MalformedHeader {
            header: self.signature_header,
            reason,
        };
        let encoded = value
            .strip_prefix(self.prefix.as_str())
            .ok_or(malformed("it lacks the configured prefix"))?;
        if encoded.contains([',', ' ', '\t']) {
            return Err(malformed(
                "it holds more than one signature; exactly one is expected",
            ));
        }
        match self.encoding {
            Encoding::Hex => {
                hex::decode(encoded).map_err(|_| malformed("the signature is not hex"))
            }
            Encoding::Base64 => STANDARD
                .decode(encoded)
                .map_err(|_| malformed("the signature is not base64")),
        }
    }
}

impl Provider for GenericHmac {
    fn name(&self) -> &'static str {
        "hmac"
    }

    fn verify(
        &self,
        request: &SignedRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified, Rejection> {
        let value = required_header(request.headers, self.signature_header)?;
        let id = match self.signed_id_header {
            Some(name) => required_header(request.headers, name)?,
            None => "",
        };
        let (timestamp_text, timestamp) = match self.timestamp_header {
            Some(name) => {
                let text = required_header(request.headers, name)?;
                (text, Some(parse_timestamp(text, name)?))
            }
            None => ("", None),
        };
        let candidate = self.candidate(value)?;
        let parts = self.signed_parts(id, timestamp_text, request.body);
        // Constant-time, and any other length fails, so an empty value or a
        // prefix of the right tag cannot match.
        let secret_index = mac::matching_secret(
            self.algorithm,
            &self.secrets,
            &parts,
            std::slice::from_ref(&candidate),
        )
        .ok_or(Rejection::InvalidSignature)?;
        if let Some(timestamp) = timestamp {
            check_timestamp(timestamp, now, self.tolerance)?;
        }
        Ok(Verified { secret_index })
    }

    fn delivery_id(
        &self,
        request: &SignedRequest<'_>,
        payload: &Value,
    ) -> Result<String, Rejection> {
        match &self.key {
            KeySource::Header(name) => key_in_header(request.headers, name),
            KeySource::Pointer(pointer) => key_at(payload, pointer),
            KeySource::Fields(pointers) => {
                let values = pointers
                    .iter()
                    .map(|pointer| key_at(payload, pointer))
                    .collect::<Result<Vec<_>, _>>()?;
                let key = values.join(":");
                check_key(&key)?;
                Ok(key)
            }
            KeySource::BodyHash => Ok(hex::encode(Sha256::digest(request.body))),
        }
    }

    fn event_type(&self, request: &SignedRequest<'_>, payload: &Value) -> Option<String> {
        match self.event_type.as_ref()? {
            EventSource::Header(name) => header(request.headers, name).ok()?.map(str::to_owned),
            EventSource::Pointer(pointer) => text_at(payload, pointer),
        }
    }

    /// A key from the body is signed, since the template must include
    /// `{body}`; a key from a header only when the template includes `{id}`.
    fn delivery_id_is_signed(&self) -> bool {
        !matches!(self.key, KeySource::Header(_)) || self.signed_id_header.is_some()
    }

    fn sign(&self, input: &SignInput<'_>) -> Result<Vec<(String, String)>, SignError> {
        let secret = self.secrets.first().ok_or(SignError::NoSecret)?;
        let timestamp = input.timestamp.to_string();
        let parts = self.signed_parts(input.delivery_id, &timestamp, input.body);
        let tag = mac::sign(self.algorithm, secret.expose(), &parts);
        let encoded = match self.encoding {
            Encoding::Hex => hex::encode(tag),
            Encoding::Base64 => STANDARD.encode(tag),
        };
        let mut headers = vec![(
            self.signature_header.to_owned(),
            format!("{}{encoded}", self.prefix),
        )];
        if let Some(name) = self.timestamp_header {
            headers.push((name.to_owned(), timestamp));
        }
        if let KeySource::Header(name) = self.key {
            headers.push((name.to_owned(), input.delivery_id.to_owned()));
        }
        if let (Some(EventSource::Header(name)), Some(event)) = (&self.event_type, input.event_type)
        {
            headers.push(((*name).to_owned(), event.to_owned()));
        }
        Ok(headers)
    }
}

fn invalid(message: &str) -> ProviderConfigError {
    ProviderConfigError::Invalid(message.to_owned())
}

/// Splits `signed_content` into text and the three placeholders; any other
/// brace is an error, so that a typo such as `{ts}` cannot be signed as text.
fn parse_template(template: &str) -> Result<Vec<Part>, ProviderConfigError> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    while let Some(brace) = rest.find(['{', '}']) {
        let (before, tail) = rest.split_at(brace);
        text.push_str(before);
        let (part, after) = [
            ("{id}", Part::Id),
            ("{timestamp}", Part::Timestamp),
            ("{body}", Part::Body),
        ]
        .into_iter()
        .find_map(|(placeholder, part)| tail.strip_prefix(placeholder).map(|after| (part, after)))
        .ok_or_else(|| {
            invalid("signed_content may use only the placeholders {id}, {timestamp} and {body}")
        })?;
        if !text.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut text)));
        }
        parts.push(part);
        rest = after;
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

fn key_source(hmac: &HmacSpec) -> Result<KeySource, ProviderConfigError> {
    let sources = [
        hmac.id_header.is_some(),
        hmac.id_pointer.is_some(),
        hmac.id_fields.is_some(),
        hmac.id_body_hash,
    ];
    if sources.iter().filter(|&&set| set).count() != 1 {
        return Err(invalid(
            "set exactly one of id_header, id_pointer, id_fields, id_body_hash",
        ));
    }
    if let Some(name) = &hmac.id_header {
        return Ok(KeySource::Header(header_name("id_header", name)?));
    }
    if let Some(pointer) = &hmac.id_pointer {
        return Ok(KeySource::Pointer(intern(pointer_in(
            "id_pointer",
            pointer,
        )?)));
    }
    if let Some(pointers) = &hmac.id_fields {
        if pointers.is_empty() {
            return Err(invalid("id_fields must list at least one JSON pointer"));
        }
        let pointers = pointers
            .iter()
            .map(|pointer| pointer_in("id_fields", pointer).map(intern))
            .collect::<Result<_, _>>()?;
        return Ok(KeySource::Fields(pointers));
    }
    Ok(KeySource::BodyHash)
}

fn event_source(hmac: &HmacSpec) -> Result<Option<EventSource>, ProviderConfigError> {
    match (&hmac.event_type_header, &hmac.event_type_pointer) {
        (Some(_), Some(_)) => Err(invalid(
            "set at most one of event_type_header, event_type_pointer",
        )),
        (Some(name), None) => Ok(Some(EventSource::Header(header_name(
            "event_type_header",
            name,
        )?))),
        (None, Some(pointer)) => Ok(Some(EventSource::Pointer(
            pointer_in("event_type_pointer", pointer)?.to_owned(),
        ))),
        (None, None) => Ok(None),
    }
}

/// A configured header name, checked and made `'static` for `Rejection`.
fn header_name(field: &str, name: &str) -> Result<&'static str, ProviderConfigError> {
    if HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(ProviderConfigError::Invalid(format!(
            "{field} is not a valid header name"
        )));
    }
    Ok(intern(name))
}

/// A JSON pointer that names something inside the body (so not `""`, which
/// is the whole body).
fn pointer_in<'a>(field: &str, pointer: &'a str) -> Result<&'a str, ProviderConfigError> {
    if !pointer.starts_with('/') {
        return Err(ProviderConfigError::Invalid(format!(
            "{field} must be a JSON pointer such as /id"
        )));
    }
    Ok(pointer)
}

/// The configured names a `Rejection` carries are `&'static str`. Each distinct
/// name is leaked once per process and then reused, so building providers
/// again (tests, the `sign` and `send` commands) leaks nothing more.
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
    use crate::providers::test_support::{
        self, assert_tolerated_either_way, delivery_id_for, event_type_for, malformed_in, pairs,
        verify_request,
    };

    // The generic scheme has no publisher and so no published vectors. These
    // were computed independently of this code, with Python's standard library:
    //   python3 -c 'import hmac,hashlib; print("sha256="+hmac.new(
    //     b"generic-secret-1", b"{\"id\":\"evt_1001\",\"type\":\"invoice.paid\"}",
    //     hashlib.sha256).hexdigest())'
    const HEX_SECRET: &str = "generic-secret-1";
    const HEX_BODY: &[u8] = br#"{"id":"evt_1001","type":"invoice.paid"}"#;
    const HEX_SIGNATURE: &str =
        "sha256=7bbc2cab3a39094e1585a47837374d9246c24f34c85dfb5e2a8883ac7c7fc824";
    //   python3 -c 'import hmac,hashlib,base64; print(base64.b64encode(hmac.new(
    //     b"generic-secret-2", b"{\"account\":\"acct_7\",\"sequence\":42,
    //     \"event\":\"balance.updated\"}", hashlib.sha512).digest()).decode())'
    // (the body on one line, without spaces)
    const BASE64_SECRET: &str = "generic-secret-2";
    const BASE64_BODY: &[u8] = br#"{"account":"acct_7","sequence":42,"event":"balance.updated"}"#;
    const BASE64_SIGNATURE: &str =
        "dUphO4x6OP7aOSoCQX+FaYPbvMfGvGHHS6X9NQNGRQd5ydmiusTgmQjCfd/jQFJRCohKOj4xNHaFsZgjwBxnig==";
    //   python3 -c 'import hmac,hashlib; print(hmac.new(b"generic-secret-3",
    //     b"dlv_42.1700000000.{\"kind\":\"ping\"}", hashlib.sha256).hexdigest())'
    const TEMPLATE_SECRET: &str = "generic-secret-3";
    const TEMPLATE_ID: &str = "dlv_42";
    const TEMPLATE_TIMESTAMP: i64 = 1_700_000_000;
    const TEMPLATE_BODY: &[u8] = br#"{"kind":"ping"}"#;
    const TEMPLATE_SIGNATURE: &str =
        "1475da014d8cc11a8fdfd30323ecb9aa4f29e6eb79da1c5ac31950fac5b5f25c";
    //   python3 -c 'import hashlib; print(hashlib.sha256(
    //     b"{\"id\":\"evt_1001\",\"type\":\"invoice.paid\"}").hexdigest())'
    const HEX_BODY_SHA256: &str =
        "a4faf2a2c6b3cb13529fbca8513122e463b09918b861f7e9bee8f039fcaaaaae";

    /// A body-only, hex, `sha256=` spec keyed on `/id`.
    fn hex_spec() -> HmacSpec {
        HmacSpec {
            signature_header: "X-Signature".into(),
            algorithm: Algorithm::Sha256,
            encoding: Encoding::Hex,
            prefix: "sha256=".into(),
            signed_content: "{body}".into(),
            timestamp_header: None,
            id_header: None,
            id_pointer: Some("/id".into()),
            id_fields: None,
            id_body_hash: false,
            event_type_header: None,
            event_type_pointer: Some("/type".into()),
        }
    }

    fn base64_spec() -> HmacSpec {
        HmacSpec {
            signature_header: "X-Signature-512".into(),
            algorithm: Algorithm::Sha512,
            encoding: Encoding::Base64,
            prefix: String::new(),
            id_pointer: None,
            id_fields: Some(vec!["/account".into(), "/sequence".into()]),
            event_type_pointer: Some("/event".into()),
            ..hex_spec()
        }
    }

    fn template_spec() -> HmacSpec {
        HmacSpec {
            signature_header: "X-Webhook-Signature".into(),
            prefix: String::new(),
            signed_content: "{id}.{timestamp}.{body}".into(),
            timestamp_header: Some("X-Webhook-Timestamp".into()),
            id_header: Some("X-Webhook-Id".into()),
            id_pointer: None,
            event_type_header: Some("X-Webhook-Event".into()),
            event_type_pointer: None,
            ..hex_spec()
        }
    }

    fn spec(secrets: &[&str], hmac: HmacSpec, tolerance: Option<Duration>) -> ProviderSpec {
        ProviderSpec {
            hmac: Some(hmac),
            ..test_support::spec(secrets, tolerance)
        }
    }

    fn provider(secrets: &[&str], hmac: HmacSpec) -> GenericHmac {
        GenericHmac::new(&spec(secrets, hmac, None)).unwrap()
    }

    fn config_error(hmac: HmacSpec) -> ProviderConfigError {
        GenericHmac::new(&spec(&[HEX_SECRET], hmac, None)).unwrap_err()
    }

    fn verify_with(
        p: &GenericHmac,
        pairs: &[(&str, &str)],
        body: &[u8],
        now: i64,
    ) -> Result<Verified, Rejection> {
        verify_request(p, pairs, body, now)
    }

    fn verify_hex(p: &GenericHmac, signature: &str) -> Result<Verified, Rejection> {
        verify_with(
            p,
            &[("x-signature", signature)],
            HEX_BODY,
            TEMPLATE_TIMESTAMP,
        )
    }

    fn verify_template(
        p: &GenericHmac,
        signature: &str,
        timestamp: &str,
        now: i64,
    ) -> Result<Verified, Rejection> {
        verify_with(
            p,
            &[
                ("x-webhook-id", TEMPLATE_ID),
                ("x-webhook-timestamp", timestamp),
                ("x-webhook-signature", signature),
            ],
            TEMPLATE_BODY,
            now,
        )
    }

    fn payload(body: &[u8]) -> Value {
        serde_json::from_slice(body).unwrap()
    }

    fn key(p: &GenericHmac, pairs: &[(&str, &str)], body: &[u8]) -> Result<String, Rejection> {
        delivery_id_for(p, pairs, body, &payload(body))
    }

    fn event(p: &GenericHmac, pairs: &[(&str, &str)], body: &[u8]) -> Option<String> {
        event_type_for(p, pairs, body, &payload(body))
    }

    #[test]
    fn the_sha256_hex_vector_with_a_prefix_verifies() {
        let p = provider(&[HEX_SECRET], hex_spec());
        assert_eq!(
            verify_hex(&p, HEX_SIGNATURE),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn the_sha512_base64_vector_verifies() {
        let p = provider(&[BASE64_SECRET], base64_spec());
        let result = verify_with(
            &p,
            &[("x-signature-512", BASE64_SIGNATURE)],
            BASE64_BODY,
            TEMPLATE_TIMESTAMP,
        );
        assert_eq!(result, Ok(Verified { secret_index: 0 }));
    }

    #[test]
    fn the_id_timestamp_body_template_vector_verifies() {
        let p = provider(&[TEMPLATE_SECRET], template_spec());
        let ts = TEMPLATE_TIMESTAMP.to_string();
        assert_eq!(
            verify_template(&p, TEMPLATE_SIGNATURE, &ts, TEMPLATE_TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn signing_reproduces_each_vector() {
        let sign = |p: &GenericHmac, delivery_id, body, event_type| {
            p.sign(&SignInput {
                delivery_id,
                timestamp: TEMPLATE_TIMESTAMP,
                body,
                event_type,
            })
            .unwrap()
        };
        let hex = provider(&[HEX_SECRET], hex_spec());
        assert_eq!(
            sign(&hex, "evt_1001", HEX_BODY, None),
            vec![("X-Signature".into(), HEX_SIGNATURE.into())]
        );
        let base64 = provider(&[BASE64_SECRET], base64_spec());
        assert_eq!(
            sign(&base64, "ignored", BASE64_BODY, None),
            vec![("X-Signature-512".into(), BASE64_SIGNATURE.into())]
        );
        let template = provider(&[TEMPLATE_SECRET], template_spec());
        assert_eq!(
            sign(&template, TEMPLATE_ID, TEMPLATE_BODY, Some("ping")),
            vec![
                ("X-Webhook-Signature".into(), TEMPLATE_SIGNATURE.into()),
                ("X-Webhook-Timestamp".into(), "1700000000".into()),
                ("X-Webhook-Id".into(), TEMPLATE_ID.into()),
                ("X-Webhook-Event".into(), "ping".into()),
            ]
        );
    }

    #[test]
    fn what_is_signed_verifies_and_yields_its_key_and_event() {
        let p = provider(&["a-fresh-secret"], template_spec());
        let body = br#"{"kind":"invoice.paid"}"#;
        let signed = p
            .sign(&SignInput {
                delivery_id: "dlv_7",
                timestamp: TEMPLATE_TIMESTAMP,
                body,
                event_type: Some("invoice.paid"),
            })
            .unwrap();
        let pairs = pairs(&signed);
        assert_eq!(
            verify_with(&p, &pairs, body, TEMPLATE_TIMESTAMP + 10),
            Ok(Verified { secret_index: 0 })
        );
        assert_eq!(key(&p, &pairs, body), Ok("dlv_7".into()));
        assert_eq!(event(&p, &pairs, body), Some("invoice.paid".into()));
    }

    #[test]
    fn any_of_several_secrets_may_match_and_is_named_by_index() {
        let p = provider(&["the-new-secret", "another-one", HEX_SECRET], hex_spec());
        assert_eq!(
            verify_hex(&p, HEX_SIGNATURE),
            Ok(Verified { secret_index: 2 })
        );
    }

    #[test]
    fn a_wrong_secret_fails() {
        let p = provider(&["generic-secret-9"], hex_spec());
        assert_eq!(
            verify_hex(&p, HEX_SIGNATURE),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_changed_id_or_timestamp_fails_when_the_template_signs_them() {
        let p = provider(&[TEMPLATE_SECRET], template_spec());
        let later = (TEMPLATE_TIMESTAMP + 1).to_string();
        assert_eq!(
            verify_template(&p, TEMPLATE_SIGNATURE, &later, TEMPLATE_TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
        let ts = TEMPLATE_TIMESTAMP.to_string();
        let result = verify_with(
            &p,
            &[
                ("x-webhook-id", "dlv_43"),
                ("x-webhook-timestamp", &ts),
                ("x-webhook-signature", TEMPLATE_SIGNATURE),
            ],
            TEMPLATE_BODY,
            TEMPLATE_TIMESTAMP,
        );
        assert_eq!(result, Err(Rejection::InvalidSignature));
    }

    #[test]
    fn empty_truncated_and_prefix_signatures_fail() {
        let hex = provider(&[HEX_SECRET], hex_spec());
        let half = &HEX_SIGNATURE[..7 + 32];
        let short = &HEX_SIGNATURE[..HEX_SIGNATURE.len() - 2];
        for signature in ["sha256=", half, short] {
            assert_eq!(
                verify_hex(&hex, signature),
                Err(Rejection::InvalidSignature),
                "{signature:?}"
            );
        }
        let base64 = provider(&[BASE64_SECRET], base64_spec());
        let raw = STANDARD.decode(BASE64_SIGNATURE).unwrap();
        let sha256_long = STANDARD.encode(&raw[..32]);
        for signature in ["", sha256_long.as_str()] {
            let result = verify_with(
                &base64,
                &[("x-signature-512", signature)],
                BASE64_BODY,
                TEMPLATE_TIMESTAMP,
            );
            assert_eq!(result, Err(Rejection::InvalidSignature), "{signature:?}");
        }
    }

    #[test]
    fn a_missing_prefix_bad_encoding_or_several_signatures_are_malformed() {
        let p = provider(&[HEX_SECRET], hex_spec());
        let bare = HEX_SIGNATURE.strip_prefix("sha256=").unwrap();
        let sha512 = format!("sha512={bare}");
        let odd = &HEX_SIGNATURE[..HEX_SIGNATURE.len() - 1];
        let comma = format!("{HEX_SIGNATURE},{HEX_SIGNATURE}");
        let spaced = format!("sha256={bare} {bare}");
        for signature in [
            bare,
            sha512.as_str(),
            "",
            "sha256=zz",
            odd,
            comma.as_str(),
            spaced.as_str(),
        ] {
            let result = verify_hex(&p, signature);
            assert!(
                malformed_in(&result, "X-Signature"),
                "{signature:?}: {result:?}"
            );
        }
        let base64 = provider(&[BASE64_SECRET], base64_spec());
        let result = verify_with(
            &base64,
            &[("x-signature-512", "not*base64")],
            BASE64_BODY,
            TEMPLATE_TIMESTAMP,
        );
        assert!(matches!(result, Err(Rejection::MalformedHeader { .. })));
    }

    #[test]
    fn missing_headers_are_named_as_configured() {
        let p = provider(&[TEMPLATE_SECRET], template_spec());
        let ts = TEMPLATE_TIMESTAMP.to_string();
        let ts = ts.as_str();
        let cases = [
            (
                [("x-webhook-id", TEMPLATE_ID), ("x-webhook-timestamp", ts)],
                "X-Webhook-Signature",
            ),
            (
                [
                    ("x-webhook-id", TEMPLATE_ID),
                    ("x-webhook-signature", TEMPLATE_SIGNATURE),
                ],
                "X-Webhook-Timestamp",
            ),
            (
                [
                    ("x-webhook-timestamp", ts),
                    ("x-webhook-signature", TEMPLATE_SIGNATURE),
                ],
                "X-Webhook-Id",
            ),
        ];
        for (pairs, missing) in cases {
            assert_eq!(
                verify_with(&p, &pairs, TEMPLATE_BODY, TEMPLATE_TIMESTAMP),
                Err(Rejection::MissingHeader(missing))
            );
        }
    }

    #[test]
    fn an_unparseable_or_absurd_timestamp_is_malformed() {
        let p = provider(&[TEMPLATE_SECRET], template_spec());
        for timestamp in ["soon", "-5", "1700000000.5", "99999999999999999999", "12"] {
            let result = verify_template(&p, TEMPLATE_SIGNATURE, timestamp, TEMPLATE_TIMESTAMP);
            assert!(
                malformed_in(&result, "X-Webhook-Timestamp"),
                "{timestamp:?}: {result:?}"
            );
        }
    }

    #[test]
    fn the_timestamp_is_checked_in_both_directions() {
        let p = provider(&[TEMPLATE_SECRET], template_spec());
        let ts = TEMPLATE_TIMESTAMP.to_string();
        let check = |now| verify_template(&p, TEMPLATE_SIGNATURE, &ts, now);
        assert_tolerated_either_way(check, TEMPLATE_TIMESTAMP, 300);
    }

    #[test]
    fn a_configured_tolerance_applies_and_zero_disables_the_check() {
        let ts = TEMPLATE_TIMESTAMP.to_string();
        let with = |tolerance| {
            let spec = spec(&[TEMPLATE_SECRET], template_spec(), Some(tolerance));
            GenericHmac::new(&spec).unwrap()
        };
        let strict = with(Duration::from_secs(10));
        assert_eq!(
            verify_template(&strict, TEMPLATE_SIGNATURE, &ts, TEMPLATE_TIMESTAMP + 11),
            Err(Rejection::StaleTimestamp { tolerance_secs: 10 })
        );
        let off = with(Duration::ZERO);
        let a_year_later = TEMPLATE_TIMESTAMP + 86_400 * 365;
        assert!(verify_template(&off, TEMPLATE_SIGNATURE, &ts, a_year_later).is_ok());
    }

    #[test]
    fn a_forged_signature_is_refused_before_its_timestamp_is_judged() {
        let p = provider(&[TEMPLATE_SECRET], template_spec());
        let ts = TEMPLATE_TIMESTAMP.to_string();
        let forged = "00".repeat(32);
        assert_eq!(
            verify_template(&p, &forged, &ts, TEMPLATE_TIMESTAMP + 3_600),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn the_key_comes_from_a_json_pointer() {
        let p = provider(&[HEX_SECRET], hex_spec());
        assert_eq!(key(&p, &[], HEX_BODY), Ok("evt_1001".into()));
        assert_eq!(
            key(&p, &[], br#"{"type":"invoice.paid"}"#),
            Err(Rejection::MissingKey("/id"))
        );
        assert!(matches!(
            key(&p, &[], br#"{"id":""}"#),
            Err(Rejection::InvalidKey(_))
        ));
        assert!(p.delivery_id_is_signed());
    }

    #[test]
    fn id_fields_join_their_values_with_colons() {
        let p = provider(&[BASE64_SECRET], base64_spec());
        assert_eq!(key(&p, &[], BASE64_BODY), Ok("acct_7:42".into()));
        assert_eq!(
            key(&p, &[], br#"{"account":"acct_7"}"#),
            Err(Rejection::MissingKey("/sequence"))
        );
        assert!(p.delivery_id_is_signed());
    }

    #[test]
    fn id_body_hash_keys_on_the_sha256_of_the_body() {
        let hmac = HmacSpec {
            id_pointer: None,
            id_body_hash: true,
            ..hex_spec()
        };
        let p = provider(&[HEX_SECRET], hmac);
        assert_eq!(key(&p, &[], HEX_BODY), Ok(HEX_BODY_SHA256.into()));
        assert!(p.delivery_id_is_signed());
    }

    #[test]
    fn an_id_header_is_signed_only_when_the_template_includes_it() {
        let signed = provider(&[TEMPLATE_SECRET], template_spec());
        assert!(signed.delivery_id_is_signed());
        let unsigned = provider(
            &[HEX_SECRET],
            HmacSpec {
                id_pointer: None,
                id_header: Some("X-Request-Id".into()),
                ..hex_spec()
            },
        );
        assert!(!unsigned.delivery_id_is_signed());
        assert_eq!(
            key(&unsigned, &[("x-request-id", "r-1")], HEX_BODY),
            Ok("r-1".into())
        );
        assert_eq!(
            key(&unsigned, &[], HEX_BODY),
            Err(Rejection::MissingHeader("X-Request-Id"))
        );
    }

    #[test]
    fn the_event_type_comes_from_a_header_a_pointer_or_nowhere() {
        let from_header = provider(&[TEMPLATE_SECRET], template_spec());
        assert_eq!(
            event(&from_header, &[("x-webhook-event", "ping")], TEMPLATE_BODY),
            Some("ping".into())
        );
        assert_eq!(event(&from_header, &[], TEMPLATE_BODY), None);
        let from_pointer = provider(&[HEX_SECRET], hex_spec());
        assert_eq!(
            event(&from_pointer, &[], HEX_BODY),
            Some("invoice.paid".into())
        );
        let nowhere = provider(
            &[HEX_SECRET],
            HmacSpec {
                event_type_pointer: None,
                ..hex_spec()
            },
        );
        assert_eq!(event(&nowhere, &[], HEX_BODY), None);
    }

    #[test]
    fn the_key_source_must_be_exactly_one() {
        let none = HmacSpec {
            id_pointer: None,
            ..hex_spec()
        };
        let two = HmacSpec {
            id_body_hash: true,
            ..hex_spec()
        };
        let expected = ProviderConfigError::Invalid(
            "set exactly one of id_header, id_pointer, id_fields, id_body_hash".into(),
        );
        assert_eq!(config_error(none), expected);
        assert_eq!(config_error(two), expected);
    }

    /// The configuration error's message, which names the offending field.
    fn message(hmac: HmacSpec) -> String {
        match config_error(hmac) {
            ProviderConfigError::Invalid(message) => message,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_template_may_use_only_known_placeholders_and_must_sign_the_body() {
        for template in ["{id}.{ts}.{body}", "{body}}", "{{body}", "{Body}"] {
            let hmac = HmacSpec {
                signed_content: template.into(),
                ..template_spec()
            };
            assert!(message(hmac).contains("signed_content"), "{template:?}");
        }
        for template in ["", "{id}.{timestamp}"] {
            let hmac = HmacSpec {
                signed_content: template.into(),
                ..template_spec()
            };
            assert!(message(hmac).contains("{body}"), "{template:?}");
        }
    }

    #[test]
    fn template_placeholders_need_their_headers() {
        let id_without_header = HmacSpec {
            signed_content: "{id}.{body}".into(),
            ..hex_spec()
        };
        assert!(message(id_without_header).contains("id_header"));
        let timestamp_without_header = HmacSpec {
            signed_content: "{timestamp}.{body}".into(),
            ..hex_spec()
        };
        assert!(message(timestamp_without_header).contains("timestamp_header"));
        let unsigned_timestamp = HmacSpec {
            signed_content: "{id}.{body}".into(),
            ..template_spec()
        };
        assert!(message(unsigned_timestamp).contains("timestamp_header"));
    }

    #[test]
    fn bad_names_pointers_and_event_sources_are_refused() {
        let cases = [
            (
                HmacSpec {
                    signature_header: "X Signature".into(),
                    ..hex_spec()
                },
                "signature_header",
            ),
            (
                HmacSpec {
                    timestamp_header: Some("".into()),
                    ..template_spec()
                },
                "timestamp_header",
            ),
            (
                HmacSpec {
                    id_pointer: Some("id".into()),
                    ..hex_spec()
                },
                "id_pointer",
            ),
            (
                HmacSpec {
                    id_fields: Some(vec![]),
                    ..base64_spec()
                },
                "id_fields",
            ),
            (
                HmacSpec {
                    id_fields: Some(vec!["/account".into(), "sequence".into()]),
                    ..base64_spec()
                },
                "id_fields",
            ),
            (
                HmacSpec {
                    event_type_header: Some("X-Event".into()),
                    ..hex_spec()
                },
                "event_type_header, event_type_pointer",
            ),
            (
                HmacSpec {
                    event_type_pointer: Some("".into()),
                    ..hex_spec()
                },
                "event_type_pointer",
            ),
        ];
        for (hmac, field) in cases {
            let message = message(hmac);
            assert!(message.contains(field), "{field}: {message}");
        }
    }

    #[test]
    fn the_hmac_table_and_a_usable_secret_are_required() {
        let no_table = test_support::spec(&[HEX_SECRET], None);
        assert!(matches!(
            GenericHmac::new(&no_table),
            Err(ProviderConfigError::Invalid(m)) if m.contains("hmac")
        ));
        assert_eq!(
            GenericHmac::new(&spec(&[], hex_spec(), None)).unwrap_err(),
            ProviderConfigError::NoSecret
        );
        for bad in ["", " padded", "newline\n"] {
            let result = GenericHmac::new(&spec(&[HEX_SECRET, bad], hex_spec(), None));
            assert!(
                matches!(
                    result,
                    Err(ProviderConfigError::MalformedSecret { index: 1, .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn configuration_errors_never_show_the_secret() {
        let secret = "s3cr3t-value ";
        let error = GenericHmac::new(&spec(&[secret], hex_spec(), None)).unwrap_err();
        assert!(!error.to_string().contains("s3cr3t"));
    }

    #[test]
    fn a_name_is_leaked_once_however_often_it_is_configured() {
        let first = intern("X-Interned-Once");
        let again = intern(&String::from("X-Interned-Once"));
        assert!(std::ptr::eq(first, again));
    }
}
