//! A verified body, parsed into the event's payload with every NUL character
//! replaced.
//!
//! JSON may carry `\u0000` in any string. PostgreSQL's `text` cannot hold
//! that character (it refuses the statement: "invalid byte sequence for
//! encoding UTF8: 0x00"), while SQLite stores it; an event type or an order
//! id with one would be stored on one backend and fail with a 500 on every
//! redelivery on the other, for days of provider retries. The provider
//! cannot change a payload it has signed, so the value is kept, with U+FFFD
//! (the replacement character) in place of NUL, on both backends alike. The
//! raw body is unchanged: in it a NUL is the six characters `\u0000`.

use serde_json::Value;

/// What stands in for a NUL in the payload's strings and keys.
pub const NUL_REPLACEMENT: char = '\u{fffd}';

/// Parses `body` as the payload that handlers, the event type and the
/// delivery id are read from.
pub fn parse_payload(body: &[u8]) -> serde_json::Result<Value> {
    let mut payload: Value = serde_json::from_slice(body)?;
    // Most bodies have no `\u0000` at all: leave those untouched.
    if may_hold_nul(body) {
        replace_nul(&mut payload);
    }
    Ok(payload)
}

/// Whether `body` may hold an escaped NUL (`\u0000`); a false positive
/// (an escaped backslash before `u0000`) only costs a walk.
fn may_hold_nul(body: &[u8]) -> bool {
    body.windows(6)
        .any(|w| w[0] == b'\\' && w[1] == b'u' && &w[2..] == b"0000")
}

/// Replaces every NUL in the strings and keys of `value` with U+FFFD.
pub fn replace_nul(value: &mut Value) {
    let clean = |s: &str| s.replace('\0', &NUL_REPLACEMENT.to_string());
    match value {
        Value::String(s) if s.contains('\0') => *s = clean(s),
        Value::Array(items) => items.iter_mut().for_each(replace_nul),
        Value::Object(fields) if fields.keys().any(|k| k.contains('\0')) => {
            let taken = std::mem::take(fields);
            for (key, mut field) in taken {
                replace_nul(&mut field);
                fields.insert(clean(&key), field);
            }
        }
        Value::Object(fields) => fields.values_mut().for_each(replace_nul),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_nul_in_any_string_or_key_is_replaced() {
        let body =
            br#"{"type":"pay\u0000ment","data":{"order_id":"o\u0000","k\u0000":["\u0000"]}}"#;
        let payload = parse_payload(body).unwrap();
        assert_eq!(
            payload,
            json!({"type":"pay\u{fffd}ment","data":{"order_id":"o\u{fffd}","k\u{fffd}":["\u{fffd}"]}})
        );
    }

    #[test]
    fn a_body_without_nul_is_parsed_as_it_is() {
        let body = br#"{"type":"a\\u0000b","n":1}"#;
        // An escaped backslash followed by `u0000` is text, not a NUL.
        assert_eq!(parse_payload(body).unwrap()["type"], "a\\u0000b");
        assert!(parse_payload(b"not json").is_err());
    }
}
