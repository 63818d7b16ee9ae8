//! Finding the signatures of a request where a description says they are,
//! written as it says, and decoding them.

use super::super::{Rejection, header};
use super::{Location, Signature};
use crate::providers::description::{Encoding, MacKind, Syntax};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use crate::providers::mac::{MAX_SIGNATURES, TOO_MANY_SIGNATURES};

/// One signature found, decoded.
pub struct Candidate {
    /// `keyed` syntax: which key signed (Braintree's public key).
    pub key_id: Option<String>,
    pub tag: Vec<u8>,
}

/// What a signature value held.
pub struct Found<'a> {
    pub candidates: Vec<Candidate>,
    /// `pairs` and `list` carry the timestamp beside the signatures.
    pub timestamp: Option<&'a str>,
}

/// The raw value at the signature's location.
pub fn raw<'a>(
    signature: &Signature,
    headers: &'a actix_web::http::header::HeaderMap,
    fields: Option<&'a Value>,
    form: &'a [(String, String)],
) -> Result<&'a str, Rejection> {
    match &signature.location {
        Location::Header(name) => header(headers, name)?.ok_or(Rejection::MissingHeader(name)),
        Location::Pointer(pointer) => fields
            .and_then(|f| crate::json_pointer::get(f, pointer))
            .and_then(Value::as_str)
            .ok_or(Rejection::MissingField(pointer)),
        Location::Form(name) => form
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, v)| v.as_str())
            .ok_or(Rejection::MissingField(name)),
    }
}

/// Parses `value` as the signature's syntax says. Any shape error is a
/// malformed signature; an empty or wrong-length tag merely cannot match.
pub fn parse<'a>(signature: &Signature, value: &'a str) -> Result<Found<'a>, Rejection> {
    let malformed = |reason| signature.malformed(reason);
    let mut found = Found {
        candidates: Vec::new(),
        timestamp: None,
    };
    let push = |found: &mut Found<'a>, key_id: Option<&str>, text: &str| {
        if found.candidates.len() == MAX_SIGNATURES {
            return Err(malformed(TOO_MANY_SIGNATURES));
        }
        found.candidates.push(Candidate {
            key_id: key_id.map(str::to_owned),
            tag: decode(signature, text)?,
        });
        Ok(())
    };
    match signature.syntax {
        Syntax::Single => {
            let encoded = value
                .strip_prefix(signature.prefix.as_str())
                .ok_or(malformed("it lacks the expected prefix"))?;
            if signature.mac != MacKind::Token && encoded.contains([',', ' ', '\t']) {
                return Err(malformed(
                    "it holds more than one signature; exactly one is expected",
                ));
            }
            push(&mut found, None, encoded)?;
        }
        Syntax::Pairs => {
            for pair in value.split(signature.separator.as_str()) {
                let Some((key, text)) = pair.trim_start().split_once('=') else {
                    return Err(malformed("expected key=value pairs"));
                };
                if Some(key) == signature.timestamp_key.as_deref() {
                    if found.timestamp.replace(text).is_some() {
                        return Err(malformed("the timestamp is given more than once"));
                    }
                } else if key == signature.signature_key {
                    push(&mut found, None, text)?;
                }
            }
            if found.timestamp.is_none() && signature.timestamp_key.is_some() {
                return Err(malformed("it has no timestamp"));
            }
        }
        Syntax::Versioned => {
            for entry in value.split(' ').filter(|e| !e.is_empty()) {
                let Some((version, text)) = entry.split_once(',') else {
                    return Err(malformed(
                        "expected space-separated version,signature entries",
                    ));
                };
                if version == signature.signature_key {
                    push(&mut found, None, text)?;
                }
            }
        }
        Syntax::List => {
            let mut entries = value.split(',');
            let timestamp = entries.next().filter(|t| !t.is_empty());
            found.timestamp = Some(timestamp.ok_or(malformed("it has no timestamp"))?);
            for text in entries {
                push(&mut found, None, text)?;
            }
        }
        Syntax::Keyed => {
            for pair in value.split('&') {
                let Some((key_id, text)) = pair.split_once('|') else {
                    return Err(malformed("expected key|signature pairs"));
                };
                push(&mut found, Some(key_id), text)?;
            }
        }
    }
    Ok(found)
}

/// A signature's text, decoded. A token is compared as it is.
fn decode(signature: &Signature, text: &str) -> Result<Vec<u8>, Rejection> {
    if signature.mac == MacKind::Token {
        return Ok(text.as_bytes().to_vec());
    }
    match signature.encoding {
        // An odd number of digits can never be a tag: it decodes to nothing,
        // which verification refuses like any other wrong signature.
        Encoding::Hex => crate::providers::mac::hex_candidate(text)
            .ok_or(signature.malformed("a signature is not hex")),
        Encoding::Base64 => STANDARD
            .decode(text)
            .map_err(|_| signature.malformed("a signature is not base64")),
    }
}

/// A tag as the description writes it.
pub fn encode(signature: &Signature, tag: &[u8]) -> String {
    match signature.encoding {
        Encoding::Hex => hex::encode(tag),
        Encoding::Base64 => STANDARD.encode(tag),
    }
}
