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

pub use destination::{Destination, DestinationError};
pub use nats::NatsSettings;
pub use rabbitmq::RabbitmqSettings;
pub use redis_streams::RedisSettings;
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
