//! RabbitMQ through `lapin`, with publisher confirms.
//!
//! Each message is published persistent (`delivery_mode = 2`) and
//! `mandatory`, with `message_id` set to the message's id and
//! `content_type = application/cloudevents+json`, on a channel in confirm
//! mode; `publish` returns once the broker has acked it. An unroutable
//! message comes back (basic.return) before its ack and is
//! [`PublishError::Refused`], as is a nack. RabbitMQ cannot drop a repeat:
//! the same id published twice is two messages with one `message_id`, which
//! consumers deduplicate on.
//!
//! lapin does not reconnect: a connection that failed, or a confirm that did
//! not come within `confirm_timeout`, is dropped, and the next publication
//! connects again.

use super::table::Table;
use super::{
    Broker, CLOUDEVENTS_JSON, Confirmed, DEFAULT_TIMEOUT, Destination, Lazy, Message, PublishError,
    Syntax,
};
use crate::secret::redact_url;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::publisher_confirm::Confirmation;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// `[publishers.NAME]` with `kind = "rabbitmq"`.
#[derive(Clone)]
pub struct RabbitmqSettings {
    /// The AMQP URL with its credentials: `url_env`'s variable when set,
    /// else `url` (default `amqp://guest:guest@127.0.0.1:5672/%2f`);
    /// `amqps://` for TLS. Prefer `url_env` for a real password: a `url`
    /// stays in the configuration file.
    pub url: String,
    /// The exchange to publish to (default `""`, the default exchange,
    /// which routes a key to the queue of that name).
    pub exchange: String,
    /// The routing key of each event (default `webhooks.{endpoint}.{event_type}`).
    pub routing_key: Destination,
    /// Declare `exchange` at connect, as a durable topic exchange.
    pub declare_exchange: bool,
    /// A durable queue to declare at connect, bound to `exchange` with
    /// `queue_binding` (default `#`, everything) unless the exchange is the
    /// default one. For tests and first setups; production topologies
    /// usually belong to the consumers.
    pub queue: Option<String>,
    pub queue_binding: String,
    /// How long a publication waits to connect and for the broker's confirm
    /// (default 5 s).
    pub confirm_timeout: Duration,
}

impl RabbitmqSettings {
    pub const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
    pub const DEFAULT_ROUTING_KEY: &str = "webhooks.{endpoint}.{event_type}";

    const KEYS: &[&str] = &[
        "url",
        "url_env",
        "exchange",
        "routing_key",
        "declare_exchange",
        "queue",
        "queue_binding",
        "confirm_timeout",
    ];

    /// Reads the rabbitmq keys of `[publishers.NAME]` (without the common
    /// ones), resolving `url_env` through `env`.
    pub fn from_toml(
        table: toml::Table,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut t = Table::new(table, "rabbitmq", Self::KEYS, env);
        let url = t.string("url")?;
        let url = match t.env_value("url_env")? {
            Some(from_env) => from_env,
            None => url.unwrap_or_else(|| Self::DEFAULT_URL.to_owned()),
        };
        if let Err(e) = url.parse::<lapin::uri::AMQPUri>() {
            return Err(format!(
                "`url`: {} is not an AMQP URL ({e})",
                redact_url(&url)
            ));
        }
        let exchange = t.string("exchange")?.unwrap_or_default();
        let template = t
            .string("routing_key")?
            .unwrap_or_else(|| Self::DEFAULT_ROUTING_KEY.to_owned());
        let routing_key = Destination::parse(&template, Syntax::RoutingKey)
            .map_err(|e| format!("`routing_key`: {e}"))?;
        let declare_exchange = t.boolean("declare_exchange")?.unwrap_or(false);
        if declare_exchange && exchange.is_empty() {
            return Err("`declare_exchange` needs an `exchange` name".to_owned());
        }
        let queue = t.string("queue")?;
        if queue.as_deref() == Some("") {
            return Err("`queue` is empty".to_owned());
        }
        let queue_binding = t.string("queue_binding")?;
        if queue_binding.is_some() && (queue.is_none() || exchange.is_empty()) {
            return Err("`queue_binding` needs a `queue` and an `exchange`".to_owned());
        }
        let confirm_timeout = t
            .positive_duration("confirm_timeout")?
            .unwrap_or(DEFAULT_TIMEOUT);
        t.finish()?;
        Ok(RabbitmqSettings {
            url,
            exchange,
            routing_key,
            declare_exchange,
            queue,
            queue_binding: queue_binding.unwrap_or_else(|| "#".to_owned()),
            confirm_timeout,
        })
    }
}

