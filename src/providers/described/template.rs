//! The signed content of a description: a template of text and
//! placeholders, parsed once at configuration and rendered per request into
//! the pieces the MAC is fed (the body is never copied).
//!
//! | placeholder | stands for |
//! |---|---|
//! | `{body}` | the raw body |
//! | `{id}` | the `id_header`'s value |
//! | `{timestamp}` | the timestamp exactly as sent |
//! | `{url}` | the endpoint's `url`, plus `?` and the request's query when it has one |
//! | `{method}` | the request's method |
//! | `{query:NAME}` | a query parameter, percent-decoded (`{query:NAME:lower}`: lowercased) |
//! | `{header:NAME}` | a header's value |
//! | `{field:/pointer}` | a string, number or boolean of the body (or of the batch item); absent: empty |
//! | `{form:NAME}` | a field of a form-encoded body |
//! | `{form_sorted}` | every distinct form field, sorted by name then value, as name and value concatenated |
//!
//! `[...]` makes a segment optional: it is left out when a placeholder in it
//! has nothing to stand for (Mercado Pago's manifest omits absent parts).

use super::super::{ProviderConfigError, Rejection, SignedRequest};
use super::intern;
use serde_json::Value;
use std::borrow::Cow;

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Segment>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Required(Part),
    Optional(Vec<Part>),
}

/// A piece of signed content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Body,
    Id,
    Timestamp,
    Url,
    Method,
    Query { name: &'static str, lower: bool },
    Header(&'static str),
    Field(String),
    Form(String),
    FormSorted,
}

/// What a template is rendered from.
pub struct Values<'a> {
    pub request: &'a SignedRequest<'a>,
    /// The configured public URL.
    pub url: Option<&'a str>,
    pub id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    /// The JSON `{field:..}` reads: the body or the batch item.
    pub fields: Option<&'a Value>,
    /// The decoded fields of a form body.
    pub form: &'a [(String, String)],
}

fn invalid(message: impl Into<String>) -> ProviderConfigError {
    ProviderConfigError::Invalid(message.into())
}

impl Template {
    /// Parses `text`; an unknown placeholder or an unbalanced brace or
    /// bracket is an error, so that a typo such as `{ts}` is never signed as
    /// literal text.
    pub fn parse(text: &str) -> Result<Template, ProviderConfigError> {
        let mut segments = Vec::new();
        let mut optional: Option<Vec<Part>> = None;
        let mut literal = String::new();
        let mut rest = text;
        let flush = |literal: &mut String,
                     optional: &mut Option<Vec<Part>>,
                     segments: &mut Vec<Segment>| {
            if literal.is_empty() {
                return;
            }
            let part = Part::Text(std::mem::take(literal));
            match optional {
                Some(parts) => parts.push(part),
                None => segments.push(Segment::Required(part)),
            }
        };
        while let Some(at) = rest.find(['{', '}', '[', ']']) {
            literal.push_str(&rest[..at]);
            let tail = &rest[at..];
            match tail.as_bytes()[0] {
                b'{' => {
                    let end = tail
                        .find('}')
                        .ok_or_else(|| invalid("signed_content has a { without its }"))?;
                    let part = placeholder(&tail[1..end])?;
                    flush(&mut literal, &mut optional, &mut segments);
                    match &mut optional {
                        Some(parts) => parts.push(part),
                        None => segments.push(Segment::Required(part)),
                    }
                    rest = &tail[end + 1..];
                }
                b'[' => {
                    if optional.is_some() {
                        return Err(invalid("signed_content cannot nest [ ] segments"));
                    }
                    flush(&mut literal, &mut optional, &mut segments);
                    optional = Some(Vec::new());
                    rest = &tail[1..];
                }
                b']' => {
                    flush(&mut literal, &mut optional, &mut segments);
                    let parts = optional
                        .take()
                        .ok_or_else(|| invalid("signed_content has a ] without its ["))?;
                    segments.push(Segment::Optional(parts));
                    rest = &tail[1..];
                }
                _ => return Err(invalid("signed_content has a } without its {")),
            }
        }
        if optional.is_some() {
            return Err(invalid("signed_content has a [ without its ]"));
        }
        literal.push_str(rest);
        flush(&mut literal, &mut optional, &mut segments);
        Ok(Template(segments))
    }

