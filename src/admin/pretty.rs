//! Stored bodies made readable on the key page: JSON indented, anything
//! else as the text it is (maud escapes it either way).
//!
//! The JSON is re-indented token by token rather than parsed and printed
//! again, so that what the operator reads is what was stored: keys in
//! their order, numbers digit for digit (a parse into `f64` would round a
//! large id), string escapes untouched.

/// A body as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// Valid JSON, indented by two spaces.
    Json(String),
    /// Not JSON: the body as text, invalid UTF-8 replaced.
    Text(String),
}

impl Shown {
    pub fn text(&self) -> &str {
        match self {
            Shown::Json(text) | Shown::Text(text) => text,
        }
    }
}

pub fn show(body: &[u8]) -> Shown {
    if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
        return Shown::Text(String::from_utf8_lossy(body).into_owned());
    }
    // Valid JSON is valid UTF-8.
    match std::str::from_utf8(body) {
        Ok(json) => Shown::Json(indent(json)),
        Err(_) => Shown::Text(String::from_utf8_lossy(body).into_owned()),
    }
}

/// `json` (known valid) with one member or element per line.
fn indent(json: &str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = json.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.peek().is_some_and(|n| n.is_whitespace()) {
                    chars.next();
                }
                // An empty object or array stays on its line.
                if let Some(&close @ ('}' | ']')) = chars.peek() {
                    out.push(close);
                    chars.next();
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_indented_as_stored() {
        let body =
            br#"{"z":1,"a":{"list":[12345678901234567890,"x, y: {z}",{}],"e":[]},"s":"q\"uote"}"#;
        let expected = r#"{
  "z": 1,
  "a": {
    "list": [
      12345678901234567890,
      "x, y: {z}",
      {}
    ],
    "e": []
  },
  "s": "q\"uote"
}"#;
        assert_eq!(show(body), Shown::Json(expected.to_owned()));
    }

    #[test]
    fn anything_else_is_text() {
        assert_eq!(show(b"a=1&b=<2>"), Shown::Text("a=1&b=<2>".into()));
        assert_eq!(show(b"{\"a\":"), Shown::Text("{\"a\":".into()));
        assert_eq!(show(b"\xff1"), Shown::Text("\u{fffd}1".into()));
    }
}