impl fmt::Debug for RabbitmqSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitmqSettings")
            .field("url", &redact_url(&self.url))
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key)
            .field("declare_exchange", &self.declare_exchange)
            .field("queue", &self.queue)
            .field("queue_binding", &self.queue_binding)
            .field("confirm_timeout", &self.confirm_timeout)
            .finish()
    }
}

/// A connection and its one channel in confirm mode.
struct Link {
    connection: Connection,
    channel: Channel,
}

pub(super) struct RabbitmqBroker {
    settings: RabbitmqSettings,
    link: Lazy<Link>,
}

impl RabbitmqBroker {
    pub(super) fn new(settings: RabbitmqSettings) -> Self {
        RabbitmqBroker {
            settings,
            link: Lazy::new(),
        }
    }

    async fn connect(&self) -> Result<Link, PublishError> {
        let s = &self.settings;
        super::install_tls_provider();
        let unavailable = |e: lapin::Error| {
            PublishError::Unavailable(format!("cannot connect to {}: {e}", redact_url(&s.url)))
        };
        let properties = ConnectionProperties::default()
            .with_executor(tokio_executor_trait::Tokio::current())
            .with_reactor(tokio_reactor_trait::Tokio::current())
            .with_connection_name("idempotent-receiver".into());
        let connection = Connection::connect(&s.url, properties)
            .await
            .map_err(unavailable)?;
        let link = async {
            let channel = connection.create_channel().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            Ok::<_, lapin::Error>(channel)
        }
        .await;
        let channel = match link {
            Ok(channel) => channel,
            Err(e) => {
                close_later(connection);
                return Err(unavailable(e));
            }
        };
        // A declaration the broker refuses (an exchange of another type, a
        // queue with other arguments) closes the channel: a setup error.
        let declared = async {
            if s.declare_exchange {
                let options = ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                };
                channel
                    .exchange_declare(
                        &s.exchange,
                        ExchangeKind::Topic,
                        options,
                        FieldTable::default(),
                    )
                    .await?;
            }
            if let Some(queue) = &s.queue {
                let options = QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                };
                channel
                    .queue_declare(queue, options, FieldTable::default())
                    .await?;
                if !s.exchange.is_empty() {
                    channel
                        .queue_bind(
                            queue,
                            &s.exchange,
                            &s.queue_binding,
                            QueueBindOptions::default(),
                            FieldTable::default(),
                        )
                        .await?;
                }
            }
            Ok::<_, lapin::Error>(())
        }
        .await;
        if let Err(e) = declared {
            close_later(connection);
            return Err(PublishError::Refused(format!(
                "cannot declare the exchange or queue: {e}"
            )));
        }
        Ok(Link {
            connection,
            channel,
        })
    }

    async fn publish_on(
        &self,
        link: &Link,
        message: &Message<'_>,
    ) -> Result<Confirmed, PublishError> {
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(message.id.into())
            .with_content_type(CLOUDEVENTS_JSON.into());
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let lost = |e: lapin::Error| PublishError::Unavailable(format!("RabbitMQ: {e}"));
        let confirmation = link
            .channel
            .basic_publish(
                &self.settings.exchange,
                message.destination,
                options,
                message.body,
                properties,
            )
            .await
            .map_err(lost)?
            .await
            .map_err(lost)?;
        match confirmation {
            Confirmation::Ack(None) => Ok(Confirmed::Published),
            Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => {
                Err(PublishError::Refused(format!(
                    "RabbitMQ returned the message: {} {} (exchange {:?}, routing key {:?})",
                    returned.reply_code,
                    returned.reply_text,
                    self.settings.exchange,
                    message.destination
                )))
            }
            Confirmation::Nack(None) => Err(PublishError::Refused(
                "RabbitMQ nacked the message".to_owned(),
            )),
            Confirmation::NotRequested => Err(PublishError::Unavailable(
                "the channel is not in confirm mode".to_owned(),
            )),
        }
    }

    /// Drops `link` so that the next publication connects again.
    async fn drop_link(&self, link: &Arc<Link>) {
        if self.link.discard(link).await {
            let link = link.clone();
            tokio::spawn(async move { close(&link.connection).await });
        }
    }
}

