use super::error::{ConfigError, Source};
use crate::handlers::ForwarderSettings;
use serde::Deserialize;
use std::collections::BTreeMap;

/// `[forwarders.NAME]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForwarder {
    url: String,
    timeout: Option<String>,
    retries: Option<u32>,
}

pub(super) fn parse(
    raw: &BTreeMap<String, RawForwarder>,
    source: Source<'_>,
) -> Result<Vec<ForwarderSettings>, ConfigError> {
    let mut forwarders = Vec::new();
    for (name, forwarder) in raw {
        let key = |field: &str| format!("forwarders.{name}.{field}");
        if !(forwarder.url.starts_with("http://") || forwarder.url.starts_with("https://")) {
            return Err(source.invalid(&key("url"), "expected an http:// or https:// URL"));
        }
        forwarders.push(ForwarderSettings {
            name: name.clone(),
            url: forwarder.url.clone(),
            timeout: source.duration(
                &key("timeout"),
                forwarder.timeout.as_ref(),
                ForwarderSettings::DEFAULT_TIMEOUT,
            )?,
            retries: forwarder
                .retries
                .unwrap_or(ForwarderSettings::DEFAULT_RETRIES),
        });
    }
    Ok(forwarders)
}
