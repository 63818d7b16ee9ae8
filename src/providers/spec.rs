//! What configuration says about an endpoint's provider.

use super::mac::Algorithm;
use serde::Deserialize;
use std::time::Duration;

/// Everything a provider is built from. Its `Debug` counts the secrets and
/// never shows them.
#[derive(Clone, Default)]
pub struct ProviderSpec {
    pub secrets: Vec<String>,
    /// `None`: the provider's own default. `Some(ZERO)`: no timestamp check.
    pub tolerance: Option<Duration>,
    /// The generic scheme's settings (`[endpoints.NAME.hmac]`).
    pub hmac: Option<HmacSpec>,
}

impl std::fmt::Debug for ProviderSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSpec")
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .field("tolerance", &self.tolerance)
            .field("hmac", &self.hmac)
            .finish()
    }
}

impl ProviderSpec {
    pub fn tolerance_or(&self, default: Duration) -> Duration {
        self.tolerance.unwrap_or(default)
    }
}

/// The generic HMAC scheme, for senders that follow no published standard.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HmacSpec {
    /// The header that carries the signature.
    pub signature_header: String,
    #[serde(default)]
    pub algorithm: Algorithm,
    #[serde(default)]
    pub encoding: Encoding,
    /// Stripped from the header value before decoding, e.g. `sha256=`.
    #[serde(default)]
    pub prefix: String,
    /// What is signed: a template over `{id}`, `{timestamp}` and `{body}`.
    #[serde(default = "default_signed_content")]
    pub signed_content: String,
    /// A header with the Unix timestamp (seconds) that `{timestamp}` stands
    /// for; when set, it is checked against the tolerance in both directions.
    pub timestamp_header: Option<String>,
    /// Where the key comes from: exactly one of these four.
    pub id_header: Option<String>,
    /// A JSON pointer into the body, e.g. `/id`.
    pub id_pointer: Option<String>,
    /// Several JSON pointers whose values, joined with `:`, make the key.
    pub id_fields: Option<Vec<String>>,
    /// The SHA-256 of the body is the key (for senders that send no id).
    #[serde(default)]
    pub id_body_hash: bool,
    pub event_type_header: Option<String>,
    pub event_type_pointer: Option<String>,
}

fn default_signed_content() -> String {
    "{body}".to_owned()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Hex,
    Base64,
}
