//! Settings: a TOML file (`--config FILE` or `IR_CONFIG`), then environment
//! overrides. Every error names the key and where it came from.

use crate::client_keys::Mismatch;
use crate::providers::{self, HmacSpec, Provider, ProviderSpec};
use crate::store::DatabaseUrl;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_DATA_DIR: &str = "data";
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(72 * 3600);
pub const DEMO_ENDPOINT: &str = "demo";
const DEMO_SECRET_FILE: &str = "demo.secret";
const DEFAULT_HANDLERS: &[&str] = &["record", "payments"];

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

/// The validated settings of a receiver.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the settings came from, for messages.
    pub source: String,
    pub listen: String,
    pub database: DatabaseUrl,
    pub data_dir: PathBuf,
    pub retention: Duration,
    pub lease: Duration,
    pub in_progress_wait: Duration,
    pub pool_size: usize,
    pub workers: Option<usize>,
    pub endpoints: Vec<EndpointSettings>,
    pub idempotency: IdempotencySettings,
    /// `[forwarders.NAME]`: `forward` handlers, usable in `handlers = [...]`.
    pub forwarders: Vec<ForwarderSettings>,
    /// How often claims abandoned past their lease are reconciled ("0": never).
    pub reconcile_interval: Duration,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish.
    pub shutdown_grace: Duration,
}

#[derive(Debug, Clone)]
pub struct ForwarderSettings {
    pub name: String,
    pub url: String,
    pub timeout: Duration,
    pub retries: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForwarder {
    url: String,
    timeout: Option<String>,
    retries: Option<u32>,
}

/// `[idempotency]`: how client routes treat `Idempotency-Key`.
#[derive(Debug, Clone, Default)]
pub struct IdempotencySettings {
    /// 409 (default) or 422 (the IETF draft) for a key reused with another
    /// payload.
    pub mismatch: Mismatch,
    /// A header that names the tenant keys are scoped to, when the operator
    /// enables it (a gateway in front must set it from the authenticated
    /// caller).
    pub tenant_header: Option<actix_web::http::header::HeaderName>,
    pub max_body_bytes: usize,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawIdempotency {
    mismatch_status: Option<u16>,
    tenant_header: Option<String>,
    max_body_bytes: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct EndpointSettings {
    pub name: String,
    /// The verifier, built (and its secrets checked) while loading.
    pub provider: Arc<dyn Provider>,
    /// `None`: the provider's default (300 s; Paddle 5 s, as its SDKs).
    pub tolerance: Option<Duration>,
    pub handlers: Vec<String>,
    pub max_body_bytes: usize,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    listen: Option<String>,
    database_url: Option<String>,
    data_dir: Option<PathBuf>,
    retention: Option<String>,
    lease: Option<String>,
    in_progress_wait: Option<String>,
    pool_size: Option<usize>,
    workers: Option<usize>,
    max_body_bytes: Option<usize>,
    #[serde(default)]
    endpoints: BTreeMap<String, RawEndpoint>,
    #[serde(default)]
    idempotency: RawIdempotency,
    #[serde(default)]
    forwarders: BTreeMap<String, RawForwarder>,
    reconcile_interval: Option<String>,
    shutdown_grace: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndpoint {
    provider: String,
    #[serde(default)]
    secrets: Vec<String>,
    secrets_env: Option<String>,
    tolerance: Option<String>,
    handlers: Option<Vec<String>>,
    max_body_bytes: Option<usize>,
    hmac: Option<HmacSpec>,
}

/// Reads environment variables; a parameter so that tests need not touch the
/// process environment.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Settings {
    /// Loads `path` (or `IR_CONFIG`, or nothing: the defaults) and applies the
    /// environment overrides.
    pub fn load(path: Option<&Path>) -> Result<Settings, ConfigError> {
        Settings::load_with(path, &process_env)
    }

    pub fn load_with(path: Option<&Path>, env: Env<'_>) -> Result<Settings, ConfigError> {
        let path = path
            .map(Path::to_path_buf)
            .or_else(|| env("IR_CONFIG").map(PathBuf::from));
        match path {
            Some(path) => {
                let file = path.display().to_string();
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    file: file.clone(),
                    source,
                })?;
                Settings::parse(&text, &file, env)
            }
            None => Settings::parse("", "(defaults)", env),
        }
    }

