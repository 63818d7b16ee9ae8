use super::error::{ConfigError, Source};
use crate::engine::RetryPolicy;
use crate::environment::Env;
use crate::providers::{self, Description, ProviderConfigError, ProviderSpec};
use crate::webhooks::{EndpointSettings, QueueSettings};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `[endpoints.NAME]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEndpoint {
    provider: String,
    #[serde(default)]
    secrets: Vec<String>,
    secrets_env: Option<String>,
    tolerance: Option<String>,
    handlers: Option<Vec<String>>,
    max_body_bytes: Option<usize>,
    hmac: Option<Description>,
    retention: Option<String>,
    /// The public URL the provider posts to (Square, Twilio, HubSpot).
    url: Option<String>,
    /// PayPal's webhook id.
    webhook_id: Option<String>,
    /// PayPal: the pinned signing certificate.
    certificate: Option<std::path::PathBuf>,
    /// `inline` (the default) or `queued`.
    mode: Option<String>,
    max_attempts: Option<u32>,
    max_age: Option<String>,
    retry_backoff: Option<String>,
    retry_backoff_max: Option<String>,
    ordering_key: Option<String>,
    event_time: Option<String>,
}

/// Every configured endpoint, its verifier built (so that a bad secret is
/// refused now, naming the key, never echoing the secret).
pub(super) fn parse(
    raw: &BTreeMap<String, RawEndpoint>,
    max_body: usize,
    source: Source<'_>,
    env: Env<'_>,
) -> Result<Vec<EndpointSettings>, ConfigError> {
    raw.iter()
        .map(|(name, endpoint)| parse_one(name, endpoint, max_body, source, env))
        .collect()
}

fn parse_one(
    name: &str,
    endpoint: &RawEndpoint,
    max_body: usize,
    source: Source<'_>,
    env: Env<'_>,
) -> Result<EndpointSettings, ConfigError> {
    let key = |field: &str| format!("endpoints.{name}.{field}");
    if providers::check_key(name).is_err() || name.contains('/') {
        return Err(source.invalid(
            &format!("endpoints.{name}"),
            "an endpoint name must be visible ASCII without '/'",
        ));
    }
    let tolerance = source.optional_duration(&key("tolerance"), endpoint.tolerance.as_ref())?;
    let retention = source.optional_duration(&key("retention"), endpoint.retention.as_ref())?;
    let mut secrets = endpoint.secrets.clone();
    if let Some(var) = &endpoint.secrets_env {
        match env(var) {
            Some(value) => secrets.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            ),
            None if secrets.is_empty() => {
                return Err(source.invalid(
                    &key("secrets_env"),
                    format!("the environment variable {var} is not set"),
                ));
            }
            None => {}
        }
    }
    let spec = ProviderSpec {
        secrets,
        tolerance,
        hmac: endpoint.hmac.clone(),
        url: endpoint.url.clone(),
        webhook_id: endpoint.webhook_id.clone(),
        certificate: endpoint.certificate.clone(),
    };
    let provider = providers::build(&endpoint.provider, &spec).map_err(|e| {
        let field = match e {
            ProviderConfigError::UnknownProvider => "provider",
            ProviderConfigError::Invalid(_) if endpoint.provider == "hmac" => "hmac",
            ProviderConfigError::Invalid(_) => "provider",
            _ => "secrets",
        };
        source.invalid(&key(field), e.to_string())
    })?;
    let queue = queue_settings(endpoint, source, &key)?;
    Ok(EndpointSettings {
        queue,
        name: name.to_owned(),
        provider: Arc::from(provider),
        tolerance,
        handlers: endpoint
            .handlers
            .clone()
            .unwrap_or_else(EndpointSettings::default_handlers),
        max_body_bytes: endpoint.max_body_bytes.unwrap_or(max_body),
        retention,
    })
}

/// `mode = "queued"` and its settings; the queue keys are refused on an
/// inline endpoint, where they would silently do nothing.
fn queue_settings(
    endpoint: &RawEndpoint,
    source: Source<'_>,
    key: &dyn Fn(&str) -> String,
) -> Result<Option<QueueSettings>, ConfigError> {
    let queued = match endpoint.mode.as_deref() {
        None | Some("inline") => false,
        Some("queued") => true,
        Some(_) => return Err(source.invalid(&key("mode"), "expected \"inline\" or \"queued\"")),
    };
    let queue_keys = [
        ("max_attempts", endpoint.max_attempts.is_some()),
        ("max_age", endpoint.max_age.is_some()),
        ("retry_backoff", endpoint.retry_backoff.is_some()),
        ("retry_backoff_max", endpoint.retry_backoff_max.is_some()),
        ("ordering_key", endpoint.ordering_key.is_some()),
        ("event_time", endpoint.event_time.is_some()),
    ];
    if !queued {
        if let Some((name, _)) = queue_keys.iter().find(|(_, set)| *set) {
            return Err(source.invalid(&key(name), "applies only with mode = \"queued\""));
        }
        return Ok(None);
    }
    let defaults = RetryPolicy::default();
    let pointer = |name: &str, value: &Option<String>| match value {
        Some(p) if !p.starts_with('/') => {
            Err(source.invalid(&key(name), "must be a JSON pointer such as /data/object/id"))
        }
        other => Ok(other.clone()),
    };
    let max_attempts = endpoint.max_attempts.unwrap_or(defaults.max_attempts);
    if max_attempts == 0 {
        return Err(source.invalid(&key("max_attempts"), "must be at least 1"));
    }
    Ok(Some(QueueSettings {
        policy: RetryPolicy {
            max_attempts,
            max_age: source.duration(
                &key("max_age"),
                endpoint.max_age.as_ref(),
                defaults.max_age,
            )?,
            backoff: source.duration(
                &key("retry_backoff"),
                endpoint.retry_backoff.as_ref(),
                defaults.backoff,
            )?,
            backoff_max: source.duration(
                &key("retry_backoff_max"),
                endpoint.retry_backoff_max.as_ref(),
                defaults.backoff_max,
            )?,
        },
        ordering_key: pointer("ordering_key", &endpoint.ordering_key)?,
        event_time: pointer("event_time", &endpoint.event_time)?,
    }))
}
