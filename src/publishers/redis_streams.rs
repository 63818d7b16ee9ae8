//! Redis Streams through the `redis` crate: an `XADD` guarded by a marker
//! key, in one Lua script (which Redis runs atomically).
//!
//! The script looks for the marker `<marker_prefix><message id>`. When it
//! is there, the message was added before: the script answers the entry id
//! the marker holds, and the publication is [`Confirmed::Duplicate`]. Else
//! it adds the entry (fields `id`, `content-type`, `data`) and sets the
//! marker to the new entry id with its own TTL (`dedup_ttl`, default 72 h).
//! Both keys are in one script, so on Redis Cluster they would have to
//! share a hash slot: this client speaks to one Redis (or a proxy).
//!
//! A connection that failed is dropped and the next publication connects
//! again.

use super::table::Table;
use super::{
    Broker, CLOUDEVENTS_JSON, Confirmed, DEFAULT_TIMEOUT, Destination, Lazy, Message, PublishError,
    Syntax,
};
use crate::secret::redact_url;
use redis::aio::MultiplexedConnection;
use std::fmt;
use std::time::Duration;

/// `[publishers.NAME]` with `kind = "redis"`.
#[derive(Clone)]
pub struct RedisSettings {
    /// The Redis URL with its credentials: `url_env`'s variable when set,
    /// else `url` (default `redis://127.0.0.1:6379`); `rediss://` for TLS.
    /// Prefer `url_env` for a real password: a `url` stays in the
    /// configuration file.
    pub url: String,
    /// The stream (key) of each event (default `webhooks:{endpoint}`).
    pub stream: Destination,
    /// Trim each stream to about this many entries (`MAXLEN ~`) on every
    /// add; `None`: never trimmed.
    pub maxlen: Option<u64>,
    /// How long a marker keeps a message id from being added again
    /// (default 72 h).
    pub dedup_ttl: Duration,
    /// The marker keys' prefix (default `idempotent-receiver:published:`).
    pub marker_prefix: String,
    /// How long a publication waits to connect and for the script's answer
    /// (default 5 s).
    pub timeout: Duration,
}

impl RedisSettings {
    pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
    pub const DEFAULT_STREAM: &str = "webhooks:{endpoint}";
    pub const DEFAULT_DEDUP_TTL: Duration = Duration::from_secs(72 * 3600);
    pub const DEFAULT_MARKER_PREFIX: &str = "idempotent-receiver:published:";

    const KEYS: &[&str] = &[
        "url",
        "url_env",
        "stream",
        "maxlen",
        "dedup_ttl",
        "marker_prefix",
        "timeout",
    ];

    /// Reads the redis keys of `[publishers.NAME]` (without the common
    /// ones), resolving `url_env` through `env`.
    pub fn from_toml(
        table: toml::Table,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut t = Table::new(table, "redis", Self::KEYS, env);
        let url = t.string("url")?;
        let url = match t.env_value("url_env")? {
            Some(from_env) => from_env,
            None => url.unwrap_or_else(|| Self::DEFAULT_URL.to_owned()),
        };
        if let Err(e) = redis::Client::open(url.as_str()) {
            return Err(format!(
                "`url`: {} is not a Redis URL ({e})",
                redact_url(&url)
            ));
        }
        let template = t
            .string("stream")?
            .unwrap_or_else(|| Self::DEFAULT_STREAM.to_owned());
        let stream = Destination::parse(&template, Syntax::RedisKey)
            .map_err(|e| format!("`stream`: {e}"))?;
        let maxlen = t.positive_integer("maxlen")?;
        let dedup_ttl = t
            .positive_duration("dedup_ttl")?
            .unwrap_or(Self::DEFAULT_DEDUP_TTL);
        if dedup_ttl < Duration::from_millis(1) {
            return Err("`dedup_ttl` must be at least 1ms".to_owned());
        }
        let marker_prefix = t
            .string("marker_prefix")?
            .unwrap_or_else(|| Self::DEFAULT_MARKER_PREFIX.to_owned());
        let timeout = t.positive_duration("timeout")?.unwrap_or(DEFAULT_TIMEOUT);
        t.finish()?;
        Ok(RedisSettings {
            url,
            stream,
            maxlen,
            dedup_ttl,
            marker_prefix,
            timeout,
        })
    }
}

impl fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact_url(&self.url))
            .field("stream", &self.stream)
            .field("maxlen", &self.maxlen)
            .field("dedup_ttl", &self.dedup_ttl)
            .field("marker_prefix", &self.marker_prefix)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// KEYS[1]: the marker, KEYS[2]: the stream. ARGV: the marker's TTL in
/// milliseconds, MAXLEN (0: none), the message id, its content type, the
/// body. Answers `{1, entry id}` for a new entry, `{0, entry id}` for a
/// message id already added. Public for the benchmark's baseline
/// (`bench/loadgen`), which times the broker running this same script.
pub const GUARDED_XADD: &str = r"
local added = redis.call('GET', KEYS[1])
if added then
  return {0, added}
end
local entry
if tonumber(ARGV[2]) > 0 then
  entry = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*',
    'id', ARGV[3], 'content-type', ARGV[4], 'data', ARGV[5])
else
  entry = redis.call('XADD', KEYS[2], '*',
    'id', ARGV[3], 'content-type', ARGV[4], 'data', ARGV[5])
end
redis.call('SET', KEYS[1], entry, 'PX', ARGV[1])
return {1, entry}
";

