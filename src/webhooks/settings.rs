use crate::providers::Provider;
use std::sync::Arc;
use std::time::Duration;

/// `[endpoints.NAME]`, validated: what start-up turns into an [`super::Endpoint`].
#[derive(Debug, Clone)]
pub struct EndpointSettings {
    pub name: String,
    /// The verifier, built (and its secrets checked) while loading.
    pub provider: Arc<dyn Provider>,
    /// `None`: the provider's default (300 s; Paddle 5 s, as its SDKs).
    pub tolerance: Option<Duration>,
    pub handlers: Vec<String>,
    pub max_body_bytes: usize,
    /// This endpoint's own retention; `None`: the global `retention`.
    pub retention: Option<Duration>,
    /// `mode = "queued"`; `None`: inline.
    pub queue: Option<super::QueueSettings>,
}

impl EndpointSettings {
    /// What an endpoint runs when it names no `handlers`.
    pub const DEFAULT_HANDLERS: &[&str] = &["record", "payments"];

    pub fn default_handlers() -> Vec<String> {
        Self::DEFAULT_HANDLERS
            .iter()
            .map(|h| h.to_string())
            .collect()
    }
}
