//! `outboxbench`: the broker side of `bench/run.sh`'s outbox section.
//!
//! - `config` prints the `[publishers.bus]` table that reaches a broker
//!   under names derived from `--name` (a NATS stream and subject prefix, a
//!   RabbitMQ exchange and queue, Redis stream keys and markers), so that the
//!   script and this tool agree on them.
//! - `baseline` times the broker's own publish rate with the client crate
//!   and the confirm discipline of the receiver's publisher: a JetStream
//!   publish with `Nats-Msg-Id` awaiting its ack, a persistent mandatory
//!   RabbitMQ publish with `message_id` awaiting its confirm, the receiver's
//!   own guarded-`XADD` Lua script on Redis; `--in-flight` at once (the
//!   relay keeps 4 batches of 64), bodies of `--size` bytes.
//! - `consume` reads what landed for one endpoint (a JetStream ordered
//!   consumer, RabbitMQ `basic.consume`, Redis `XREAD BLOCK`), from the
//!   start, and times each message from its CloudEvents `time` (the
//!   receipt) to its arrival here; it counts each id, so that the script can
//!   check exactly-once against the outbox.
//! - `cleanup` deletes the stream, exchange and queue, or keys of `--name`.

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use futures_util::StreamExt;
use idempotent_receiver::publishers::{CLOUDEVENTS_JSON, GUARDED_XADD};
use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Broker {
    Nats,
    Rabbitmq,
    Redis,
}

/// The outbox benchmark's broker tool (bench/run.sh, OUTBOX section).
#[derive(Parser, Debug)]
#[command(name = "outboxbench")]
struct Args {
    #[arg(long, global = true, default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    #[arg(
        long,
        global = true,
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    amqp_url: String,
    #[arg(long, global = true, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Prints `[publishers.bus]` for the receiver's configuration.
    Config {
        #[arg(long, value_enum)]
        broker: Broker,
        /// The prefix of every stream, queue, exchange or key (letters,
        /// digits, '_' and '-').
        #[arg(long)]
        name: String,
    },
    /// Publishes `--messages` messages straight to the broker and prints the
    /// rate of confirmations.
    Baseline {
        #[arg(long, value_enum)]
        broker: Broker,
        #[arg(long)]
        name: String,
        #[arg(long, default_value_t = 10_000)]
        messages: u64,
        /// Publications awaiting their confirmation at once.
        #[arg(long, default_value_t = 256)]
        in_flight: usize,
        /// Bytes per message body.
        #[arg(long, default_value_t = 600)]
        size: usize,
    },
    /// Reads what landed for `--endpoint` and times receipt → arrival.
    Consume {
        #[arg(long, value_enum)]
        broker: Broker,
        #[arg(long)]
        name: String,
        #[arg(long)]
        endpoint: String,
        /// Stop once this many distinct ids arrived (0: no such limit)...
        #[arg(long, default_value_t = 0)]
        expect: u64,
        /// ...or once nothing arrived for this many seconds after a first
        /// message...
        #[arg(long, default_value_t = 5.0)]
        idle: f64,
        /// ...or after this many seconds in all.
        #[arg(long, default_value_t = 120.0)]
        timeout: f64,
        /// Writes each id and how many times it arrived (`id count`).
        #[arg(long)]
        ids_out: Option<PathBuf>,
    },
    /// Deletes the stream, the exchange and queue, or the keys of `--name`.
    Cleanup {
        #[arg(long, value_enum)]
        broker: Broker,
        #[arg(long)]
        name: String,
    },
}

/// What `--name` stands for on each broker.
struct Names<'a>(&'a str);