pub(super) struct RedisBroker {
    settings: RedisSettings,
    script: redis::Script,
    connection: Lazy<MultiplexedConnection>,
}

impl RedisBroker {
    pub(super) fn new(settings: RedisSettings) -> Self {
        RedisBroker {
            settings,
            script: redis::Script::new(GUARDED_XADD),
            connection: Lazy::new(),
        }
    }

    async fn connect(&self) -> Result<MultiplexedConnection, PublishError> {
        let s = &self.settings;
        super::install_tls_provider();
        let unavailable = |e: redis::RedisError| {
            PublishError::Unavailable(format!("cannot connect to {}: {e}", redact_url(&s.url)))
        };
        let client = redis::Client::open(s.url.as_str()).map_err(|e| {
            PublishError::Refused(format!("{} is not a Redis URL: {e}", redact_url(&s.url)))
        })?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(s.timeout))
            .set_response_timeout(Some(s.timeout));
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(unavailable)
    }
}

/// What the script answered: 1 and the new entry's id, or 0 and the id of
/// the entry the message id was added as before.
fn confirmed(answer: (i64, String)) -> Confirmed {
    match answer.0 {
        1 => Confirmed::Published,
        _ => Confirmed::Duplicate,
    }
}

#[async_trait::async_trait]
impl Broker for RedisBroker {
    async fn publish(&self, message: &Message<'_>) -> Result<Confirmed, PublishError> {
        let s = &self.settings;
        let timeout = s.timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let connection =
            tokio::time::timeout_at(deadline, self.connection.get(|| self.connect(), |_| true))
                .await
                .map_err(|_| {
                    PublishError::Unavailable(format!(
                        "could not connect to Redis within {timeout:?}"
                    ))
                })??;
        let mut conn = (*connection).clone();
        let ttl_ms = u64::try_from(s.dedup_ttl.as_millis()).unwrap_or(u64::MAX);
        let invocation = async {
            self.script
                .key(format!("{}{}", s.marker_prefix, message.id))
                .key(message.destination)
                .arg(ttl_ms)
                .arg(s.maxlen.unwrap_or(0))
                .arg(message.id)
                .arg(CLOUDEVENTS_JSON)
                .arg(message.body)
                .invoke_async::<(i64, String)>(&mut conn)
                .await
        };
        match tokio::time::timeout_at(deadline, invocation).await {
            Ok(Ok(answer)) => Ok(confirmed(answer)),
            Ok(Err(e)) if matches!(e.retry_method(), redis::RetryMethod::NoRetry) => {
                Err(PublishError::Refused(format!("Redis: {e}")))
            }
            Ok(Err(e)) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                    self.connection.discard(&connection).await;
                }
                Err(PublishError::Unavailable(format!("Redis: {e}")))
            }
            Err(_) => {
                self.connection.discard(&connection).await;
                Err(PublishError::Unavailable(format!(
                    "Redis did not answer within {timeout:?}"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RedisSettings, String> {
        let env = |name: &str| {
            (name == "REDIS_URL").then(|| "rediss://:redis-s3cret@cache.example:6380/2".to_owned())
        };
        RedisSettings::from_toml(text.parse().unwrap(), &env)
    }

    #[test]
    fn defaults_fill_an_empty_table() {
        let s = parse("").unwrap();
        assert_eq!(s.url, RedisSettings::DEFAULT_URL);
        assert_eq!(
            s.stream.render("shop", "stripe", Some("a.b")),
            "webhooks:shop"
        );
        assert_eq!(s.dedup_ttl, Duration::from_secs(72 * 3600));
        assert_eq!(s.marker_prefix, "idempotent-receiver:published:");
        assert_eq!(s.maxlen, None);
        assert_eq!(s.timeout, Duration::from_secs(5));
    }

    #[test]
    fn url_env_wins_over_url_and_no_password_prints() {
        let s = parse("url = \"redis://localhost\"\nurl_env = \"REDIS_URL\"\nmaxlen = 1000\ndedup_ttl = \"24h\"")
            .unwrap();
        assert_eq!(s.url, "rediss://:redis-s3cret@cache.example:6380/2");
        assert_eq!(s.maxlen, Some(1000));
        assert_eq!(s.dedup_ttl, Duration::from_secs(24 * 3600));
        let debug = format!("{s:?}");
        assert!(!debug.contains("redis-s3cret"), "{debug}");
        let s = parse("url = \"redis://user:pw-s3cret@localhost/0\"").unwrap();
        assert!(!format!("{s:?}").contains("pw-s3cret"));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        assert!(parse("streams = \"x\"").unwrap_err().contains("`streams`"));
        assert!(parse("maxlen = 0").unwrap_err().contains("maxlen"));
        assert!(parse("maxlen = \"10\"").unwrap_err().contains("maxlen"));
        assert!(
            parse("dedup_ttl = \"0\"")
                .unwrap_err()
                .contains("dedup_ttl")
        );
        assert!(
            parse("url = \"http://h\"")
                .unwrap_err()
                .contains("Redis URL")
        );
        assert!(parse("url_env = \"UNSET\"").unwrap_err().contains("UNSET"));
    }

    #[test]
    fn the_script_answers_map_to_published_and_duplicate() {
        assert_eq!(confirmed((1, "1-0".into())), Confirmed::Published);
        assert_eq!(confirmed((0, "1-0".into())), Confirmed::Duplicate);
    }
}
