use std::fmt;

/// Key material. It never prints: `Debug` and `Display` show a placeholder, so
/// a secret cannot reach a log line through formatting.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Box<[u8]>);

impl Secret {
    pub fn new(bytes: impl Into<Box<[u8]>>) -> Secret {
        Secret(bytes.into())
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn a_secret_never_formats_its_bytes() {
        let secret = Secret::new(b"hunter2".to_vec());
        assert!(!format!("{secret:?} {secret}").contains("hunter2"));
    }
}
