//! How a described scheme's body becomes the JSON payload handlers read:
//! JSON as it is; a form as an object of its fields; Braintree's
//! notification as its XML document turned into JSON.

use super::super::Rejection;
use crate::providers::description::PayloadFormat;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

/// The fields of a form-encoded body, in order, percent-decoded.
pub fn form_fields(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

pub fn read(format: PayloadFormat, body: &[u8]) -> Result<Value, Rejection> {
    match format {
        PayloadFormat::Json => {
            crate::payload::parse_payload(body).map_err(|_| Rejection::MalformedBody)
        }
        PayloadFormat::Form => Ok(form_object(&form_fields(body))),
        PayloadFormat::BraintreeXml => {
            let fields = form_fields(body);
            let encoded = fields
                .iter()
                .find(|(k, _)| k == "bt_payload")
                .map(|(_, v)| v)
                .ok_or(Rejection::MissingField("bt_payload"))?;
            // Braintree wraps its base64 at 60 columns.
            let compact: String = encoded.chars().filter(|c| !c.is_whitespace()).collect();
            let xml = STANDARD
                .decode(compact)
                .map_err(|_| Rejection::MalformedBody)?;
            let text = std::str::from_utf8(&xml).map_err(|_| Rejection::MalformedBody)?;
            xml_payload(text)
        }
    }
}

/// A form's fields as a JSON object; a field sent twice becomes an array.
fn form_object(fields: &[(String, String)]) -> Value {
    let mut object = Map::new();
    for (key, value) in fields {
        let value = Value::String(value.clone());
        match object.get_mut(key) {
            Some(Value::Array(values)) => values.push(value),
            Some(existing) => *existing = Value::Array(vec![existing.take(), value]),
            None => {
                object.insert(key.clone(), value);
            }
        }
    }
    let mut object = Value::Object(object);
    crate::payload::replace_nul(&mut object);
    object
}

/// How deep an XML document may nest: Braintree's go five or six levels;
/// the conversion below recurses once per level, so an unbounded depth
/// would let a signed body exhaust the stack.
const MAX_DEPTH: usize = 64;

/// An XML document as JSON, its root element dropped: an element with
/// children is an object (a name repeated, or `type="array"`, an array), a
/// leaf is its text, `nil="true"` is null. Attributes are otherwise not kept:
/// Braintree's carry only types.
pub fn xml_payload(text: &str) -> Result<Value, Rejection> {
    // Checked before parsing: the parser itself recurses per level.
    if nesting(text) > MAX_DEPTH {
        return Err(Rejection::MalformedBody);
    }
    let options = roxmltree::ParsingOptions {
        allow_dtd: false,
        ..roxmltree::ParsingOptions::default()
    };
    let document = roxmltree::Document::parse_with_options(text, options)
        .map_err(|_| Rejection::MalformedBody)?;
    let mut payload = element(document.root_element());
    crate::payload::replace_nul(&mut payload);
    Ok(payload)
}

/// An upper bound of how deep `text`'s elements nest, from its tags alone:
/// an opening tag deepens it unless it closes itself, a closing tag
/// undoes one. A `<` inside a comment or CDATA can only overestimate it.
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut rest = text;
    // Each tag is looked at once, from its `<` to its `>`: linear in the
    // body whatever it holds.
    while let Some(open) = rest.find('<') {
        let tag = &rest[open..];
        let end = tag.find('>').unwrap_or(tag.len());
        let inner = &tag[..end];
        match inner.as_bytes().get(1) {
            Some(b'/') => depth = depth.saturating_sub(1),
            Some(b'?' | b'!') => {}
            _ if inner.ends_with('/') => {}
            _ => {
                depth += 1;
                deepest = deepest.max(depth);
            }
        }
        rest = &tag[end..];
        if rest.is_empty() {
            break;
        }
    }
    deepest
}

fn element(node: roxmltree::Node<'_, '_>) -> Value {
    if node.attribute("nil") == Some("true") {
        return Value::Null;
    }
    let children: Vec<_> = node.children().filter(|c| c.is_element()).collect();
    if node.attribute("type") == Some("array") {
        return Value::Array(children.into_iter().map(element).collect());
    }
    if children.is_empty() {
        let text = node.text().unwrap_or("").trim();
        return Value::String(text.to_owned());
    }
    let mut object = Map::new();
    for child in children {
        let name = child.tag_name().name().to_owned();
        let value = element(child);
        match object.get_mut(&name) {
            Some(Value::Array(values)) => values.push(value),
            Some(existing) => *existing = Value::Array(vec![existing.take(), value]),
            None => {
                object.insert(name, value);
            }
        }
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn braintree_xml_becomes_json_without_its_root() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<notification>
  <kind>transaction_settled</kind>
  <timestamp type="datetime">2026-01-01T00:00:00Z</timestamp>
  <subject>
    <transaction>
      <id>abc</id>
      <amount>10.00</amount>
      <currency-iso-code>USD</currency-iso-code>
      <order-id nil="true"/>
      <add-ons type="array"/>
    </transaction>
  </subject>
</notification>"#;
        assert_eq!(
            xml_payload(xml).unwrap(),
            json!({"kind": "transaction_settled", "timestamp": "2026-01-01T00:00:00Z",
                   "subject": {"transaction": {"id": "abc", "amount": "10.00",
                   "currency-iso-code": "USD", "order-id": null, "add-ons": []}}})
        );
    }

    #[test]
    fn a_document_nested_too_deep_is_refused_without_recursing() {
        let depth = 10_000;
        let xml = format!("{}{}", "<a>".repeat(depth), "</a>".repeat(depth));
        assert_eq!(xml_payload(&xml), Err(Rejection::MalformedBody));
        let shallow = format!("{}x{}", "<a>".repeat(30), "</a>".repeat(30));
        assert!(xml_payload(&shallow).is_ok());
    }

    #[test]
    fn a_dtd_is_refused() {
        let xml = r#"<!DOCTYPE x [<!ENTITY a "aaaa">]><x>&a;</x>"#;
        assert_eq!(xml_payload(xml), Err(Rejection::MalformedBody));
    }

    #[test]
    fn a_form_becomes_an_object() {
        assert_eq!(
            read(PayloadFormat::Form, b"a=1&b=x%20y&a=2").unwrap(),
            json!({"a": ["1", "2"], "b": "x y"})
        );
    }
}
