//! Settings: a TOML file (`--config FILE` or `IR_CONFIG`), then environment
//! overrides. Every error names the key and where it came from.

use crate::client_keys::Mismatch;
use crate::providers::{self, HmacSpec, Provider, ProviderSpec};
use crate::store::{DatabaseUrl, ReplayCacheOptions};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_DATA_DIR: &str = "data";
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(72 * 3600);
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(10 * 60);
pub const DEFAULT_PURGE_BATCH: usize = 1000;
pub const DEFAULT_PURGE_PAUSE: Duration = Duration::from_millis(50);
/// The largest `purge_batch`: a batch's keys are bound into its `DELETE`
/// statements (SQLite allows 32766 variables), and a larger batch is a
/// longer transaction that ingestion waits behind.
pub const MAX_PURGE_BATCH: usize = 10_000;
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
    /// The in-process cache of completed keys: its byte budget (0: off)...
    pub replay_cache_bytes: u64,
    /// ...and how long an entry may be served before it is read again.
    pub replay_cache_ttl: Duration,
    /// How often replay counts are written to `deliveries.replays`.
    pub replay_count_interval: Duration,
    pub workers: Option<usize>,
    pub endpoints: Vec<EndpointSettings>,
    pub idempotency: IdempotencySettings,
    /// `[forwarders.NAME]`: `forward` handlers, usable in `handlers = [...]`.
    pub forwarders: Vec<ForwarderSettings>,
    /// How often claims abandoned past their lease are reconciled ("0": never).
    pub reconcile_interval: Duration,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish.
    pub shutdown_grace: Duration,
    pub purge: PurgeSettings,
    /// `admin_tokens` (+ `IR_ADMIN_TOKENS`), `admin_listen`, `[admin_login]`.
    pub admin: crate::admin::AdminSettings,
    /// `metrics_token` (+ `IR_METRICS_TOKEN`).
    pub metrics: crate::telemetry::metrics::MetricsSettings,
}

/// Its `Debug` masks the URL's password: a downstream's URL may carry one.
#[derive(Clone)]
pub struct ForwarderSettings {
    pub name: String,
    pub url: String,
    pub timeout: Duration,
    pub retries: u32,
}

impl std::fmt::Debug for ForwarderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwarderSettings")
            .field("name", &self.name)
            .field("url", &crate::secret::redact_url(&self.url))
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForwarder {
    url: String,
    timeout: Option<String>,
    retries: Option<u32>,
}

/// How the background purge deletes expired keys (`purge_interval`,
/// `purge_batch`, `purge_pause`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeSettings {
    /// How often the purge runs; `None` (`"0"`) disables the background task.
    pub interval: Option<Duration>,
    /// Rows per batch: one short transaction each.
    pub batch: usize,
    /// The pause between batches, so that writers queued behind a batch get
    /// the database before the next one.
    pub pause: Duration,
}