    /// Parses TOML `text` that came from `file`.
    pub fn parse(text: &str, file: &str, env: Env<'_>) -> Result<Settings, ConfigError> {
        let raw: RawSettings = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            file: file.to_owned(),
            message: e.message().to_owned()
                + &e.span()
                    .map(|s| format!(" (at byte {})", s.start))
                    .unwrap_or_default(),
        })?;
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            file: file.to_owned(),
            key: key.to_owned(),
            message,
        };
        let duration = |key: &str, value: Option<&String>, default: Duration| match value {
            Some(text) => parse_duration(text).map_err(|m| invalid(key, m)),
            None => Ok(default),
        };

        let data_dir = env("IR_DATA_DIR")
            .map(PathBuf::from)
            .or(raw.data_dir)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
        let database = match env("DATABASE_URL") {
            Some(url) => DatabaseUrl::parse(&url).map_err(|m| ConfigError::Invalid {
                file: "environment".into(),
                key: "DATABASE_URL".into(),
                message: m,
            })?,
            None => match &raw.database_url {
                Some(url) => DatabaseUrl::parse(url).map_err(|m| invalid("database_url", m))?,
                None => DatabaseUrl::Sqlite(data_dir.join("receiver.db")),
            },
        };
        let listen = env("IR_LISTEN")
            .or(raw.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        if listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(invalid(
                "listen",
                format!("{listen:?} is not an address such as 127.0.0.1:8080"),
            ));
        }
        let max_body = raw
            .max_body_bytes
            .unwrap_or(crate::webhooks::DEFAULT_MAX_BODY);

        let mut endpoints = Vec::new();
        for (name, endpoint) in &raw.endpoints {
            let key = |field: &str| format!("endpoints.{name}.{field}");
            if crate::providers::check_key(name).is_err() || name.contains('/') {
                return Err(invalid(
                    &format!("endpoints.{name}"),
                    "an endpoint name must be visible ASCII without '/'".into(),
                ));
            }
            let tolerance = match &endpoint.tolerance {
                Some(text) => {
                    Some(parse_duration(text).map_err(|m| invalid(&key("tolerance"), m))?)
                }
                None => None,
            };
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
                        return Err(invalid(
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
            };
            let provider = providers::build(&endpoint.provider, &spec).map_err(|e| {
                let field = match e {
                    providers::ProviderConfigError::UnknownProvider => "provider",
                    providers::ProviderConfigError::Invalid(_) => "hmac",
                    _ => "secrets",
                };
                invalid(&key(field), e.to_string())
            })?;
            endpoints.push(EndpointSettings {
                name: name.clone(),
                provider: Arc::from(provider),
                tolerance,
                handlers: endpoint
                    .handlers
                    .clone()
                    .unwrap_or_else(|| DEFAULT_HANDLERS.iter().map(|h| h.to_string()).collect()),
                max_body_bytes: endpoint.max_body_bytes.unwrap_or(max_body),
            });
        }
        if endpoints.is_empty() {
            endpoints
                .push(demo_endpoint(&data_dir, max_body).map_err(|m| invalid("endpoints", m))?);
        }

        let idempotency = IdempotencySettings {
            mismatch: match raw.idempotency.mismatch_status {
                None | Some(409) => Mismatch::Conflict,
                Some(422) => Mismatch::Unprocessable,
                Some(other) => {
                    return Err(invalid(
                        "idempotency.mismatch_status",
                        format!("{other} is neither 409 nor 422"),
                    ));
                }
            },
            tenant_header: match &raw.idempotency.tenant_header {
                Some(name) => Some(
                    actix_web::http::header::HeaderName::try_from(name.as_str()).map_err(|_| {
                        invalid(
                            "idempotency.tenant_header",
                            format!("{name:?} is not a header name"),
                        )
                    })?,
                ),
                None => None,
            },
            max_body_bytes: raw
                .idempotency
                .max_body_bytes
                .unwrap_or(crate::client_keys::DEFAULT_MAX_BODY),
        };

        let mut forwarders = Vec::new();
        for (name, forwarder) in &raw.forwarders {
            let key = |field: &str| format!("forwarders.{name}.{field}");
            if !(forwarder.url.starts_with("http://") || forwarder.url.starts_with("https://")) {
                return Err(invalid(
                    &key("url"),
                    "expected an http:// or https:// URL".into(),
                ));
            }
            forwarders.push(ForwarderSettings {
                name: name.clone(),
                url: forwarder.url.clone(),
                timeout: duration(
                    &key("timeout"),
                    forwarder.timeout.as_ref(),
                    Duration::from_secs(10),
                )?,
                retries: forwarder.retries.unwrap_or(2),
            });
        }

        Ok(Settings {
            idempotency,
            forwarders,
            shutdown_grace: duration(
                "shutdown_grace",
                raw.shutdown_grace.as_ref(),
                Duration::from_secs(30),
            )?,
            reconcile_interval: duration(
                "reconcile_interval",
                raw.reconcile_interval.as_ref(),
                Duration::from_secs(60),
            )?,
            source: file.to_owned(),
            listen,
            database,
            retention: duration("retention", raw.retention.as_ref(), DEFAULT_RETENTION)?,
            lease: duration("lease", raw.lease.as_ref(), Duration::from_secs(60))?,
            in_progress_wait: duration(
                "in_progress_wait",
                raw.in_progress_wait.as_ref(),
                Duration::from_secs(5),
            )?,
            pool_size: raw.pool_size.unwrap_or(16),
            workers: raw.workers,
            data_dir,
            endpoints,
        })
    }

    pub fn endpoint(&self, name: &str) -> Option<&EndpointSettings> {
        self.endpoints.iter().find(|e| e.name == name)
    }

    pub fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            file: self.source.clone(),
            key: key.to_owned(),
            message: message.into(),
        }
    }
}

