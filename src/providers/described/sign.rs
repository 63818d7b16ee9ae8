//! Signing as a described provider would: the request `send`, `sign`, the
//! fixtures and the tests post. It is the verifier read backwards, so that a
//! description cannot be verified one way and signed another.

use super::signature::encode;
use super::template::{Part, Values};
use super::{Described, Location, Signature, TimestampSource};
use crate::providers::description::{MacKind, PayloadFormat, Syntax, TimestampUnit};
use crate::providers::{SignError, SignInput, Signed, SignedRequest};
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, SecondsFormat};
use serde_json::Value;

const FORM: &str = "application/x-www-form-urlencoded";

pub fn sign(d: &Described, input: &SignInput<'_>) -> Result<Signed, SignError> {
    let key = d.keys.first().ok_or(SignError::NoSecret)?;
    let signature = d.variants.first().ok_or(SignError::NoSecret)?;
    let timestamp = timestamp_text(signature, input.timestamp);
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut query: Vec<(String, String)> = Vec::new();
    let mut body = input.body.to_vec();

    // A variant selected by its own signature header (HubSpot's v3) is
    // selected by the signature itself: no placeholder beside it.
    if let Some((name, value)) = &signature.when
        && !matches!(signature.location, Location::Header(h) if h.eq_ignore_ascii_case(name))
    {
        headers.push((
            (*name).to_owned(),
            value.clone().unwrap_or_else(|| "1".into()),
        ));
    }
    if let Some(TimestampSource::Header(name)) = signature.timestamp {
        headers.push((name.to_owned(), timestamp.clone()));
    }
    if let Some(TimestampSource::Pointer(pointer)) = signature.timestamp {
        body = with_json(&body, |json| {
            set(json, pointer, timestamp_value(signature, input.timestamp));
            Ok(())
        })?;
    }
    if let super::IdSource::Header(name) = d.id {
        headers.push((name.to_owned(), input.delivery_id.to_owned()));
    }
    if let (Some(name), Some(event)) = (
        d.event_type.as_ref().and_then(|e| e.header()),
        input.event_type,
    ) {
        headers.push((name.to_owned(), event.to_owned()));
    }
    for part in signature.template.parts() {
        match part {
            Part::Header(name) if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) => {
                headers.push(((*name).to_owned(), input.delivery_id.to_owned()));
            }
            Part::Query { name, .. } if !query.iter().any(|(n, _)| n == name) => {
                query.push(((*name).to_owned(), input.delivery_id.to_owned()));
            }
            _ => {}
        }
    }
    if let super::IdSource::Query(name) = d.id
        && !query.iter().any(|(n, _)| n == name)
    {
        query.push((name.to_owned(), input.delivery_id.to_owned()));
    }
    let json_body = serde_json::from_slice::<Value>(&body).is_ok();
    if let Some(name) = d.body_sha256_query
        && json_body
    {
        query.push((name.to_owned(), crate::digest_hex::sha256_hex(&body)));
    }
    let query_text = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&query)
        .finish();

    let braintree = d.payload == PayloadFormat::BraintreeXml;
    let mut form: Vec<(String, String)> = match d.payload {
        PayloadFormat::BraintreeXml => vec![("bt_payload".into(), STANDARD.encode(&body))],
        PayloadFormat::Form if !json_body => super::payload::form_fields(&body),
        _ => Vec::new(),
    };
    let tag_value = |fields: Option<&Value>,
                     form: &[(String, String)],
                     body: &[u8],
                     headers: &[(String, String)]| {
        let map = header_map(headers)?;
        let request = SignedRequest {
            headers: &map,
            body,
            method: "POST",
            query: &query_text,
        };
        let values = Values {
            request: &request,
            url: d.url.as_deref(),
            id: Some(input.delivery_id),
            timestamp: Some(&timestamp),
            fields,
            form,
        };
        let pieces = signature
            .template
            .render(&values)
            .map_err(|e| SignError::Body(e.to_string()))?;
        let parts: Vec<&[u8]> = pieces.iter().map(|p| p.as_ref()).collect();
        let tag = signature.tag(key.key.expose(), &parts);
        Ok::<_, SignError>(written(signature, key, &timestamp, &tag))
    };

    match &signature.location {
        Location::Header(name) => {
            let fields = if signature
                .template
                .parts()
                .any(|p| matches!(p, Part::Field(_)))
            {
                serde_json::from_slice::<Value>(&body).ok()
            } else {
                None
            };
            let value = tag_value(fields.as_ref(), &form, &body, &headers)?;
            headers.push(((*name).to_owned(), value));
        }
        Location::Pointer(pointer) => {
            let items = d.items.clone();
            let snapshot = headers.clone();
            body = with_json(&body, |json| {
                let targets: Vec<&mut Value> = match &items {
                    Some((array, item)) => {
                        match json.pointer_mut(array).and_then(Value::as_array_mut) {
                            Some(elements) => elements
                                .iter_mut()
                                .filter_map(|e| match item {
                                    Some(p) => e.pointer_mut(p),
                                    None => Some(e),
                                })
                                .collect(),
                            None => return Err(SignError::Body("the batch has no items".into())),
                        }
                    }
                    None => vec![json],
                };
                for target in targets {
                    let value = tag_value(Some(target), &form, &[], &snapshot)?;
                    set(target, pointer, Value::String(value));
                }
                Ok(())
            })?;
        }
        Location::Form(name) => {
            let value = tag_value(None, &form, &body, &headers)?;
            form.insert(0, ((*name).to_owned(), value));
            body = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(&form)
                .finish()
                .into_bytes();
        }
    }
    if braintree || (d.payload == PayloadFormat::Form && !json_body) {
        headers.push(("Content-Type".into(), FORM.into()));
    }
    Ok(Signed {
        headers,
        body: (body != input.body).then_some(body),
        query: query_text,
    })
}

