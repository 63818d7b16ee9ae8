//! Settings: a TOML file (`--config FILE` or `IR_CONFIG`), then environment
//! overrides. Every error names the key and where it came from.
//!
//! Each section's settings type belongs to the module that uses it (the
//! admin surface, the forwarders, the client keys, the purge, the
//! endpoints); this module reads the file and the environment, checks the
//! values, and gathers them. Defaults come from those types, written once.
//! Loading never writes anything: the demo endpoint's secret is created at
//! start-up (see [`crate::demo`]).

mod endpoints;
mod error;
mod forwarders;
mod idempotency;
mod publishers;
mod purge;
#[cfg(test)]
mod tests;
mod traces;

pub use error::ConfigError;

use crate::admin::{AdminSettings, RawLoginLimits};
use crate::client_keys::IdempotencySettings;
use crate::engine::EngineOptions;
use crate::environment::{Env, process_env};
use crate::handlers::ForwarderSettings;
use crate::maintenance::{PurgeSettings, RelaySettings, RetentionPolicy};
use crate::publishers::PublisherSettings;
use crate::store::{
    DatabaseUrl, GroupCommitOptions, PgGroupCommitOptions, ReplayCacheOptions, StoreOptions,
};
use crate::telemetry::metrics::MetricsSettings;
use crate::telemetry::traces::TraceSettings;
use crate::webhooks::EndpointSettings;
use error::Source;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_DATA_DIR: &str = "data";
/// Queue workers per process, and their fallback poll.
const DEFAULT_QUEUE_WORKERS: usize = 4;
const DEFAULT_QUEUE_POLL: Duration = Duration::from_secs(5);
const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(60);
const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

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
    /// SQLite's group commit: `sqlite_group_commit`,
    /// `sqlite_group_commit_max` (members per COMMIT),
    /// `sqlite_group_commit_wait` (how long a group stays open) and
    /// `sqlite_group_commit_linger` (how long it waits for company).
    pub group_commit: GroupCommitOptions,
    /// PostgreSQL's group commit: `postgres_group_commit` and
    /// `postgres_group_commit_max` (fresh deliveries per statement).
    pub postgres_group_commit: PgGroupCommitOptions,
    /// The in-process cache of completed keys: its byte budget (0: off)...
    pub replay_cache_bytes: u64,
    /// ...and how long an entry may be served before it is read again.
    pub replay_cache_ttl: Duration,
    /// How often replay counts are written to `deliveries.replays`.
    pub replay_count_interval: Duration,
    pub workers: Option<usize>,
    /// The body limit of endpoints that set none (`max_body_bytes`).
    pub max_body_bytes: usize,
    pub endpoints: Vec<EndpointSettings>,
    /// No endpoint is configured, so the demo endpoint stands in; it is
    /// among `endpoints` once its secret exists (start-up creates it).
    pub demo: bool,
    pub idempotency: IdempotencySettings,
    /// `[forwarders.NAME]`: `forward` handlers, usable in `handlers = [...]`.
    pub forwarders: Vec<ForwarderSettings>,
    /// `[publishers.NAME]`: `publish:NAME` handlers and the relay's brokers.
    pub publishers: Vec<PublisherSettings>,
    /// The relay: `outbox_relay`, `outbox_poll`, `outbox_lease`, `outbox_batch`.
    pub relay: RelaySettings,
    /// How often claims abandoned past their lease are reconciled ("0": never).
    pub reconcile_interval: Duration,
    /// Queue workers per `serve` process, for the queued endpoints.
    pub queue_workers: usize,
    /// How long an idle worker waits before it looks for due jobs anyway
    /// (a wake-up normally comes first: this process's own enqueue, or
    /// PostgreSQL's `NOTIFY` from another instance).
    pub queue_poll: Duration,
    /// How often the dashboard's traffic counters are written to the
    /// database (`traffic_flush_interval`).
    pub traffic_flush_interval: Duration,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish.
    pub shutdown_grace: Duration,
    pub purge: PurgeSettings,
    /// `admin_tokens` (+ `IR_ADMIN_TOKENS`), `admin_listen`, `[admin_login]`.
    pub admin: AdminSettings,
    /// `metrics_token` (+ `IR_METRICS_TOKEN`).
    pub metrics: MetricsSettings,
    /// `otlp_endpoint`, or the standard `OTEL_EXPORTER_OTLP_*` variables:
    /// where the delivery spans are exported (`None`: nowhere).
    pub traces: Option<TraceSettings>,
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
    sqlite_group_commit: Option<bool>,
    sqlite_group_commit_max: Option<usize>,
    sqlite_group_commit_wait: Option<String>,
    sqlite_group_commit_linger: Option<String>,
    postgres_group_commit: Option<bool>,
    postgres_group_commit_max: Option<usize>,
    replay_cache_bytes: Option<u64>,
    replay_cache_ttl: Option<String>,
    replay_count_interval: Option<String>,
    workers: Option<usize>,
    max_body_bytes: Option<usize>,
    purge_interval: Option<String>,
    purge_batch: Option<i64>,
    purge_pause: Option<String>,
    #[serde(default)]
    endpoints: BTreeMap<String, endpoints::RawEndpoint>,
    #[serde(default)]
    idempotency: idempotency::RawIdempotency,
    #[serde(default)]
    forwarders: BTreeMap<String, forwarders::RawForwarder>,
    #[serde(default)]
    publishers: BTreeMap<String, toml::Table>,
    outbox_relay: Option<bool>,
    outbox_poll: Option<String>,
    outbox_lease: Option<String>,
    outbox_batch: Option<usize>,
    reconcile_interval: Option<String>,
    queue_workers: Option<usize>,
    queue_poll: Option<String>,
    traffic_flush_interval: Option<String>,
    shutdown_grace: Option<String>,
    admin_tokens: Option<Vec<crate::admin::RawAdminToken>>,
    admin_listen: Option<String>,
    admin_login: Option<RawLoginLimits>,
    metrics_token: Option<String>,
    otlp_endpoint: Option<String>,
}

