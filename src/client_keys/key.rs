//! The `Idempotency-Key` header: a structured-field string (`"..."`, as the
//! IETF draft has it) or a bare token, 1 to 255 printable ASCII characters.

use actix_web::http::header::HeaderMap;

pub const HEADER: &str = "idempotency-key";
const MAX_LEN: usize = 255;

/// A validated key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the Idempotency-Key header is sent more than once")]
    Repeated,
    #[error("the Idempotency-Key header is malformed: {0}")]
    Malformed(&'static str),
}

impl TryFrom<&str> for IdempotencyKey {
    type Error = KeyError;

    fn try_from(raw: &str) -> Result<Self, KeyError> {
        let key = match raw.strip_prefix('"') {
            Some(quoted) => unquote(quoted)?,
            None => {
                if !raw.bytes().all(|b| b.is_ascii_graphic()) || raw.contains('"') {
                    return Err(KeyError::Malformed(
                        "a bare key must be visible ASCII; quote it as a string otherwise",
                    ));
                }
                raw.to_owned()
            }
        };
        if key.is_empty() {
            return Err(KeyError::Malformed("the key is empty"));
        }
        if key.len() > MAX_LEN {
            return Err(KeyError::Malformed("the key is longer than 255 characters"));
        }
        Ok(IdempotencyKey(key))
    }
}

/// The body of an sf-string after its opening quote: printable ASCII, with
/// `\"` and `\\` as the only escapes, and nothing after the closing quote.
fn unquote(quoted: &str) -> Result<String, KeyError> {
    let mut key = String::new();
    let mut chars = quoted.chars();
    loop {
        match chars.next() {
            None => return Err(KeyError::Malformed("the quoted key is not closed")),
            Some('"') if chars.as_str().is_empty() => return Ok(key),
            Some('"') => return Err(KeyError::Malformed("text follows the quoted key")),
            Some('\\') => match chars.next() {
                Some(c @ ('"' | '\\')) => key.push(c),
                _ => return Err(KeyError::Malformed("only \\\" and \\\\ may be escaped")),
            },
            Some(c) if (' '..='~').contains(&c) => key.push(c),
            Some(_) => {
                return Err(KeyError::Malformed(
                    "the key has characters other than printable ASCII",
                ));
            }
        }
    }
}

/// The request's key, if it sent one.
pub fn from_headers(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, KeyError> {
    let mut values = headers.get_all(HEADER);
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyError::Repeated);
    }
    let text = value
        .to_str()
        .map_err(|_| KeyError::Malformed("the key has characters other than printable ASCII"))?;
    IdempotencyKey::try_from(text.trim()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Result<String, KeyError> {
        IdempotencyKey::try_from(raw).map(|k| k.0)
    }

    #[test]
    fn bare_tokens_and_structured_strings_are_both_keys() {
        let uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324";
        assert_eq!(parse(uuid), Ok(uuid.to_owned()));
        assert_eq!(parse(&format!("\"{uuid}\"")), Ok(uuid.to_owned()));
        assert_eq!(
            parse(r#""with space and \"quote\"""#),
            Ok("with space and \"quote\"".to_owned())
        );
    }

    #[test]
    fn empty_long_and_non_ascii_keys_are_malformed() {
        for bad in [
            "",
            "\"\"",
            "\"open",
            "\"a\"b",
            "bare space",
            "caf\u{e9}",
            "\"tab\there\"",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(parse(&"k".repeat(255)).is_ok());
        assert!(parse(&"k".repeat(256)).is_err());
    }
}