/// Closes a connection that is no longer used, without waiting for a
/// broker that may not answer.
fn close_later(connection: Connection) {
    tokio::spawn(async move { close(&connection).await });
}

async fn close(connection: &Connection) {
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        connection.close(320, "reconnecting"),
    )
    .await;
}

#[async_trait::async_trait]
impl Broker for RabbitmqBroker {
    async fn publish(&self, message: &Message<'_>) -> Result<Confirmed, PublishError> {
        let timeout = self.settings.confirm_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let link = tokio::time::timeout_at(
            deadline,
            self.link.get(
                || self.connect(),
                |link| link.connection.status().connected() && link.channel.status().connected(),
            ),
        )
        .await
        .map_err(|_| {
            PublishError::Unavailable(format!("could not connect to RabbitMQ within {timeout:?}"))
        })??;
        match tokio::time::timeout_at(deadline, self.publish_on(&link, message)).await {
            Ok(Err(e @ PublishError::Unavailable(_))) => {
                self.drop_link(&link).await;
                Err(e)
            }
            Ok(result) => result,
            Err(_) => {
                // A confirm that does not come may be a connection that died
                // silently: the next publication uses a new one.
                self.drop_link(&link).await;
                Err(PublishError::Unavailable(format!(
                    "RabbitMQ did not confirm within {timeout:?}"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RabbitmqSettings, String> {
        let env = |name: &str| {
            (name == "AMQP_URL").then(|| "amqps://app:amqp-s3cret@mq.example:5671/prod".to_owned())
        };
        RabbitmqSettings::from_toml(text.parse().unwrap(), &env)
    }

    #[test]
    fn defaults_fill_an_empty_table() {
        let s = parse("").unwrap();
        assert_eq!(s.url, RabbitmqSettings::DEFAULT_URL);
        assert_eq!(s.exchange, "");
        assert_eq!(
            s.routing_key.render("shop", "stripe", Some("a.b")),
            "webhooks.shop.a.b"
        );
        assert_eq!(s.confirm_timeout, Duration::from_secs(5));
        assert!(!s.declare_exchange && s.queue.is_none());
    }

    #[test]
    fn url_env_wins_over_url_and_no_password_prints() {
        let s = parse("url = \"amqp://guest:guest@localhost\"\nurl_env = \"AMQP_URL\"").unwrap();
        assert_eq!(s.url, "amqps://app:amqp-s3cret@mq.example:5671/prod");
        let debug = format!("{s:?}");
        assert!(!debug.contains("amqp-s3cret"), "{debug}");
        assert!(
            debug.contains("amqps://app:***@mq.example:5671/prod"),
            "{debug}"
        );
        assert!(parse("url_env = \"UNSET\"").unwrap_err().contains("UNSET"));
    }

    #[test]
    fn declarations_are_checked() {
        assert!(parse("declare_exchange = true").is_err());
        let s = parse("exchange = \"events\"\ndeclare_exchange = true\nqueue = \"q\"").unwrap();
        assert_eq!(s.queue_binding, "#");
        assert!(parse("queue_binding = \"a.#\"\nqueue = \"q\"").is_err());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        assert!(parse("exchang = \"x\"").unwrap_err().contains("`exchang`"));
        assert!(
            parse("confirm_timeout = \"later\"")
                .unwrap_err()
                .contains("confirm_timeout")
        );
        assert!(
            parse("url = \"http://x:pw@host\"")
                .unwrap_err()
                .contains("AMQP URL")
        );
        assert!(
            !parse("url = \"http://x:pw-s3cret@host\"")
                .unwrap_err()
                .contains("pw-s3cret")
        );
    }
}