/// `sqlite_group_commit`, `sqlite_group_commit_max`,
/// `sqlite_group_commit_wait` and `sqlite_group_commit_linger`.
fn group_commit(raw: &RawSettings, source: Source<'_>) -> Result<GroupCommitOptions, ConfigError> {
    let defaults = GroupCommitOptions::default();
    let options = GroupCommitOptions {
        enabled: raw.sqlite_group_commit.unwrap_or(defaults.enabled),
        max_members: raw.sqlite_group_commit_max.unwrap_or(defaults.max_members),
        max_wait: source.duration(
            "sqlite_group_commit_wait",
            raw.sqlite_group_commit_wait.as_ref(),
            defaults.max_wait,
        )?,
        linger: source.duration(
            "sqlite_group_commit_linger",
            raw.sqlite_group_commit_linger.as_ref(),
            defaults.linger,
        )?,
    };
    if options.max_members == 0 || options.max_members > 10_000 {
        return Err(source.invalid("sqlite_group_commit_max", "expected 1 to 10000"));
    }
    Ok(options)
}

/// `postgres_group_commit` and `postgres_group_commit_max`.
fn postgres_group_commit(
    raw: &RawSettings,
    source: Source<'_>,
) -> Result<PgGroupCommitOptions, ConfigError> {
    let defaults = PgGroupCommitOptions::default();
    let options = PgGroupCommitOptions {
        enabled: raw.postgres_group_commit.unwrap_or(defaults.enabled),
        max_members: raw
            .postgres_group_commit_max
            .unwrap_or(defaults.max_members),
    };
    if options.max_members == 0 || options.max_members > 1_000 {
        return Err(source.invalid("postgres_group_commit_max", "expected 1 to 1000"));
    }
    Ok(options)
}

/// `outbox_relay`, `outbox_poll`, `outbox_lease` and `outbox_batch`.
fn relay(raw: &RawSettings, source: Source<'_>) -> Result<RelaySettings, ConfigError> {
    let defaults = RelaySettings::default();
    let relay = RelaySettings {
        enabled: raw.outbox_relay.unwrap_or(defaults.enabled),
        poll: source.duration("outbox_poll", raw.outbox_poll.as_ref(), defaults.poll)?,
        lease: source.duration("outbox_lease", raw.outbox_lease.as_ref(), defaults.lease)?,
        batch: raw.outbox_batch.unwrap_or(defaults.batch),
    };
    if relay.batch == 0 || relay.batch > 10_000 {
        return Err(source.invalid("outbox_batch", "expected 1 to 10000"));
    }
    if relay.lease.is_zero() {
        return Err(source.invalid("outbox_lease", "must be above zero"));
    }
    Ok(relay)
}