impl Names<'_> {
    fn check(name: &str) -> anyhow::Result<Names<'_>> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            bail!("--name {name:?}: letters, digits, '_' and '-' only");
        }
        Ok(Names(name))
    }
    /// The JetStream stream; its subjects are `<name>.>`.
    fn stream(&self) -> &str {
        self.0
    }
    /// A subject, routing key or Redis stream of `endpoint`'s events.
    fn subject(&self, endpoint: &str) -> String {
        format!("{}.{endpoint}.payment.succeeded", self.0)
    }
    fn exchange(&self) -> String {
        format!("{}-x", self.0)
    }
    fn queue(&self) -> String {
        format!("{}-q", self.0)
    }
    fn redis_stream(&self, endpoint: &str) -> String {
        format!("{}:{endpoint}", self.0)
    }
    fn marker_prefix(&self) -> String {
        format!("{}-marker:", self.0)
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    match &args.command {
        Command::Config { broker, name } => {
            print!("{}", config(&args, *broker, &Names::check(name)?));
            Ok(())
        }
        Command::Baseline {
            broker,
            name,
            messages,
            in_flight,
            size,
        } => {
            let names = Names::check(name)?;
            let body = body_of(*size);
            let (messages, in_flight) = ((*messages).max(2), (*in_flight).max(1));
            let load = Load {
                messages,
                in_flight,
                body,
            };
            let timing = match broker {
                Broker::Nats => baseline_nats(&args, &names, load).await,
                Broker::Rabbitmq => baseline_rabbitmq(&args, &names, load).await,
                Broker::Redis => baseline_redis(&args, &names, load).await,
            }?;
            timing.report(*broker, messages, in_flight, *size);
            Ok(())
        }
        Command::Consume {
            broker,
            name,
            endpoint,
            expect,
            idle,
            timeout,
            ids_out,
        } => {
            let names = Names::check(name)?;
            let from = From {
                names: &names,
                endpoint,
                limits: Limits {
                    expect: *expect,
                    idle: Duration::from_secs_f64(*idle),
                    deadline: Instant::now() + Duration::from_secs_f64(*timeout),
                },
            };
            let mut arrivals = Arrivals::default();
            match broker {
                Broker::Nats => consume_nats(&args, &from, &mut arrivals).await,
                Broker::Rabbitmq => consume_rabbitmq(&args, &from, &mut arrivals).await,
                Broker::Redis => consume_redis(&args, &from, &mut arrivals).await,
            }?;
            if let Some(path) = ids_out {
                arrivals.write_ids(path)?;
            }
            arrivals.report();
            Ok(())
        }
        Command::Cleanup { broker, name } => {
            let names = Names::check(name)?;
            match broker {
                Broker::Nats => cleanup_nats(&args, &names).await,
                Broker::Rabbitmq => cleanup_rabbitmq(&args, &names).await,
                Broker::Redis => cleanup_redis(&args, &names).await,
            }
        }
    }
}

fn config(args: &Args, broker: Broker, names: &Names) -> String {
    let n = names.0;
    match broker {
        Broker::Nats => format!(
            "[publishers.bus]\nkind = \"nats\"\nurl = \"{}\"\nsubject = \"{n}.{{endpoint}}.{{event_type}}\"\nstream = \"{}\"\n",
            args.nats_url,
            names.stream()
        ),
        Broker::Rabbitmq => format!(
            "[publishers.bus]\nkind = \"rabbitmq\"\nurl = \"{}\"\nexchange = \"{}\"\ndeclare_exchange = true\nqueue = \"{}\"\nrouting_key = \"{n}.{{endpoint}}.{{event_type}}\"\n",
            args.amqp_url,
            names.exchange(),
            names.queue()
        ),
        Broker::Redis => format!(
            "[publishers.bus]\nkind = \"redis\"\nurl = \"{}\"\nstream = \"{n}:{{endpoint}}\"\nmarker_prefix = \"{}\"\n",
            args.redis_url,
            names.marker_prefix()
        ),
    }
}

/// A JSON body of exactly `size` bytes (at least the braces and a key).
fn body_of(size: usize) -> bytes::Bytes {
    let head = "{\"pad\":\"";
    let tail = "\"}";
    let pad = size.saturating_sub(head.len() + tail.len());
    bytes::Bytes::from(format!("{head}{}{tail}", "x".repeat(pad)))
}

