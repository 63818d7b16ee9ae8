//! `otlp_endpoint` and the standard OpenTelemetry variables: whether and
//! where the delivery spans are exported (see `telemetry::traces`).

use super::error::{ConfigError, Source};
use crate::environment::Env;
use crate::telemetry::traces::{DEFAULT_SERVICE_NAME, TraceSettings};

/// The path that OTLP/HTTP puts after a base endpoint for traces.
const TRACES_PATH: &str = "v1/traces";

/// In the order the OpenTelemetry specification gives them, over the file:
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the traces URL itself), then
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (a base, `/v1/traces` appended), then the
/// file's `otlp_endpoint` (a base too). None of them: no export.
pub(super) fn parse(
    file_endpoint: Option<&String>,
    source: Source<'_>,
    env: Env<'_>,
) -> Result<Option<TraceSettings>, ConfigError> {
    let environment = Source("environment");
    let (endpoint, key, from) = if let Some(url) = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        (url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", environment)
    } else if let Some(base) = env("OTEL_EXPORTER_OTLP_ENDPOINT") {
        (
            traces_url(&base),
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            environment,
        )
    } else if let Some(base) = file_endpoint.filter(|base| !base.is_empty()) {
        (traces_url(base), "otlp_endpoint", source)
    } else {
        return Ok(None);
    };
    check_url(&endpoint).map_err(|message| from.invalid(key, message))?;
    Ok(Some(TraceSettings {
        endpoint,
        service_name: env("OTEL_SERVICE_NAME").unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned()),
    }))
}

/// `base` with `/v1/traces` after its path, as the specification builds it
/// from `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn traces_url(base: &str) -> String {
    if base.ends_with('/') {
        format!("{base}{TRACES_PATH}")
    } else {
        format!("{base}/{TRACES_PATH}")
    }
}

/// An http(s) URL with a host. The message never repeats the URL: a
/// collector's URL may carry credentials.
fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| format!("not a URL such as http://127.0.0.1:4318 ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err("expected an http:// or https:// URL such as http://127.0.0.1:4318".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_with(
        file: Option<&str>,
        vars: &[(&str, &str)],
    ) -> Result<Option<TraceSettings>, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let file = file.map(str::to_owned);
        parse(file.as_ref(), Source("test.toml"), &env)
    }

    #[test]
    fn nothing_set_exports_nothing() {
        assert_eq!(parse_with(None, &[]).unwrap(), None);
        assert_eq!(parse_with(Some(""), &[]).unwrap(), None);
    }

    #[test]
    fn a_base_endpoint_gets_the_traces_path_and_the_default_service_name() {
        let settings = parse_with(Some("http://collector:4318"), &[])
            .unwrap()
            .unwrap();
        assert_eq!(settings.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(settings.service_name, "idempotent-receiver");
        let settings = parse_with(Some("http://collector:4318/otlp/"), &[])
            .unwrap()
            .unwrap();
        assert_eq!(settings.endpoint, "http://collector:4318/otlp/v1/traces");
    }

    #[test]
    fn the_standard_variables_win_over_the_file_in_the_specifications_order() {
        let base = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_SERVICE_NAME", "billing-hooks"),
        ];
        let settings = parse_with(Some("http://file:4318"), &base)
            .unwrap()
            .unwrap();
        assert_eq!(settings.endpoint, "http://env:4318/v1/traces");
        assert_eq!(settings.service_name, "billing-hooks");
        let both = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://traces.example/custom",
            ),
        ];
        let settings = parse_with(Some("http://file:4318"), &both)
            .unwrap()
            .unwrap();
        assert_eq!(settings.endpoint, "https://traces.example/custom");
    }

    #[test]
    fn a_bad_endpoint_is_refused_naming_where_it_came_from_without_echoing_it() {
        let error = parse_with(Some("collector:4318"), &[])
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("test.toml: `otlp_endpoint`:"), "{error}");
        let error = parse_with(
            None,
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://user:hunter2@x")],
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with("environment: `OTEL_EXPORTER_OTLP_ENDPOINT`:"),
            "{error}"
        );
        assert!(!error.contains("hunter2"), "{error}");
    }
}
