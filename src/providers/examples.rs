//! Example secrets and bodies derived from a description: what `send`
//! posts without `--file`, and what the fixtures and the property tests
//! start from, for every catalogue entry alike.

use super::description::{Description, KeyDerivation, PayloadFormat, Syntax};
use serde_json::{Map, Value, json};

/// A secret of the form the description accepts (never a real one).
pub fn example_secret(d: &Description, seed: &str) -> String {
    let text = format!("example-{}-{seed}-0123456789abcdef", d.name);
    let secret = match d.key {
        KeyDerivation::Bytes | KeyDerivation::Sha1 => text,
        KeyDerivation::Hex => hex::encode(text.as_bytes()),
        KeyDerivation::Base64 | KeyDerivation::Whsec => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
        }
    };
    let secret = match (&d.secret_prefix, d.key) {
        (_, KeyDerivation::Whsec) => format!("whsec_{secret}"),
        (Some(prefix), _) => format!("{prefix}{secret}"),
        (None, _) => secret,
    };
    if d.syntax == Syntax::Keyed || d.variants.iter().any(|v| v.syntax == Syntax::Keyed) {
        format!("example_public_key:{secret}")
    } else {
        secret
    }
}

/// A body with `delivery_id` and `event_type` where the description reads
/// them, and a payment in the standard shape the payments handler reads;
/// for a batch, one item. Braintree's is its XML document; a form scheme's
/// is a form.
pub fn example_body(d: &Description, delivery_id: &str, event_type: &str) -> Vec<u8> {
    let mut item = json!({
        "data": {"id": format!("pay_{delivery_id}"), "order_id": "order_1001", "amount": 4200, "currency": "EUR"}
    });
    let mut put = |pointer: &str, value: &str| set(&mut item, pointer, Value::String(value.into()));
    if let Some(pointer) = &d.id_pointer {
        put(pointer, delivery_id);
    }
    if let Some(pointers) = &d.id_fields {
        for (i, pointer) in pointers.iter().enumerate() {
            put(
                pointer,
                &format!(
                    "{delivery_id}{}",
                    if i == 0 {
                        String::new()
                    } else {
                        format!("-{i}")
                    }
                ),
            );
        }
    }
    if let Some(pointer) = &d.event_type_pointer {
        put(pointer, event_type);
    }
    if let Some(pointers) = &d.event_type_fields {
        for (pointer, part) in pointers.iter().zip(event_type.split('.')) {
            put(pointer, part);
        }
    }
    let body = match &d.items {
        Some(array) => {
            let element = match &d.item {
                Some(pointer) => {
                    let mut element = Value::Object(Map::new());
                    set(&mut element, pointer, item);
                    element
                }
                None => item,
            };
            let mut body = Value::Object(Map::new());
            if array.is_empty() {
                body = Value::Array(vec![element]);
            } else {
                set(&mut body, array, Value::Array(vec![element]));
            }
            body
        }
        None => item,
    };
    match d.payload {
        PayloadFormat::Json => body.to_string().into_bytes(),
        PayloadFormat::Form => {
            let mut form = form_urlencoded::Serializer::new(String::new());
            flatten(&body, "", &mut |key, value| {
                form.append_pair(key, value);
            });
            form.finish().into_bytes()
        }
        PayloadFormat::BraintreeXml => {
            let mut xml =
                String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<notification>");
            to_xml(&body, &mut xml);
            xml.push_str("</notification>\n");
            xml.into_bytes()
        }
    }
}

/// Sets `pointer` (`*` segments read as `subject`) in `json`, creating
/// objects on the way.
fn set(json: &mut Value, pointer: &str, value: Value) {
    let segments: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|s| {
            if s == "*" {
                "subject_item".to_owned()
            } else {
                s.to_owned()
            }
        })
        .collect();
    let mut current = json;
    for (i, segment) in segments.iter().enumerate() {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        let Value::Object(map) = current else { return };
        if i + 1 == segments.len() {
            map.insert(segment.clone(), value);
            return;
        }
        current = map
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// A form's flat fields from an object: nested names joined with `.`.
fn flatten(value: &Value, prefix: &str, out: &mut impl FnMut(&str, &str)) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let name = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(child, &name, out);
            }
        }
        Value::String(s) => out(prefix, s),
        other => out(prefix, &other.to_string()),
    }
}

fn to_xml(value: &Value, xml: &mut String) {
    if let Value::Object(map) = value {
        for (key, child) in map {
            xml.push_str(&format!("<{key}>"));
            match child {
                Value::Object(_) => to_xml(child, xml),
                Value::String(s) => xml.push_str(&escape(s)),
                other => xml.push_str(&other.to_string()),
            }
            xml.push_str(&format!("</{key}>"));
        }
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