// ------------------------------------------------------------ baseline

/// What a baseline publishes: `messages` bodies, `in_flight` at once.
struct Load {
    messages: u64,
    in_flight: usize,
    body: bytes::Bytes,
}

/// When each confirmation came.
struct Timing {
    started: Instant,
    first: Instant,
    last: Instant,
    latencies_us: Vec<u64>,
}

impl Timing {
    fn report(mut self, broker: Broker, messages: u64, in_flight: usize, size: usize) {
        self.latencies_us.sort_unstable();
        let span = (self.last - self.first).as_secs_f64().max(1e-9);
        let wall = (self.last - self.started).as_secs_f64().max(1e-9);
        let l = &self.latencies_us;
        println!(
            "RESULT broker={broker:?} messages={messages} in_flight={in_flight} size={size} rate={:.1} wall_rate={:.1} span_s={span:.3} p50_ms={:.3} p99_ms={:.3} max_ms={:.3}",
            (messages - 1) as f64 / span,
            messages as f64 / wall,
            percentile(l, 50.0),
            percentile(l, 99.0),
            percentile(l, 100.0),
        );
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

/// Publishes messages `0..messages`, `in_flight` at a time, each through
/// `publish` (which returns once the broker confirmed).
async fn drive<F, Fut>(load: &Load, publish: F) -> anyhow::Result<Timing>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let (messages, in_flight) = (load.messages, load.in_flight);
    let started = Instant::now();
    let mut confirmations = futures_util::stream::iter(0..messages)
        .map(|n| {
            let publication = publish(n);
            async move {
                let sent = Instant::now();
                publication.await?;
                anyhow::Ok((sent, Instant::now()))
            }
        })
        .buffer_unordered(in_flight);
    let mut timing = Timing {
        started,
        first: Instant::now() + Duration::from_secs(86_400),
        last: started,
        latencies_us: Vec::with_capacity(messages as usize),
    };
    while let Some(confirmation) = confirmations.next().await {
        let (sent, confirmed) = confirmation?;
        timing.first = timing.first.min(confirmed);
        timing.last = timing.last.max(confirmed);
        timing
            .latencies_us
            .push((confirmed - sent).as_micros() as u64);
    }
    Ok(timing)
}

async fn jetstream(args: &Args) -> anyhow::Result<async_nats::jetstream::Context> {
    let client = async_nats::ConnectOptions::new()
        .name("outboxbench")
        .connection_timeout(Duration::from_secs(5))
        .connect(args.nats_url.as_str())
        .await
        .with_context(|| format!("connecting to {}", args.nats_url))?;
    Ok(async_nats::jetstream::new(client))
}

async fn baseline_nats(args: &Args, names: &Names<'_>, load: Load) -> anyhow::Result<Timing> {
    use async_nats::jetstream::stream;
    let js = jetstream(args).await?;
    // The stream the receiver's publisher makes: file storage, the default
    // 2-minute duplicate window.
    js.get_or_create_stream(stream::Config {
        name: names.stream().to_owned(),
        subjects: vec![format!("{}.>", names.0)],
        duplicate_window: Duration::from_secs(120),
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .context("creating the baseline's stream")?;
    let subject = names.subject("baseline");
    let (js, subject) = (&js, &subject);
    drive(&load, |n| {
        let body = load.body.clone();
        async move {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(
                async_nats::header::NATS_MESSAGE_ID,
                format!("baseline:{n}").as_str(),
            );
            headers.insert("Content-Type", CLOUDEVENTS_JSON);
            let ack = js
                .publish_with_headers(subject.clone(), headers, body)
                .await?
                .await?;
            if ack.duplicate {
                bail!("JetStream called baseline:{n} a duplicate");
            }
            Ok(())
        }
    })
    .await
}

async fn rabbitmq(args: &Args) -> anyhow::Result<lapin::Connection> {
    let properties = lapin::ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio::current())
        .with_connection_name("outboxbench".into());
    lapin::Connection::connect(&args.amqp_url, properties)
        .await
        .context("connecting to RabbitMQ")
}

async fn baseline_rabbitmq(args: &Args, names: &Names<'_>, load: Load) -> anyhow::Result<Timing> {
    use lapin::options::{
        BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
        QueueDeclareOptions,
    };
    use lapin::publisher_confirm::Confirmation;
    use lapin::types::FieldTable;
    let connection = rabbitmq(args).await?;
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    // The topology the receiver's publisher declares: a durable topic
    // exchange, a durable queue bound to everything.
    let (exchange, queue) = (names.exchange(), names.queue());
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    channel
        .exchange_declare(
            &exchange,
            lapin::ExchangeKind::Topic,
            durable,
            FieldTable::default(),
        )
        .await?;
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(&queue, durable, FieldTable::default())
        .await?;
    channel
        .queue_bind(
            &queue,
            &exchange,
            "#",
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let routing_key = names.subject("baseline");
    let (channel, exchange, routing_key) = (&channel, &exchange, &routing_key);
    let timing = drive(&load, |n| {
        let body = load.body.clone();
        async move {
            let properties = lapin::BasicProperties::default()
                .with_delivery_mode(2)
                .with_message_id(format!("baseline:{n}").into())
                .with_content_type(CLOUDEVENTS_JSON.into());
            let options = BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            };
            let confirmation = channel
                .basic_publish(exchange, routing_key, options, &body, properties)
                .await?
                .await?;
            match confirmation {
                Confirmation::Ack(None) => Ok(()),
                other => bail!("RabbitMQ did not ack baseline:{n}: {other:?}"),
            }
        }
    })
    .await;
    let _ = connection.close(200, "done").await;
    timing
}

async fn redis_connection(args: &Args) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(args.redis_url.as_str())?;
    // Longer than the consumer's blocking reads (at most 1 s each).
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(10)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .context("connecting to Redis")
}

async fn baseline_redis(args: &Args, names: &Names<'_>, load: Load) -> anyhow::Result<Timing> {
    let conn = redis_connection(args).await?;
    let script = redis::Script::new(GUARDED_XADD);
    let (stream, markers) = (names.redis_stream("baseline"), names.marker_prefix());
    // The receiver's default marker TTL (72 h), no MAXLEN.
    let ttl_ms: u64 = 72 * 3600 * 1000;
    let (script, stream, markers) = (&script, &stream, &markers);
    drive(&load, |n| {
        let (body, mut conn) = (load.body.clone(), conn.clone());
        async move {
            let id = format!("baseline:{n}");
            let (added, _entry) = script
                .key(format!("{markers}{id}"))
                .key(stream)
                .arg(ttl_ms)
                .arg(0)
                .arg(&id)
                .arg(CLOUDEVENTS_JSON)
                .arg(body.as_ref())
                .invoke_async::<(i64, String)>(&mut conn)
                .await?;
            if added != 1 {
                bail!("the script called {id} a duplicate");
            }
            Ok(())
        }
    })
    .await
}

// ------------------------------------------------------------- consume

/// What a consumer reads, and until when.
struct From<'a> {
    names: &'a Names<'a>,
    endpoint: &'a str,
    limits: Limits,
}