/// The signature as it is written at its location.
fn written(signature: &Signature, key: &super::Key, timestamp: &str, tag: &[u8]) -> String {
    let encoded = if signature.mac == MacKind::Token {
        String::from_utf8_lossy(tag).into_owned()
    } else {
        encode(signature, tag)
    };
    match signature.syntax {
        Syntax::Single => format!("{}{encoded}", signature.prefix),
        Syntax::Pairs => match &signature.timestamp_key {
            Some(t) => format!(
                "{t}={timestamp}{}{}={encoded}",
                signature.separator, signature.signature_key
            ),
            None => format!("{}={encoded}", signature.signature_key),
        },
        Syntax::Versioned => format!("{},{encoded}", signature.signature_key),
        Syntax::List => format!("{timestamp},{encoded}"),
        Syntax::Keyed => format!("{}|{encoded}", key.id.as_deref().unwrap_or("")),
    }
}

fn timestamp_text(signature: &Signature, seconds: i64) -> String {
    match signature.unit {
        TimestampUnit::Seconds | TimestampUnit::Auto => seconds.to_string(),
        TimestampUnit::Milliseconds => (seconds * 1000).to_string(),
        TimestampUnit::Rfc3339 => DateTime::from_timestamp(seconds, 0)
            .unwrap_or_default()
            .to_rfc3339_opts(SecondsFormat::Secs, true),
    }
}

/// A timestamp as a body field carries it: a number, or RFC 3339 text.
fn timestamp_value(signature: &Signature, seconds: i64) -> Value {
    match signature.unit {
        TimestampUnit::Seconds | TimestampUnit::Auto => Value::from(seconds),
        TimestampUnit::Milliseconds => Value::from(seconds * 1000),
        TimestampUnit::Rfc3339 => Value::String(timestamp_text(signature, seconds)),
    }
}

fn with_json(
    body: &[u8],
    change: impl FnOnce(&mut Value) -> Result<(), SignError>,
) -> Result<Vec<u8>, SignError> {
    let mut json: Value = serde_json::from_slice(body).map_err(|_| {
        SignError::Body("the scheme signs inside the body, which must be JSON".into())
    })?;
    change(&mut json)?;
    serde_json::to_vec(&json).map_err(|e| SignError::Body(e.to_string()))
}

/// Sets `pointer` in `json` to `value`, creating objects on the way.
fn set(json: &mut Value, pointer: &str, value: Value) {
    let mut current = json;
    let segments: Vec<&str> = pointer.split('/').skip(1).collect();
    for (i, segment) in segments.iter().enumerate() {
        if !current.is_object() {
            *current = Value::Object(serde_json::Map::new());
        }
        let Value::Object(map) = current else { return };
        if i + 1 == segments.len() {
            map.insert((*segment).to_owned(), value);
            return;
        }
        current = map
            .entry((*segment).to_owned())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
}

fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, SignError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| SignError::Body(format!("{name} is not a header name")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| SignError::Body("a header value is not visible ASCII".into()))?;
        map.append(name, value);
    }
    Ok(map)
}