/// `"0"` (disabled, where that means something) or a humantime duration such
/// as `"72h"`, `"5m"`, `"1500ms"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration such as \"72h\" or \"5m\" ({e})"))
}

/// The endpoint a fresh start gets: Standard Webhooks, with a secret that is
/// generated once and kept in the data directory (never logged).
fn demo_endpoint(data_dir: &Path, max_body: usize) -> Result<EndpointSettings, String> {
    let secret = demo_secret(data_dir)?;
    let spec = ProviderSpec {
        secrets: vec![secret],
        ..ProviderSpec::default()
    };
    let provider = providers::build("standard-webhooks", &spec).map_err(|e| {
        format!(
            "the demo secret in {} is unusable: {e}",
            data_dir.join(DEMO_SECRET_FILE).display()
        )
    })?;
    Ok(EndpointSettings {
        name: DEMO_ENDPOINT.to_owned(),
        provider: Arc::from(provider),
        tolerance: None,
        handlers: DEFAULT_HANDLERS.iter().map(|h| h.to_string()).collect(),
        max_body_bytes: max_body,
    })
}

fn demo_secret(data_dir: &Path) -> Result<String, String> {
    use base64::Engine as _;
    let path = data_dir.join(DEMO_SECRET_FILE);
    match std::fs::read_to_string(&path) {
        Ok(secret) => return Ok(secret.trim().to_owned()),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot read {}: {e}", path.display()));
        }
        Err(_) => {}
    }
    std::fs::create_dir_all(data_dir)
        .map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    let key: [u8; 32] = rand::random();
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    );
    write_private(&path, &secret).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(secret)
}