    /// Every placeholder, wherever it is.
    pub fn parts(&self) -> impl Iterator<Item = &Part> {
        self.0.iter().flat_map(|segment| match segment {
            Segment::Required(part) => std::slice::from_ref(part),
            Segment::Optional(parts) => parts.as_slice(),
        })
    }

    pub fn uses(&self, wanted: &Part) -> bool {
        self.parts().any(|part| part == wanted)
    }

    /// The pieces to feed the MAC, in order.
    pub fn render<'a>(&'a self, values: &Values<'a>) -> Result<Vec<Cow<'a, [u8]>>, Rejection> {
        let mut pieces = Vec::new();
        for segment in &self.0 {
            match segment {
                Segment::Required(part) => {
                    pieces.push(value(part, values)?.ok_or_else(|| missing(part))?)
                }
                Segment::Optional(parts) => {
                    let rendered = parts
                        .iter()
                        .map(|part| value(part, values))
                        .collect::<Result<Option<Vec<_>>, _>>()?;
                    pieces.extend(rendered.into_iter().flatten());
                }
            }
        }
        Ok(pieces)
    }
}

fn placeholder(inner: &str) -> Result<Part, ProviderConfigError> {
    let unknown = || {
        invalid(format!(
            "signed_content has an unknown placeholder {{{inner}}} (known: body, id, timestamp, url, method, query:NAME, header:NAME, field:/pointer, form:NAME, form_sorted)"
        ))
    };
    Ok(match inner {
        "body" => Part::Body,
        "id" => Part::Id,
        "timestamp" => Part::Timestamp,
        "url" => Part::Url,
        "method" => Part::Method,
        "form_sorted" => Part::FormSorted,
        _ => {
            let (kind, argument) = inner.split_once(':').ok_or_else(unknown)?;
            match kind {
                "query" => {
                    let (name, lower) = match argument.strip_suffix(":lower") {
                        Some(name) => (name, true),
                        None => (argument, false),
                    };
                    Part::Query {
                        name: intern(name),
                        lower,
                    }
                }
                "header" => Part::Header(super::header_name("signed_content", argument)?),
                "field" if argument.starts_with('/') => Part::Field(argument.to_owned()),
                "form" => Part::Form(argument.to_owned()),
                _ => return Err(unknown()),
            }
        }
    })
}

/// What a placeholder stands for in this request; `None` when it has
/// nothing to stand for.
fn value<'a>(part: &'a Part, values: &Values<'a>) -> Result<Option<Cow<'a, [u8]>>, Rejection> {
    let text = |s: &'a str| Some(Cow::Borrowed(s.as_bytes()));
    Ok(match part {
        Part::Text(literal) => text(literal),
        Part::Body => Some(Cow::Borrowed(values.request.body)),
        Part::Id => values.id.and_then(text),
        Part::Timestamp => values.timestamp.and_then(text),
        Part::Method => text(values.request.method),
        Part::Url => values.url.map(|url| {
            let query = values.request.query;
            if query.is_empty() {
                Cow::Borrowed(url.as_bytes())
            } else {
                Cow::Owned(format!("{url}?{query}").into_bytes())
            }
        }),
        Part::Query { name, lower } => query_param(values.request.query, name).map(|v| {
            let v = if *lower { v.to_lowercase() } else { v };
            Cow::Owned(v.into_bytes())
        }),
        Part::Header(name) => super::super::header(values.request.headers, name)?.and_then(text),
        Part::Field(pointer) => match values
            .fields
            .and_then(|f| crate::json_pointer::get(f, pointer))
        {
            Some(Value::String(s)) => text(s),
            Some(Value::Number(n)) => Some(Cow::Owned(n.to_string().into_bytes())),
            Some(Value::Bool(b)) => Some(Cow::Owned(b.to_string().into_bytes())),
            // Absent or null: empty, as the senders that sign fields do.
            _ => Some(Cow::Borrowed(&[][..])),
        },
        Part::Form(name) => values
            .form
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, v)| Cow::Borrowed(v.as_bytes())),
        Part::FormSorted => {
            let mut fields: Vec<&(String, String)> = values.form.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
            // A name sent twice with one value counts once, as Twilio's SDKs
            // sign it (`sorted(set(values))`).
            fields.dedup();
            let mut joined = Vec::new();
            for (key, v) in fields {
                joined.extend_from_slice(key.as_bytes());
                joined.extend_from_slice(v.as_bytes());
            }
            Some(Cow::Owned(joined))
        }
    })
}

