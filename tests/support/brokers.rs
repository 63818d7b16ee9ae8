//! The three brokers the publishers talk to, as tests see them: whether
//! each is reachable, and what landed on it.
//!
//! `nats()`, `rabbitmq()` and `redis()` connect to the shared services on
//! this machine. When one cannot be reached they print one line
//! `SKIPPED: <broker> not reachable at <addr>` per test binary (past
//! libtest's capture) and return `None`, so the test returns early; with
//! `IR_REQUIRE_BROKERS=1` (as in CI) they panic instead.
//!
//! Tests run in parallel against the same services, so each one names its
//! own stream, queue or keys with [`unique`], and the guards here delete
//! them when dropped, whether the test passed or not.

#![allow(dead_code)]

use async_nats::jetstream;
use lapin::options::{BasicGetOptions, QueueDeleteOptions};
use lapin::{Connection, ConnectionProperties};
use std::future::Future;
use std::io::Write;
use std::sync::Once;
use std::time::Duration;

pub const NATS_ADDR: &str = "127.0.0.1:4222";
pub const RABBITMQ_ADDR: &str = "127.0.0.1:5672";
pub const REDIS_ADDR: &str = "127.0.0.1:6379";
pub const RABBITMQ_CREDENTIALS: &str = "guest:guest";

/// How long the helpers wait for a service before calling it unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// One message as it landed on a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    /// `Nats-Msg-Id`, the AMQP `message_id`, or the entry's `id` field.
    pub id: Option<String>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// The subject, routing key or stream key.
    pub destination: String,
    /// RabbitMQ's `delivery_mode` (2: persistent).
    pub delivery_mode: Option<u8>,
    /// The stream's sequence, or the Redis entry id.
    pub position: String,
}

/// Whether a missing broker fails the test (`IR_REQUIRE_BROKERS=1`).
pub fn required() -> bool {
    std::env::var("IR_REQUIRE_BROKERS").is_ok_and(|v| v == "1")
}

/// A name no other test uses: `prefix` and a fresh uuid.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

fn unreachable<T>(broker: &str, addr: &str, reason: &str, once: &'static Once) -> Option<T> {
    if required() {
        panic!("{broker} is required (IR_REQUIRE_BROKERS=1) but not reachable at {addr}: {reason}");
    }
    once.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {broker} not reachable at {addr}"
        );
    });
    None
}

async fn within<T, E: std::fmt::Display>(
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
    }
}

/// Runs `work` to completion on a runtime of its own, on a thread of its
/// own: cleanup from `Drop`, which may run inside or outside a runtime.
fn run_detached<F, Fut>(work: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let thread = std::thread::spawn(move || {
        if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            runtime.block_on(async {
                let _ = tokio::time::timeout(Duration::from_secs(10), work()).await;
            });
        }
    });
    let _ = thread.join();
}

// ---------------------------------------------------------------- NATS

pub struct Nats {
    pub js: jetstream::Context,
}

pub async fn nats() -> Option<Nats> {
    static SKIPPED: Once = Once::new();
    let url = format!("nats://{NATS_ADDR}");
    let connect = async {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(CONNECT_TIMEOUT)
            .connect(url.as_str())
            .await
            .map_err(|e| e.to_string())?;
        // JetStream must be on, not just the server: its API answers
        // without an error.
        let info = client
            .request("$JS.API.INFO", bytes::Bytes::new())
            .await
            .map_err(|e| format!("JetStream: {e}"))?;
        let info: serde_json::Value =
            serde_json::from_slice(&info.payload).map_err(|e| format!("JetStream: {e}"))?;
        if let Some(error) = info.get("error") {
            return Err(format!("JetStream: {error}"));
        }
        Ok::<_, String>(jetstream::new(client))
    };
    match within(connect).await {
        Ok(js) => Some(Nats { js }),
        Err(reason) => unreachable("NATS", NATS_ADDR, &reason, &SKIPPED),
    }
}

/// A stream name and its subjects' prefix for one test; the stream (made
/// by the publisher under test, or by [`Nats::create_stream`]) is deleted
/// on drop.
pub struct TestStream {
    pub name: String,
    /// `irtest.<uuid>`: the test's subjects start with it and a dot.
    pub prefix: String,
}

impl TestStream {
    pub fn new() -> TestStream {
        let id = uuid::Uuid::new_v4().simple().to_string();
        TestStream {
            name: format!("IRTEST_{id}"),
            prefix: format!("irtest.{id}"),
        }
    }
}

impl Drop for TestStream {
    fn drop(&mut self) {
        let name = self.name.clone();
        run_detached(move || async move {
            if let Ok(client) = async_nats::connect(format!("nats://{NATS_ADDR}")).await {
                let _ = jetstream::new(client).delete_stream(&name).await;
            }
        });
    }
}

impl Nats {
    /// Every message of `stream`, oldest first.
    pub async fn stream_messages(&self, stream: &str) -> Vec<Landed> {
        let mut stream = self.js.get_stream(stream).await.expect("the test's stream");
        let state = stream
            .info()
            .await
            .expect("the stream's info")
            .state
            .clone();
        let mut landed = Vec::new();
        if state.messages == 0 {
            return landed;
        }
        for sequence in state.first_sequence..=state.last_sequence {
            let Ok(message) = stream.get_raw_message(sequence).await else {
                continue;
            };
            let headers = &message.headers;
            landed.push(Landed {
                // By its constant: the name as a string is a custom header
                // that does not match the standard one.
                id: headers
                    .get(async_nats::header::NATS_MESSAGE_ID)
                    .map(|v| v.as_str().to_owned()),
                content_type: headers.get("Content-Type").map(|v| v.as_str().to_owned()),
                body: message.payload.to_vec(),
                destination: message.subject.to_string(),
                delivery_mode: None,
                position: message.sequence.to_string(),
            });
        }
        landed
    }

