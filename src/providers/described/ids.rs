//! Where a described scheme finds a delivery's key and event type, and
//! whether its signature covers the key.

use super::super::{Rejection, SignedRequest, check_key, header, key_in_header};
use super::template::{Part, query_param};
use super::{Signature, header_name, intern, invalid, pointer_in};
use crate::providers::ProviderConfigError;
use crate::providers::description::{Description, MacKind};
use serde_json::Value;

#[derive(Debug)]
pub enum IdSource {
    Header(&'static str),
    Pointer(String),
    Fields(Vec<String>),
    BodyHash,
    Query(&'static str),
}

#[derive(Debug)]
pub struct EventSource {
    kind: EventKind,
    /// Appended with `.` when present.
    action: Option<String>,
}

#[derive(Debug)]
enum EventKind {
    Header(&'static str),
    Pointer(String),
    Fields(Vec<String>),
}

impl EventSource {
    /// The header the type is sent in, for signing.
    pub fn header(&self) -> Option<&'static str> {
        match self.kind {
            EventKind::Header(name) => Some(name),
            _ => None,
        }
    }
}

pub fn id_source(description: &Description, batch: bool) -> Result<IdSource, ProviderConfigError> {
    let d = description;
    let sources = [
        d.id_header.is_some(),
        d.id_pointer.is_some(),
        d.id_fields.is_some(),
        d.id_body_hash,
        d.id_query.is_some(),
    ];
    if sources.iter().filter(|&&set| set).count() != 1 {
        return Err(invalid(
            "set exactly one of id_header, id_pointer, id_fields, id_body_hash, id_query",
        ));
    }
    let source = if let Some(name) = &d.id_header {
        IdSource::Header(header_name("id_header", name)?)
    } else if let Some(pointer) = &d.id_pointer {
        IdSource::Pointer(pointer_in("id_pointer", pointer)?.to_owned())
    } else if let Some(pointers) = &d.id_fields {
        if pointers.is_empty() {
            return Err(invalid("id_fields must list at least one JSON pointer"));
        }
        for pointer in pointers {
            pointer_in("id_fields", pointer)?;
        }
        IdSource::Fields(pointers.clone())
    } else if let Some(name) = &d.id_query {
        IdSource::Query(intern(name))
    } else {
        IdSource::BodyHash
    };
    if batch && !matches!(source, IdSource::Pointer(_) | IdSource::Fields(_)) {
        return Err(invalid(
            "a batch's items are keyed by id_pointer or id_fields inside each item",
        ));
    }
    Ok(source)
}

pub fn event_source(description: &Description) -> Result<Option<EventSource>, ProviderConfigError> {
    let d = description;
    let kind = match (
        &d.event_type_header,
        &d.event_type_pointer,
        &d.event_type_fields,
    ) {
        (None, None, None) => return Ok(None),
        (Some(name), None, None) => EventKind::Header(header_name("event_type_header", name)?),
        (None, Some(pointer), None) => {
            EventKind::Pointer(pointer_in("event_type_pointer", pointer)?.to_owned())
        }
        (None, None, Some(pointers)) => {
            for pointer in pointers {
                pointer_in("event_type_fields", pointer)?;
            }
            EventKind::Fields(pointers.clone())
        }
        _ => {
            return Err(invalid(
                "set at most one of event_type_header, event_type_pointer, event_type_fields",
            ));
        }
    };
    let action = d
        .event_action_pointer
        .as_deref()
        .map(|p| pointer_in("event_action_pointer", p).map(str::to_owned))
        .transpose()?;
    Ok(Some(EventSource { kind, action }))
}

/// Whether every variant's signature covers the key. A key in the body is
/// covered when the body is; one in a header or the query only when the
/// signed content names it.
pub fn key_signed(id: &IdSource, variants: &[Signature], body_hash_signed: bool) -> bool {
    variants.iter().all(|v| {
        if v.mac == MacKind::Token {
            return false;
        }
        let t = &v.template;
        let body = t.uses(&Part::Body)
            || t.uses(&Part::FormSorted)
            || t.parts().any(|p| matches!(p, Part::Form(_)))
            || body_hash_signed;
        let field = |pointer: &str| t.uses(&Part::Field(pointer.to_owned()));
        match id {
            IdSource::Header(name) => {
                t.uses(&Part::Id) || t.parts().any(|p| *p == Part::Header(name))
            }
            IdSource::Query(name) => t
                .parts()
                .any(|p| matches!(p, Part::Query { name: n, .. } if n == name)),
            IdSource::Pointer(pointer) => body || field(pointer),
            IdSource::Fields(pointers) => body || pointers.iter().all(|p| field(p)),
            IdSource::BodyHash => body,
        }
    })
}

/// Schemes that cannot sign the body at all (static tokens, Mercado Pago's
/// manifest) are allowed only where the catalogue or the operator says so
/// by naming their weakness.
pub fn unsigned_allowed(description: &Description) -> bool {
    description.weakness.is_some()
}

/// The key of one delivery: `payload` is the body's JSON, or the batch item.
pub fn key(
    id: &IdSource,
    request: &SignedRequest<'_>,
    payload: &Value,
) -> Result<String, Rejection> {
    match id {
        IdSource::Header(name) => key_in_header(request.headers, name),
        IdSource::Pointer(pointer) => key_at(payload, pointer),
        IdSource::Fields(pointers) => {
            let values = pointers
                .iter()
                .map(|pointer| key_at(payload, pointer))
                .collect::<Result<Vec<_>, _>>()?;
            let key = values.join(":");
            check_key(&key)?;
            Ok(key)
        }
        IdSource::BodyHash => Ok(crate::digest_hex::sha256_hex(request.body)),
        IdSource::Query(name) => {
            let key = query_param(request.query, name).ok_or(Rejection::MissingField(name))?;
            check_key(&key)?;
            Ok(key)
        }
    }
}

pub fn event_type(
    source: Option<&EventSource>,
    request: &SignedRequest<'_>,
    payload: &Value,
) -> Option<String> {
    let source = source?;
    let base = match &source.kind {
        EventKind::Header(name) => header(request.headers, name).ok()??.to_owned(),
        EventKind::Pointer(pointer) => text_at(payload, pointer)?,
        EventKind::Fields(pointers) => pointers
            .iter()
            .map(|p| text_at(payload, p))
            .collect::<Option<Vec<_>>>()?
            .join("."),
    };
    match source.action.as_deref().and_then(|p| text_at(payload, p)) {
        Some(action) => Some(format!("{base}.{action}")),
        None => Some(base),
    }
}

/// The value at `pointer`, where a `*` segment stands for an object's only
/// member (Braintree's `/subject/*/id`, whatever the subject is).
pub fn resolve<'a>(payload: &'a Value, pointer: &str) -> Option<&'a Value> {
    if !pointer.contains("/*") {
        return crate::json_pointer::get(payload, pointer);
    }
    let mut current = payload;
    for segment in pointer.split('/').skip(1) {
        current = match (segment, current) {
            ("*", Value::Object(map)) if map.len() == 1 => map.values().next()?,
            (_, Value::Object(map)) => map.get(&segment.replace("~1", "/").replace("~0", "~"))?,
            (_, Value::Array(items)) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(current)
}

fn key_at(payload: &Value, pointer: &str) -> Result<String, Rejection> {
    let key = match resolve(payload, pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(Rejection::MissingKey(intern(pointer))),
    };
    check_key(&key)?;
    Ok(key)
}

fn text_at(payload: &Value, pointer: &str) -> Option<String> {
    match resolve(payload, pointer)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}