/// `traffic_flush_interval`: above zero, since the counters reach the
/// dashboard only through the flush.
fn traffic_flush_interval(
    raw: Option<&String>,
    source: Source<'_>,
) -> Result<Duration, ConfigError> {
    let every = source.duration("traffic_flush_interval", raw, crate::traffic::FLUSH_EVERY)?;
    if every.is_zero() {
        return Err(source.invalid("traffic_flush_interval", "must be above zero"));
    }
    Ok(every)
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
        let source = Source(file);
        let environment = Source("environment");
        let engine = EngineOptions::default();
        let store = StoreOptions::default();
        let replay_cache = ReplayCacheOptions::default();

        let relay = relay(&raw, source)?;
        let group_commit = group_commit(&raw, source)?;
        let postgres_group_commit = postgres_group_commit(&raw, source)?;
        let data_dir = env("IR_DATA_DIR")
            .map(PathBuf::from)
            .or(raw.data_dir)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
        let database = match env("DATABASE_URL") {
            Some(url) => {
                DatabaseUrl::parse(&url).map_err(|m| environment.invalid("DATABASE_URL", m))?
            }
            None => match &raw.database_url {
                Some(url) => {
                    DatabaseUrl::parse(url).map_err(|m| source.invalid("database_url", m))?
                }
                None => DatabaseUrl::Sqlite(data_dir.join("receiver.db")),
            },
        };
        let listen = env("IR_LISTEN")
            .or(raw.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        if listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(source.invalid(
                "listen",
                format!("{listen:?} is not an address such as 127.0.0.1:8080"),
            ));
        }
        let max_body = raw
            .max_body_bytes
            .unwrap_or(crate::webhooks::DEFAULT_MAX_BODY);

        let mut endpoints = endpoints::parse(&raw.endpoints, max_body, source, env)?;
        let demo = endpoints.is_empty();
        if demo {
            endpoints.extend(
                crate::demo::endpoint(&data_dir, max_body)
                    .map_err(|m| source.invalid("endpoints", m))?,
            );
        }

        // A module's own settings error, placed in the file or the environment.
        let from_module = |key: &str, from_environment: bool, message: String| {
            let from = if from_environment {
                environment
            } else {
                source
            };
            from.invalid(key, message)
        };
        let traffic_flush_interval =
            traffic_flush_interval(raw.traffic_flush_interval.as_ref(), source)?;
        let admin = AdminSettings::parse(raw.admin_tokens, raw.admin_listen, raw.admin_login, env)
            .map_err(|e| from_module(e.key, e.from_environment, e.message))?;
        let metrics = MetricsSettings::parse(raw.metrics_token, env)
            .map_err(|e| from_module(e.key, e.from_environment, e.message))?;

        Ok(Settings {
            admin,
            metrics,
            traces: traces::parse(raw.otlp_endpoint.as_ref(), source, env)?,
            idempotency: idempotency::parse(&raw.idempotency, source)?,
            purge: purge::parse(
                raw.purge_interval.as_ref(),
                raw.purge_batch,
                raw.purge_pause.as_ref(),
                source,
            )?,
            forwarders: forwarders::parse(&raw.forwarders, source)?,
            publishers: publishers::parse(&raw.publishers, source, env)?,
            relay,
            shutdown_grace: source.duration(
                "shutdown_grace",
                raw.shutdown_grace.as_ref(),
                DEFAULT_SHUTDOWN_GRACE,
            )?,
            reconcile_interval: source.duration(
                "reconcile_interval",
                raw.reconcile_interval.as_ref(),
                DEFAULT_RECONCILE_INTERVAL,
            )?,
            queue_workers: raw.queue_workers.unwrap_or(DEFAULT_QUEUE_WORKERS),
            queue_poll: source.duration(
                "queue_poll",
                raw.queue_poll.as_ref(),
                DEFAULT_QUEUE_POLL,
            )?,
            traffic_flush_interval,
            source: file.to_owned(),
            listen,
            database,
            retention: source.duration("retention", raw.retention.as_ref(), engine.retention)?,
            lease: source.duration("lease", raw.lease.as_ref(), engine.lease)?,
            in_progress_wait: source.duration(
                "in_progress_wait",
                raw.in_progress_wait.as_ref(),
                engine.in_progress_wait,
            )?,
            pool_size: raw.pool_size.unwrap_or(store.pool_size),
            group_commit,
            postgres_group_commit,
            replay_cache_bytes: raw.replay_cache_bytes.unwrap_or(replay_cache.bytes),
            replay_cache_ttl: source.duration(
                "replay_cache_ttl",
                raw.replay_cache_ttl.as_ref(),
                replay_cache.ttl,
            )?,
            replay_count_interval: source.duration(
                "replay_count_interval",
                raw.replay_count_interval.as_ref(),
                engine.replay_count_every,
            )?,
            workers: raw.workers,
            max_body_bytes: max_body,
            data_dir,
            endpoints,
            demo,
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

    /// Which retention applies to which keys. The engine forgets keys by the
    /// same rule, so the purge only deletes what is already forgotten.
    pub fn retention_policy(&self) -> RetentionPolicy {
        RetentionPolicy {
            default: self.retention,
            endpoints: self
                .endpoints
                .iter()
                .filter_map(|e| Some((e.name.clone(), e.retention?)))
                .collect(),
        }
    }

    /// Adds the demo endpoint once its secret exists (see [`crate::demo`]).
    pub fn with_demo_endpoint(mut self) -> Result<Settings, ConfigError> {
        if self.demo && self.endpoint(crate::demo::ENDPOINT).is_none() {
            let demo = crate::demo::endpoint(&self.data_dir, self.max_body_bytes)
                .map_err(|m| self.invalid("endpoints", m))?;
            self.endpoints.extend(demo);
        }
        Ok(self)
    }

    pub fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        Source(&self.source).invalid(key, message)
    }
}
