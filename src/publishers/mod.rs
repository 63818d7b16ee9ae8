//! The message brokers the relay publishes outbox rows to: NATS JetStream,
//! RabbitMQ and Redis Streams, each through its own well-kept client crate.
//!
//! A broker sees a [`Message`]: a stable id, a destination already rendered
//! from the publisher's template, and the CloudEvents envelope. Its
//! [`Broker::publish`] returns only once the broker has confirmed the
//! message (a JetStream ack, a RabbitMQ publisher confirm, the Redis
//! script's reply), so the relay marks a row sent only after that. The same
//! id published twice lands once where the broker can deduplicate
//! (JetStream's `Nats-Msg-Id`, the guarded `XADD`) and carries the same
//! `message_id` where it cannot (RabbitMQ).

pub mod destination;
mod nats;
mod rabbitmq;
mod redis_streams;
mod signal;

pub use destination::{Destination, DestinationError, Syntax};
pub use nats::{NatsAuth, NatsSettings, NatsStream};
pub use rabbitmq::RabbitmqSettings;
pub use redis_streams::{GUARDED_XADD, RedisSettings};
pub use signal::OutboxSignal;

use std::sync::Arc;
use std::time::Duration;

/// The media type of a CloudEvents 1.0 JSON envelope (structured mode).
pub const CLOUDEVENTS_JSON: &str = "application/cloudevents+json";

/// One outbox row, as a broker sees it.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// The id brokers deduplicate on: `<endpoint>:<delivery id>` for the
    /// original publication, with a suffix for an operator's republish.
    pub id: &'a str,
    /// The subject, routing key or stream, rendered when the row was
    /// written.
    pub destination: &'a str,
    /// The CloudEvents JSON envelope.
    pub body: &'a [u8],
}

/// What the broker answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmed {
    /// Stored by the broker.
    Published,
    /// The broker already had this id and dropped the copy (JetStream's
    /// duplicate window, the Redis marker): the row is sent all the same.
    Duplicate,
}

/// Why a publication did not happen. Every error is retried with backoff:
/// a broker that is down, or a destination nothing is bound to yet, may be
/// fixed by the time the row is due again.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The broker cannot be reached or did not confirm in time.
    #[error("the broker is unavailable: {0}")]
    Unavailable(String),
    /// The broker answered and refused the message (no stream for the
    /// subject, an unroutable message, a rejected confirm).
    #[error("the broker refused the message: {0}")]
    Refused(String),
}

/// A connected broker client. Implementations reconnect on their own after
/// a failure: `publish` on a dead connection fails fast with
/// [`PublishError::Unavailable`] and the next call tries to connect again.
#[async_trait::async_trait]
pub trait Broker: Send + Sync {
    /// Publishes and waits for the broker's confirmation.
    async fn publish(&self, message: &Message<'_>) -> Result<Confirmed, PublishError>;
}

/// What `[publishers.NAME]` says.
#[derive(Debug, Clone)]
pub struct PublisherSettings {
    pub name: String,
    pub broker: BrokerSettings,
    /// The first retry's delay after a failed publication; it doubles.
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
    /// Failed publications after which a row is `failed` and waits for an
    /// operator (`outbox retry`, `republish`); `None`: retried forever, so
    /// that an outage never loses a message.
    pub max_attempts: Option<u32>,
    /// CloudEvents `source`; `{endpoint}` and `{provider}` are replaced.
    pub source: String,
    /// Prefix of CloudEvents `type`, before the provider's event type;
    /// `{endpoint}` and `{provider}` are replaced.
    pub type_prefix: String,
}

impl PublisherSettings {
    pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(1);
    pub const DEFAULT_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(60);
    pub const DEFAULT_SOURCE: &str = "/webhooks/{endpoint}";
    /// `stripe.payment_intent.succeeded`: the provider names the family.
    pub const DEFAULT_TYPE_PREFIX: &str = "{provider}.";
}

/// The broker of one publisher, with its connection settings.
#[derive(Debug, Clone)]
pub enum BrokerSettings {
    Nats(NatsSettings),
    Rabbitmq(RabbitmqSettings),
    Redis(RedisSettings),
}

impl BrokerSettings {
    pub fn kind(&self) -> &'static str {
        match self {
            BrokerSettings::Nats(_) => "nats",
            BrokerSettings::Rabbitmq(_) => "rabbitmq",
            BrokerSettings::Redis(_) => "redis",
        }
    }

    /// The template of the subject, routing key or stream.
    pub fn destination(&self) -> &Destination {
        match self {
            BrokerSettings::Nats(s) => &s.subject,
            BrokerSettings::Rabbitmq(s) => &s.routing_key,
            BrokerSettings::Redis(s) => &s.stream,
        }
    }

    /// A client for this broker. It connects lazily: a broker that is down
    /// at startup does not stop the receiver, whose deliveries keep filling
    /// the outbox until it is back.
    pub fn client(&self) -> Arc<dyn Broker> {
        match self {
            BrokerSettings::Nats(s) => Arc::new(nats::NatsBroker::new(s.clone())),
            BrokerSettings::Rabbitmq(s) => Arc::new(rabbitmq::RabbitmqBroker::new(s.clone())),
            BrokerSettings::Redis(s) => Arc::new(redis_streams::RedisBroker::new(s.clone())),
        }
    }
}