impl Default for PurgeSettings {
    fn default() -> Self {
        PurgeSettings {
            interval: Some(DEFAULT_PURGE_INTERVAL),
            batch: DEFAULT_PURGE_BATCH,
            pause: DEFAULT_PURGE_PAUSE,
        }
    }
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
    /// This endpoint's own retention; `None`: the global `retention`.
    pub retention: Option<Duration>,
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
    replay_cache_bytes: Option<u64>,
    replay_cache_ttl: Option<String>,
    replay_count_interval: Option<String>,
    workers: Option<usize>,
    max_body_bytes: Option<usize>,
    purge_interval: Option<String>,
    /// Signed, so that a negative value is refused naming the key rather
    /// than as a type error at a byte offset.
    purge_batch: Option<i64>,
    purge_pause: Option<String>,
    #[serde(default)]
    endpoints: BTreeMap<String, RawEndpoint>,
    #[serde(default)]
    idempotency: RawIdempotency,
    #[serde(default)]
    forwarders: BTreeMap<String, RawForwarder>,
    reconcile_interval: Option<String>,
    shutdown_grace: Option<String>,
    admin_tokens: Option<Vec<String>>,
    admin_listen: Option<String>,
    admin_login: Option<crate::admin::RawLoginLimits>,
    metrics_token: Option<String>,
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
    retention: Option<String>,
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
            let retention = match &endpoint.retention {
                Some(text) => {
                    Some(parse_duration(text).map_err(|m| invalid(&key("retention"), m))?)
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
                retention,
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

        let purge = PurgeSettings {
            interval: Some(duration(
                "purge_interval",
                raw.purge_interval.as_ref(),
                DEFAULT_PURGE_INTERVAL,
            )?)
            .filter(|interval| !interval.is_zero()),
            batch: match raw.purge_batch {
                None => DEFAULT_PURGE_BATCH,
                Some(batch) => match usize::try_from(batch) {
                    Ok(batch) if (1..=MAX_PURGE_BATCH).contains(&batch) => batch,
                    _ => {
                        return Err(invalid(
                            "purge_batch",
                            format!("{batch} is not between 1 and {MAX_PURGE_BATCH}"),
                        ));
                    }
                },
            },
            pause: duration("purge_pause", raw.purge_pause.as_ref(), DEFAULT_PURGE_PAUSE)?,
        };

        // A module's own settings error, placed in the file or the environment.
        let from_module =
            |key: &str, from_environment: bool, message: String| ConfigError::Invalid {
                file: if from_environment {
                    "environment".to_owned()
                } else {
                    file.to_owned()
                },
                key: key.to_owned(),
                message,
            };
        let admin = crate::admin::AdminSettings::parse(
            raw.admin_tokens,
            raw.admin_listen,
            raw.admin_login,
            env,
        )
        .map_err(|e| from_module(e.key, e.from_environment, e.message))?;

        let metrics = crate::telemetry::metrics::MetricsSettings::parse(raw.metrics_token, env)
            .map_err(|e| from_module(e.key, e.from_environment, e.message))?;

        Ok(Settings {
            admin,
            metrics,
            idempotency,
            purge,
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
            replay_cache_bytes: raw
                .replay_cache_bytes
                .unwrap_or(ReplayCacheOptions::default().bytes),
            replay_cache_ttl: duration(
                "replay_cache_ttl",
                raw.replay_cache_ttl.as_ref(),
                ReplayCacheOptions::default().ttl,
            )?,
            replay_count_interval: duration(
                "replay_count_interval",
                raw.replay_count_interval.as_ref(),
                Duration::from_secs(5),
            )?,
            workers: raw.workers,
            data_dir,
            endpoints,
        })
    }

    pub fn endpoint(&self, name: &str) -> Option<&EndpointSettings> {
        self.endpoints.iter().find(|e| e.name == name)
    }

    /// How long `endpoint`'s keys are remembered: its own `retention`, else
    /// the global one.
    pub fn retention_of(&self, endpoint: &EndpointSettings) -> Duration {
        endpoint.retention.unwrap_or(self.retention)
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

/// A duration as an operator writes it in the configuration, in hours,
/// minutes, seconds and milliseconds (`"72h"`, `"27h 35m 5s"`), never days,
/// so that it reads the same as the `retention` it is compared with.
/// `parse_duration` reads it back.
pub fn format_duration(duration: Duration) -> String {
    if duration.is_zero() {
        return "0".to_owned();
    }
    let secs = duration.as_secs();
    let parts = [
        (secs / 3600, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
        (u64::from(duration.subsec_millis()), "ms"),
    ];
    let text = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect::<Vec<_>>()
        .join(" ");
    if text.is_empty() {
        format!("{}us", duration.as_micros())
    } else {
        text
    }
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
        retention: None,
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
    fn debug_of_the_settings_shows_no_secret_password_or_token() {
        let text = format!(
            "database_url = \"postgres://app:db-pass-1@db/ir?password=db-pass-2\"\n[forwarders.ship]\nurl = \"https://svc:fwd-pass@ship.test/events\"\n[endpoints.a]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nsecrets_env = \"A_SECRETS\"\n[endpoints.g]\nprovider = \"github\"\nsecrets = [\"gh-plain-secret\"]\n"
        );
        let env = |name: &str| {
            (name == "A_SECRETS").then(|| "whsec_c2VjcmV0LW51bWJlci10d28tMTIzNDU2Nzg=".to_owned())
        };
        let settings = Settings::parse(&text, "receiver.toml", &env).unwrap();
        let debug = format!("{settings:?}");
        for secret in [
            "db-pass-1",
            "db-pass-2",
            "fwd-pass",
            &SECRET[6..],
            "c2VjcmV0LW51bWJlci10d28tMTIzNDU2Nzg",
            "gh-plain-secret",
        ] {
            assert!(!debug.contains(secret), "{secret} in {debug}");
        }
        let spec = ProviderSpec {
            secrets: vec!["spec-secret".into()],
            ..ProviderSpec::default()
        };
        assert!(!format!("{spec:?}").contains("spec-secret"));
    }

    #[test]
    fn purge_settings_have_defaults_and_zero_turns_the_task_off() {
        let defaults = parse("").unwrap();
        assert_eq!(defaults.purge, PurgeSettings::default());
        assert_eq!(defaults.purge.interval, Some(Duration::from_secs(600)));
        assert_eq!(defaults.purge.batch, 1000);
        assert_eq!(defaults.purge.pause, Duration::from_millis(50));

        let set =
            parse("purge_interval = \"1h\"\npurge_batch = 250\npurge_pause = \"0\"\n").unwrap();
        assert_eq!(set.purge.interval, Some(Duration::from_secs(3600)));
        assert_eq!(set.purge.batch, 250);
        assert_eq!(set.purge.pause, Duration::ZERO);

        assert_eq!(
            parse("purge_interval = \"0\"\n").unwrap().purge.interval,
            None
        );
    }

    #[test]
    fn an_endpoint_may_keep_its_keys_longer_or_shorter_than_the_rest() {
        let text = format!(
            "retention = \"48h\"\n[endpoints.a]\nprovider = \"svix\"\nsecrets = [\"{SECRET}\"]\nretention = \"96h\"\n[endpoints.b]\nprovider = \"svix\"\nsecrets = [\"{SECRET}\"]\n"
        );
        let settings = parse(&text).unwrap();
        let a = settings.endpoint("a").unwrap();
        let b = settings.endpoint("b").unwrap();
        assert_eq!(a.retention, Some(Duration::from_secs(96 * 3600)));
        assert_eq!(b.retention, None);
        assert_eq!(settings.retention_of(a), Duration::from_secs(96 * 3600));
        assert_eq!(settings.retention_of(b), Duration::from_secs(48 * 3600));
    }

    #[test]
    fn bad_purge_and_retention_settings_name_the_key_and_the_file() {
        let endpoint = |extra: &str| {
            format!("[endpoints.a]\nprovider = \"svix\"\nsecrets = [\"{SECRET}\"]\n{extra}")
        };
        let cases = [
            (
                "purge_interval = \"often\"\n".to_owned(),
                "`purge_interval`",
            ),
            ("purge_pause = \"-1s\"\n".to_owned(), "`purge_pause`"),
            ("purge_batch = 0\n".to_owned(), "`purge_batch`"),
            ("purge_batch = 10001\n".to_owned(), "`purge_batch`"),
            ("purge_batch = -5\n".to_owned(), "`purge_batch`"),
            (
                endpoint("retention = \"a while\"\n"),
                "`endpoints.a.retention`",
            ),
        ];
        for (text, key) in cases {
            let message = parse(&text).unwrap_err().to_string();
            assert!(message.starts_with("receiver.toml: "), "{message}");
            assert!(message.contains(key), "{message} should name {key}");
        }
    }

    #[test]
    fn durations_are_shown_in_hours_minutes_and_seconds() {
        assert_eq!(format_duration(Duration::from_secs(72 * 3600)), "72h");
        assert_eq!(format_duration(Duration::from_secs(99_305)), "27h 35m 5s");
        assert_eq!(format_duration(Duration::from_secs(360)), "6m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1s 500ms");
        assert_eq!(format_duration(Duration::from_millis(50)), "50ms");
        assert_eq!(format_duration(Duration::ZERO), "0");
        for text in ["72h", "27h 35m 5s", "1s 500ms", "50ms"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }

    #[test]
    fn admin_tokens_come_from_the_file_and_the_environment_and_a_bad_one_is_named_not_echoed() {
        let env =
            |name: &str| (name == "IR_ADMIN_TOKENS").then(|| "tok_from_env_0123456789".to_owned());
        let text =
            "admin_tokens = [\"tok_from_file_0123456789\"]\nadmin_listen = \"127.0.0.1:0\"\n";
        let settings = Settings::parse(text, "receiver.toml", &env).unwrap();
        assert!(settings.admin.tokens.accepts(b"tok_from_file_0123456789"));
        assert!(settings.admin.tokens.accepts(b"tok_from_env_0123456789"));
        assert_eq!(settings.admin.listen.as_deref(), Some("127.0.0.1:0"));
        assert!(!format!("{settings:?}").contains("tok_from_"));
        assert!(!parse("").unwrap().admin.enabled(), "no default token");

        let message = parse("admin_tokens = [\"tiny-1\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("receiver.toml: `admin_tokens`"),
            "{message}"
        );
        assert!(!message.contains("tiny-1"), "{message}");
        let env = |name: &str| (name == "IR_ADMIN_TOKENS").then(|| "tiny-2".to_owned());
        let message = Settings::parse("", "receiver.toml", &env)
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("environment: `IR_ADMIN_TOKENS`"),
            "{message}"
        );
        assert!(!message.contains("tiny-2"), "{message}");
    }

    #[test]
    fn durations_accept_zero_and_humantime() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("72h"), Ok(Duration::from_secs(259_200)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("").is_err());
    }
}
