//! What makes two requests "the same payload": SHA-256 over the method, the
//! route pattern and the body, with JSON bodies normalised (keys sorted, no
//! whitespace) so that re-serialising the same object is not a different
//! request.

use serde_json::Value;
use sha2::{Digest, Sha256};

pub fn fingerprint(method: &str, route: &str, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(method.as_bytes());
    hash.update(b"\n");
    hash.update(route.as_bytes());
    hash.update(b"\n");
    match serde_json::from_slice::<Value>(body) {
        Ok(value) => {
            let mut canonical = Vec::with_capacity(body.len());
            write_canonical(&value, &mut canonical);
            hash.update(b"json\n");
            hash.update(&canonical);
        }
        Err(_) => {
            hash.update(b"raw\n");
            hash.update(body);
        }
    }
    crate::digest_hex::hex(&hash.finalize())
}

/// Writes `value` with object keys sorted and no whitespace. Written out here
/// rather than left to `serde_json`'s map order, which a dependency enabling
/// `preserve_order` would silently change.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(&Value::String(key.clone()), out);
                out.push(b':');
                write_canonical(value, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    // Serialising a JSON scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn re_serialising_the_same_object_is_the_same_payload() {
        let a = fingerprint(
            "POST",
            "/payments",
            br#"{"amount": 100, "currency":"EUR","meta":{"b":1,"a":[1, 2]}}"#,
        );
        let b = fingerprint("POST", "/payments", b"{\n  \"meta\": {\"a\": [1,2], \"b\": 1},\n  \"currency\": \"EUR\", \"amount\": 100\n}");
        assert_eq!(a, b);
    }

    #[test]
    fn another_value_route_or_method_is_another_payload() {
        let base = fingerprint("POST", "/payments", br#"{"amount":100}"#);
        assert_ne!(base, fingerprint("POST", "/payments", br#"{"amount":101}"#));
        assert_ne!(base, fingerprint("POST", "/refunds", br#"{"amount":100}"#));
        assert_ne!(
            base,
            fingerprint("PATCH", "/payments", br#"{"amount":100}"#)
        );
        assert_ne!(
            fingerprint("POST", "/p", br#"[1,2]"#),
            fingerprint("POST", "/p", br#"[2,1]"#)
        );
    }

    #[test]
    fn a_body_that_is_not_json_is_hashed_as_it_is() {
        assert_ne!(
            fingerprint("POST", "/p", b"a=1"),
            fingerprint("POST", "/p", b"a=2")
        );
        assert_eq!(
            fingerprint("POST", "/p", b"a=1"),
            fingerprint("POST", "/p", b"a=1")
        );
    }
}