/// The longest a publication waits for the broker by default: to connect,
/// and then for its confirmation.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Makes ring rustls's process-wide crypto provider unless one is set. The
/// three clients build their TLS configurations from that default; rustls
/// picks one by itself only when exactly one provider is compiled in, and
/// the test build also has aws-lc-rs (through svix).
fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err: another provider was installed first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Reading one `[publishers.NAME]` table for a kind's `from_toml`: each
/// getter takes its key out of the table, so that what is left at the end
/// is unknown and named in the error.
mod table {
    use crate::secret::Secret;
    use std::time::Duration;
    use toml::Value;

    pub(super) struct Table<'a> {
        table: toml::Table,
        kind: &'static str,
        known: &'static [&'static str],
        env: &'a dyn Fn(&str) -> Option<String>,
    }

    impl<'a> Table<'a> {
        pub fn new(
            table: toml::Table,
            kind: &'static str,
            known: &'static [&'static str],
            env: &'a dyn Fn(&str) -> Option<String>,
        ) -> Self {
            Table {
                table,
                kind,
                known,
                env,
            }
        }

        pub fn value(&mut self, key: &str) -> Option<Value> {
            debug_assert!(self.known.contains(&key), "{key} is not listed as known");
            self.table.remove(key)
        }

        pub fn string(&mut self, key: &str) -> Result<Option<String>, String> {
            match self.value(key) {
                None => Ok(None),
                Some(Value::String(text)) => Ok(Some(text)),
                Some(other) => Err(format!(
                    "`{key}` must be a string, not {}",
                    other.type_str()
                )),
            }
        }

        pub fn boolean(&mut self, key: &str) -> Result<Option<bool>, String> {
            match self.value(key) {
                None => Ok(None),
                Some(Value::Boolean(b)) => Ok(Some(b)),
                Some(other) => Err(format!(
                    "`{key}` must be true or false, not {}",
                    other.type_str()
                )),
            }
        }

        pub fn positive_integer(&mut self, key: &str) -> Result<Option<u64>, String> {
            match self.value(key) {
                None => Ok(None),
                Some(Value::Integer(n)) if n > 0 => Ok(Some(n.unsigned_abs())),
                Some(other) => Err(format!("`{key}` must be a positive integer, not {other}")),
            }
        }

        pub fn duration(&mut self, key: &str) -> Result<Option<Duration>, String> {
            self.string(key)?
                .map(|text| {
                    crate::duration_text::parse_duration(&text).map_err(|e| format!("`{key}`: {e}"))
                })
                .transpose()
        }

        /// A duration that must not be zero.
        pub fn positive_duration(&mut self, key: &str) -> Result<Option<Duration>, String> {
            match self.duration(key)? {
                Some(d) if d.is_zero() => Err(format!("`{key}` must be longer than 0")),
                other => Ok(other),
            }
        }

        /// The value of the environment variable that `key` names: an
        /// error when the key is set and the variable is not.
        pub fn env_value(&mut self, key: &str) -> Result<Option<String>, String> {
            let Some(var) = self.string(key)? else {
                return Ok(None);
            };
            match (self.env)(&var) {
                Some(value) => Ok(Some(value)),
                None => Err(format!(
                    "`{key}`: the environment variable {var} is not set"
                )),
            }
        }

        pub fn env_secret(&mut self, key: &str) -> Result<Option<Secret>, String> {
            Ok(self.env_value(key)?.map(|v| Secret::new(v.into_bytes())))
        }

        /// Every key left over is one this kind does not take.
        pub fn finish(self) -> Result<(), String> {
            match self.table.keys().next() {
                None => Ok(()),
                Some(key) => Err(format!(
                    "unknown key `{key}` for a {} publisher (it takes: {})",
                    self.kind,
                    self.known.join(", ")
                )),
            }
        }
    }
}

/// A broker connection made on first use, and again after it was
/// discarded. Publications share it; one connects while the others wait.
struct Lazy<C> {
    current: tokio::sync::Mutex<Option<Arc<C>>>,
}

impl<C> Lazy<C> {
    fn new() -> Self {
        Lazy {
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// The connection, when there is one that `usable` accepts; else a new
    /// one from `connect`.
    async fn get<F, Fut>(
        &self,
        connect: F,
        usable: impl Fn(&C) -> bool,
    ) -> Result<Arc<C>, PublishError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<C, PublishError>>,
    {
        let mut current = self.current.lock().await;
        if let Some(conn) = current.as_ref()
            && usable(conn)
        {
            return Ok(conn.clone());
        }
        *current = None;
        let conn = Arc::new(connect().await?);
        *current = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets `conn` (unless another publication replaced it already), so
    /// that the next publication connects again.
    async fn discard(&self, conn: &Arc<C>) -> bool {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *current = None;
            true
        } else {
            false
        }
    }
}
