/// A configuration that cannot be used. Every message names the file (or
/// "environment") and the key, and never echoes a secret.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read the configuration: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: `{key}`: {message}")]
    Invalid {
        file: String,
        key: String,
        message: String,
    },
}

/// Builds the errors of one source (a file, or "environment").
#[derive(Clone, Copy)]
pub(super) struct Source<'a>(pub &'a str);

impl Source<'_> {
    pub fn invalid(self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            file: self.0.to_owned(),
            key: key.to_owned(),
            message: message.into(),
        }
    }

    /// `value` parsed as a duration, else `default`.
    pub fn duration(
        self,
        key: &str,
        value: Option<&String>,
        default: std::time::Duration,
    ) -> Result<std::time::Duration, ConfigError> {
        match value {
            Some(text) => {
                crate::duration_text::parse_duration(text).map_err(|m| self.invalid(key, m))
            }
            None => Ok(default),
        }
    }

    /// An optional duration: `None` when the key is absent.
    pub fn optional_duration(
        self,
        key: &str,
        value: Option<&String>,
    ) -> Result<Option<std::time::Duration>, ConfigError> {
        value
            .map(|text| {
                crate::duration_text::parse_duration(text).map_err(|m| self.invalid(key, m))
            })
            .transpose()
    }
}