/// Writes a file only its owner can read; `create_new` so that two processes
/// starting at once cannot overwrite each other's secret.
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => file.write_all(contents.as_bytes()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse(text: &str) -> Result<Settings, ConfigError> {
        Settings::parse(text, "receiver.toml", &no_env)
    }

    #[test]
    fn a_fresh_start_gets_the_defaults_and_a_demo_endpoint_with_a_kept_secret() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let data_dir = data.to_string_lossy().to_string();
        let env = move |name: &str| (name == "IR_DATA_DIR").then(|| data_dir.clone());
        let settings = Settings::load_with(None, &env).unwrap();
        assert_eq!(settings.listen, "127.0.0.1:8080");
        assert_eq!(settings.retention, Duration::from_secs(72 * 3600));
        assert_eq!(
            settings.database,
            DatabaseUrl::Sqlite(data.join("receiver.db"))
        );
        assert_eq!(settings.endpoints[0].name, "demo");
        let secret = std::fs::read_to_string(data.join("demo.secret")).unwrap();
        assert!(secret.starts_with("whsec_"));
        // A second load keeps the same secret.
        Settings::load_with(None, &env).unwrap();
        assert_eq!(
            std::fs::read_to_string(data.join("demo.secret")).unwrap(),
            secret
        );
        assert!(!format!("{settings:?}").contains(&secret[6..]));
    }

    #[test]
    fn endpoints_take_secrets_from_the_file_and_the_environment() {
        let text = format!(
            "[endpoints.shop]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nsecrets_env = \"SHOP_SECRETS\"\ntolerance = \"0\"\n"
        );
        let env = |name: &str| (name == "SHOP_SECRETS").then(|| format!("{SECRET}, {SECRET}"));
        let settings = Settings::parse(&text, "receiver.toml", &env).unwrap();
        let shop = settings.endpoint("shop").unwrap();
        assert_eq!(shop.tolerance, Some(Duration::ZERO));
        assert_eq!(shop.handlers, ["record", "payments"]);
        assert!(settings.endpoint("demo").is_none());
    }

    #[test]
    fn database_url_and_listen_come_from_the_environment_first() {
        let env = |name: &str| match name {
            "DATABASE_URL" => Some("postgres://root@127.0.0.1/test".to_owned()),
            "IR_LISTEN" => Some("0.0.0.0:9000".to_owned()),
            _ => None,
        };
        let text = format!(
            "database_url = \"sqlite://x.db\"\n[endpoints.a]\nprovider = \"svix\"\nsecrets = [\"{SECRET}\"]\n"
        );
        let settings = Settings::parse(&text, "f.toml", &env).unwrap();
        assert!(matches!(settings.database, DatabaseUrl::Postgres(_)));
        assert_eq!(settings.listen, "0.0.0.0:9000");
    }

    #[test]
    fn bad_configuration_names_the_key_and_the_file() {
        let cases = [
            (
                "[endpoints.a]\nprovider = \"paypal\"\nsecrets = [\"x\"]\n",
                "`endpoints.a.provider`",
            ),
            (
                "[endpoints.a]\nprovider = \"standard-webhooks\"\nsecrets = [\"whsec_!!\"]\n",
                "`endpoints.a.secrets`",
            ),
            (
                &format!(
                    "[endpoints.a]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\ntolerance = \"soon\"\n"
                ),
                "`endpoints.a.tolerance`",
            ),
            ("retention = \"three days\"\n", "`retention`"),
            ("listen = \"localhost\"\n", "`listen`"),
            (
                "[idempotency]\nmismatch_status = 400\n",
                "`idempotency.mismatch_status`",
            ),
            ("database_url = \"mysql://x\"\n", "`database_url`"),
            (
                "[endpoints.a]\nprovider = \"standard-webhooks\"\nsecrets_env = \"NOPE\"\n",
                "`endpoints.a.secrets_env`",
            ),
        ];
        for (text, key) in cases {
            let message = parse(text).unwrap_err().to_string();
            assert!(message.starts_with("receiver.toml: "), "{message}");
            assert!(message.contains(key), "{message} should name {key}");
        }
        let message = parse("retension = \"72h\"\n").unwrap_err().to_string();
        assert!(
            message.contains("receiver.toml") && message.contains("retension"),
            "{message}"
        );
    }

    #[test]
    fn a_malformed_secret_is_never_echoed() {
        let message = parse(
            "[endpoints.a]\nprovider = \"standard-webhooks\"\nsecrets = [\"whsec_sup3r$ecret\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(!message.contains("sup3r"), "{message}");
    }

    #[test]
    fn durations_accept_zero_and_humantime() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("72h"), Ok(Duration::from_secs(259_200)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("").is_err());
    }
}