struct Limits {
    expect: u64,
    idle: Duration,
    deadline: Instant,
}

impl Limits {
    /// How long to wait for the next message; `None`: stop now.
    fn wait(&self, arrivals: &Arrivals) -> Option<Duration> {
        let now = Instant::now();
        if now >= self.deadline {
            return None;
        }
        // Once everything expected is here, only a short quiet spell for
        // any repeat right behind it.
        let idle = if self.expect > 0 && arrivals.ids.len() as u64 >= self.expect {
            Duration::from_millis(300).min(self.idle)
        } else {
            self.idle
        };
        Some(match arrivals.last {
            Some(last) if now >= last + idle => return None,
            Some(last) => (last + idle - now).min(self.deadline - now),
            None => self.deadline - now,
        })
    }
}

/// Every message that arrived: per id, how many times and the latency of
/// its first arrival.
#[derive(Default)]
struct Arrivals {
    ids: HashMap<String, (u32, Option<i64>)>,
    received: u64,
    /// Messages without an id, or whose body has no readable `time`.
    unreadable: u64,
    last: Option<Instant>,
}

impl Arrivals {
    fn arrived(&mut self, id: Option<String>, body: &[u8]) {
        let now = chrono::Utc::now();
        self.received += 1;
        self.last = Some(Instant::now());
        let envelope: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let field = |name: &str| {
            envelope
                .as_ref()
                .and_then(|e| e.get(name))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        let latency = field("time")
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
            .map(|time| (now - time.with_timezone(&chrono::Utc)).num_microseconds())
            .map(|us| us.unwrap_or(i64::MAX).max(0));
        let Some(id) = id.or_else(|| field("id")) else {
            self.unreadable += 1;
            return;
        };
        if latency.is_none() {
            self.unreadable += 1;
        }
        self.ids
            .entry(id)
            .and_modify(|(count, _)| *count += 1)
            .or_insert((1, latency));
    }

    fn write_ids(&self, path: &PathBuf) -> anyhow::Result<()> {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        for (id, (count, _)) in &self.ids {
            writeln!(out, "{id} {count}")?;
        }
        out.flush()?;
        Ok(())
    }

    fn report(&self) {
        let mut latencies: Vec<u64> = self
            .ids
            .values()
            .filter_map(|(_, l)| l.map(|us| us as u64))
            .collect();
        latencies.sort_unstable();
        let repeated = self.ids.values().filter(|(count, _)| *count > 1).count();
        println!(
            "RESULT received={} distinct={} repeated_ids={repeated} unreadable={} p50_ms={:.3} p90_ms={:.3} p99_ms={:.3} max_ms={:.3}",
            self.received,
            self.ids.len(),
            self.unreadable,
            percentile(&latencies, 50.0),
            percentile(&latencies, 90.0),
            percentile(&latencies, 99.0),
            percentile(&latencies, 100.0),
        );
    }
}

/// Retries `attempt` every 200 ms until it succeeds or the deadline passes
/// (the stream or queue is made by the receiver's first publication).
async fn until_ready<T, Fut>(
    deadline: Instant,
    what: &str,
    attempt: impl Fn() -> Fut,
) -> anyhow::Result<T>
where
    Fut: Future<Output = anyhow::Result<T>>,
{
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) if Instant::now() >= deadline => {
                return Err(error.context(format!("{what} never appeared")));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn consume_nats(args: &Args, from: &From<'_>, arrivals: &mut Arrivals) -> anyhow::Result<()> {
    let (names, endpoint, limits) = (from.names, from.endpoint, &from.limits);
    use async_nats::jetstream::consumer::{DeliverPolicy, pull};
    let js = jetstream(args).await?;
    let stream = until_ready(limits.deadline, "the stream", || async {
        Ok(js.get_stream(names.stream()).await?)
    })
    .await?;
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: format!("{}.{endpoint}.>", names.0),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    while let Some(wait) = limits.wait(arrivals) {
        match tokio::time::timeout(wait, messages.next()).await {
            Ok(Some(message)) => {
                let message = message?;
                let id = message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
                    .map(|v| v.as_str().to_owned());
                arrivals.arrived(id, &message.payload);
            }
            Ok(None) => break,
            Err(_) => {}
        }
    }
    Ok(())
}

async fn consume_rabbitmq(
    args: &Args,
    from: &From<'_>,
    arrivals: &mut Arrivals,
) -> anyhow::Result<()> {
    let (names, endpoint, limits) = (from.names, from.endpoint, &from.limits);
    use lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
    use lapin::types::FieldTable;
    let connection = rabbitmq(args).await?;
    let channel = connection.create_channel().await?;
    let queue = names.queue();
    // Passive: the queue is the receiver's publisher's to declare.
    until_ready(limits.deadline, "the queue", || async {
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let probe = connection.create_channel().await?;
        probe
            .queue_declare(&queue, passive, FieldTable::default())
            .await?;
        let _ = probe.close(200, "found").await;
        Ok(())
    })
    .await?;
    let no_ack = BasicConsumeOptions {
        no_ack: true,
        ..BasicConsumeOptions::default()
    };
    let mut consumer = channel
        .basic_consume(&queue, "outboxbench", no_ack, FieldTable::default())
        .await?;
    // The queue takes everything of the exchange; only this endpoint's
    // routing keys count.
    let prefix = format!("{}.{endpoint}.", names.0);
    while let Some(wait) = limits.wait(arrivals) {
        match tokio::time::timeout(wait, consumer.next()).await {
            Ok(Some(delivery)) => {
                let delivery = delivery?;
                if delivery.routing_key.as_str().starts_with(&prefix) {
                    let id = delivery
                        .properties
                        .message_id()
                        .as_ref()
                        .map(|s| s.to_string());
                    arrivals.arrived(id, &delivery.data);
                }
            }
            Ok(None) => break,
            Err(_) => {}
        }
    }
    let _ = connection.close(200, "done").await;
    Ok(())
}

/// `XREAD`'s answer: per stream, its entries with their fields and values.
type XreadReply = Option<Vec<(String, Vec<(String, Vec<Vec<u8>>)>)>>;

async fn consume_redis(
    args: &Args,
    from: &From<'_>,
    arrivals: &mut Arrivals,
) -> anyhow::Result<()> {
    let (names, endpoint, limits) = (from.names, from.endpoint, &from.limits);
    // A connection of its own: a blocking read holds it.
    let mut conn = redis_connection(args).await?;
    let stream = names.redis_stream(endpoint);
    let mut after = "0-0".to_owned();
    while let Some(wait) = limits.wait(arrivals) {
        let block_ms = wait.as_millis().clamp(1, 1000) as u64;
        let reply: XreadReply = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1000)
            .arg("BLOCK")
            .arg(block_ms)
            .arg("STREAMS")
            .arg(&stream)
            .arg(&after)
            .query_async(&mut conn)
            .await?;
        for (_, entries) in reply.unwrap_or_default() {
            for (entry, fields) in entries {
                let field = |name: &str| {
                    fields
                        .chunks(2)
                        .find(|pair| pair[0] == name.as_bytes())
                        .and_then(|pair| pair.get(1))
                };
                let id = field("id").map(|v| String::from_utf8_lossy(v).into_owned());
                arrivals.arrived(id, field("data").map_or(&[][..], |v| v.as_slice()));
                after = entry;
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------- cleanup

async fn cleanup_nats(args: &Args, names: &Names<'_>) -> anyhow::Result<()> {
    let js = jetstream(args).await?;
    // Absent already is as good.
    let _ = js.delete_stream(names.stream()).await;
    Ok(())
}

async fn cleanup_rabbitmq(args: &Args, names: &Names<'_>) -> anyhow::Result<()> {
    use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
    let connection = rabbitmq(args).await?;
    // A failed delete closes the channel: one channel each.
    let channel = connection.create_channel().await?;
    let _ = channel
        .queue_delete(&names.queue(), QueueDeleteOptions::default())
        .await;
    let channel = connection.create_channel().await?;
    let _ = channel
        .exchange_delete(&names.exchange(), ExchangeDeleteOptions::default())
        .await;
    let _ = connection.close(200, "done").await;
    Ok(())
}

async fn cleanup_redis(args: &Args, names: &Names<'_>) -> anyhow::Result<()> {
    let mut conn = redis_connection(args).await?;
    let pattern = format!("{}*", names.0);
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        if !keys.is_empty() {
            redis::cmd("DEL")
                .arg(&keys)
                .query_async::<i64>(&mut conn)
                .await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}