/// Why a required placeholder had nothing to stand for.
fn missing(part: &Part) -> Rejection {
    match part {
        Part::Header(name) => Rejection::MissingHeader(name),
        Part::Query { name, .. } => Rejection::MissingField(name),
        Part::Form(_) => Rejection::MissingField("a signed form field"),
        Part::Url => Rejection::MissingField("url"),
        _ => Rejection::MissingField("a signed value"),
    }
}

/// The first value of query parameter `name`, percent-decoded.
pub fn query_param(query: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::HeaderMap;

    fn render(template: &str, query: &str, fields: Option<&Value>) -> Result<Vec<u8>, Rejection> {
        let headers = HeaderMap::new();
        let request = SignedRequest {
            headers: &headers,
            body: b"BODY",
            method: "POST",
            query,
        };
        let template = Template::parse(template).unwrap();
        let values = Values {
            request: &request,
            url: Some("https://example.com/hook"),
            id: Some("ID"),
            timestamp: Some("123"),
            fields,
            form: &[("b".into(), "2".into()), ("a".into(), "1".into())],
        };
        Ok(template.render(&values)?.concat())
    }

    #[test]
    fn placeholders_render_in_order() {
        assert_eq!(
            render("{method}{url}{id}.{timestamp}.{body}", "", None).unwrap(),
            b"POSThttps://example.com/hookID.123.BODY"
        );
        assert_eq!(
            render("{url}{form_sorted}", "x=1", None).unwrap(),
            b"https://example.com/hook?x=1a1b2"
        );
    }

    #[test]
    fn form_sorted_counts_a_repeated_field_and_value_once() {
        let headers = HeaderMap::new();
        let request = SignedRequest {
            headers: &headers,
            body: b"",
            method: "POST",
            query: "",
        };
        let form = [
            ("d".into(), "5".into()),
            ("d".into(), "1".into()),
            ("d".into(), "1".into()),
        ];
        let values = Values {
            request: &request,
            url: None,
            id: None,
            timestamp: None,
            fields: None,
            form: &form,
        };
        let template = Template::parse("{form_sorted}").unwrap();
        assert_eq!(template.render(&values).unwrap().concat(), b"d1d5");
    }

    #[test]
    fn optional_segments_drop_when_a_value_is_absent() {
        let template = "[id:{query:data.id:lower};]ts:{timestamp};";
        assert_eq!(
            render(template, "data.id=ABC", None).unwrap(),
            b"id:abc;ts:123;"
        );
        assert_eq!(render(template, "", None).unwrap(), b"ts:123;");
        assert_eq!(
            render("{query:data.id}", "", None),
            Err(Rejection::MissingField("data.id"))
        );
    }

    #[test]
    fn fields_render_strings_numbers_and_absent_as_empty() {
        let item = serde_json::json!({"a": "x", "n": 10, "ok": true});
        assert_eq!(
            render(
                "{field:/a}:{field:/n}:{field:/missing}:{field:/ok}",
                "",
                Some(&item)
            )
            .unwrap(),
            b"x:10::true"
        );
    }

    #[test]
    fn unknown_placeholders_and_unbalanced_brackets_are_refused() {
        for bad in [
            "{ts}",
            "{body",
            "body}",
            "[{id}",
            "{id}]",
            "[[{id}]]",
            "{field:id}",
        ] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
    }
}
