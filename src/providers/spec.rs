//! What configuration says about an endpoint's provider.

use super::description::Description;
use std::path::PathBuf;
use std::time::Duration;

/// Everything a provider is built from. Its `Debug` counts the secrets and
/// never shows them.
#[derive(Clone, Default)]
pub struct ProviderSpec {
    pub secrets: Vec<String>,
    /// `None`: the provider's own default. `Some(ZERO)`: no timestamp check.
    pub tolerance: Option<Duration>,
    /// The generic scheme's description (`[endpoints.NAME.hmac]`).
    pub hmac: Option<Description>,
    /// The public URL the provider posts to, for schemes that sign it
    /// (Square, Twilio, HubSpot v2/v3).
    pub url: Option<String>,
    /// PayPal's webhook id, which its signature covers.
    pub webhook_id: Option<String>,
    /// PayPal: a pinned signing certificate (PEM).
    pub certificate: Option<PathBuf>,
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
            .field("url", &self.url)
            .field("webhook_id", &self.webhook_id)
            .field("certificate", &self.certificate)
            .finish()
    }
}

impl ProviderSpec {
    pub fn tolerance_or(&self, default: Duration) -> Duration {
        self.tolerance.unwrap_or(default)
    }
}