    /// The messages of `stream` whose subject is `subject`.
    pub async fn subject_messages(&self, stream: &str, subject: &str) -> Vec<Landed> {
        let mut all = self.stream_messages(stream).await;
        all.retain(|m| m.destination == subject);
        all
    }
}

// ------------------------------------------------------------ RabbitMQ

pub struct Rabbitmq {
    connection: Connection,
    pub channel: lapin::Channel,
}

pub fn rabbitmq_url(addr: &str) -> String {
    format!("amqp://{RABBITMQ_CREDENTIALS}@{addr}/%2f")
}

pub async fn rabbitmq() -> Option<Rabbitmq> {
    static SKIPPED: Once = Once::new();
    let connect = async {
        let connection = Connection::connect(&rabbitmq_url(RABBITMQ_ADDR), properties()).await?;
        let channel = connection.create_channel().await?;
        Ok::<_, lapin::Error>(Rabbitmq {
            connection,
            channel,
        })
    };
    match within(connect).await {
        Ok(rabbitmq) => Some(rabbitmq),
        Err(reason) => unreachable("RabbitMQ", RABBITMQ_ADDR, &reason, &SKIPPED),
    }
}

fn properties() -> ConnectionProperties {
    ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio::current())
}

impl Rabbitmq {
    /// Takes every message ready in `queue` (acknowledged as taken).
    pub async fn drain(&self, queue: &str) -> Vec<Landed> {
        let mut landed = Vec::new();
        while let Some(message) = self
            .channel
            .basic_get(queue, BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get on the test's queue")
        {
            let delivery = message.delivery;
            let properties = &delivery.properties;
            landed.push(Landed {
                id: properties.message_id().as_ref().map(|s| s.to_string()),
                content_type: properties.content_type().as_ref().map(|s| s.to_string()),
                body: delivery.data.clone(),
                destination: delivery.routing_key.to_string(),
                delivery_mode: *properties.delivery_mode(),
                position: delivery.delivery_tag.to_string(),
            });
        }
        landed
    }

    pub async fn close(self) {
        let _ = self.connection.close(200, "done").await;
    }
}

/// A queue (and exchange) name for one test; both are deleted on drop.
pub struct TestQueue {
    pub queue: String,
    pub exchange: String,
}

impl TestQueue {
    pub fn new() -> TestQueue {
        TestQueue {
            queue: unique("irtest-q-"),
            exchange: unique("irtest-x-"),
        }
    }
}

impl Drop for TestQueue {
    fn drop(&mut self) {
        let (queue, exchange) = (self.queue.clone(), self.exchange.clone());
        run_detached(move || async move {
            let Ok(connection) =
                Connection::connect(&rabbitmq_url(RABBITMQ_ADDR), properties()).await
            else {
                return;
            };
            if let Ok(channel) = connection.create_channel().await {
                let _ = channel
                    .queue_delete(&queue, QueueDeleteOptions::default())
                    .await;
                let _ = channel
                    .exchange_delete(&exchange, lapin::options::ExchangeDeleteOptions::default())
                    .await;
            }
            let _ = connection.close(200, "done").await;
        });
    }
}

// --------------------------------------------------------------- Redis

pub async fn redis() -> Option<redis::aio::MultiplexedConnection> {
    static SKIPPED: Once = Once::new();
    let connect = async {
        let client = redis::Client::open(format!("redis://{REDIS_ADDR}"))?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        Ok::<_, redis::RedisError>(conn)
    };
    match within(connect).await {
        Ok(conn) => Some(conn),
        Err(reason) => unreachable("Redis", REDIS_ADDR, &reason, &SKIPPED),
    }
}

/// Every entry of `stream`, oldest first.
pub async fn xrange(conn: &mut redis::aio::MultiplexedConnection, stream: &str) -> Vec<Landed> {
    let entries: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .expect("XRANGE of the test's stream");
    entries
        .into_iter()
        .map(|(entry, fields)| {
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair[0] == name.as_bytes())
                    .and_then(|pair| pair.get(1).cloned())
            };
            let text = |name: &str| field(name).map(|v| String::from_utf8_lossy(&v).into_owned());
            Landed {
                id: text("id"),
                content_type: text("content-type"),
                body: field("data").unwrap_or_default(),
                destination: stream.to_owned(),
                delivery_mode: None,
                position: entry,
            }
        })
        .collect()
}

/// A stream key and a marker prefix for one test; the stream and every
/// marker under the prefix are deleted on drop.
pub struct TestKeys {
    /// `irtest:<uuid>`: the test's stream keys start with it.
    pub prefix: String,
    pub marker_prefix: String,
}

impl TestKeys {
    pub fn new() -> TestKeys {
        let id = uuid::Uuid::new_v4().simple().to_string();
        TestKeys {
            prefix: format!("irtest:{id}"),
            marker_prefix: format!("irtest-marker:{id}:"),
        }
    }
}

impl Drop for TestKeys {
    fn drop(&mut self) {
        let patterns = [
            format!("{}*", self.prefix),
            format!("{}*", self.marker_prefix),
        ];
        run_detached(move || async move {
            let Ok(client) = redis::Client::open(format!("redis://{REDIS_ADDR}")) else {
                return;
            };
            let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                return;
            };
            for pattern in patterns {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(&pattern)
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_default();
                if !keys.is_empty() {
                    let _ = redis::cmd("DEL")
                        .arg(&keys)
                        .query_async::<i64>(&mut conn)
                        .await;
                }
            }
        });
    }
}
