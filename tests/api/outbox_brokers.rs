//! The outbox end to end, with each real broker and on both backends:
//! signed deliveries go in over HTTP, the receiver's own background relay
//! publishes, and what landed is read back with the broker's own client.
//!
//! - A delivery lands once as a CloudEvents envelope, and a storm of 64
//!   copies of one delivery gives one message.
//! - A broker outage under load (the connection cut by a proxy, 10 s by the
//!   injected clock) loses nothing: every delivery is still acknowledged
//!   and committed, the outbox holds what could not go out, and once the
//!   broker is back everything is published — once per id on JetStream and
//!   Redis, and with every id present on RabbitMQ.

use crate::brokers::cut_proxy::CutProxy;
use crate::brokers::support::{self, Landed, TestKeys, TestQueue, TestStream};
use crate::helpers::{Backend, TestApp, payment};
use crate::outbox::publications;
use futures_util::StreamExt;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Longer than anything here may take: a test that hits it found a hang
/// or a lost publication.
const DEADLINE: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
enum Kind {
    Nats,
    Rabbitmq,
    Redis,
}

/// One broker as a test sees it: the publisher's configuration and what
/// landed so far.
enum Bus {
    Nats(support::Nats, TestStream),
    /// RabbitMQ's messages are consumed when read: the ones read so far
    /// are kept.
    Rabbitmq(support::Rabbitmq, TestQueue, Vec<Landed>),
    Redis(redis::aio::MultiplexedConnection, TestKeys),
}

impl Bus {
    async fn open(kind: Kind) -> Option<Bus> {
        Some(match kind {
            Kind::Nats => Bus::Nats(support::nats().await?, TestStream::new()),
            Kind::Rabbitmq => {
                Bus::Rabbitmq(support::rabbitmq().await?, TestQueue::new(), Vec::new())
            }
            Kind::Redis => Bus::Redis(support::redis().await?, TestKeys::new()),
        })
    }

    fn direct(&self) -> &'static str {
        match self {
            Bus::Nats(..) => support::NATS_ADDR,
            Bus::Rabbitmq(..) => support::RABBITMQ_ADDR,
            Bus::Redis(..) => support::REDIS_ADDR,
        }
    }

    /// `[publishers.bus]` reaching the broker at `addr`; failed publications
    /// come back after 1 s, then 2 s, at most 4 s (by the app's clock).
    fn publisher_toml(&self, addr: &str) -> String {
        let common = "retry_backoff = \"1s\"\nretry_backoff_max = \"4s\"\n";
        match self {
            Bus::Nats(_, stream) => format!(
                "[publishers.bus]\nkind = \"nats\"\nurl = \"nats://{addr}\"\nsubject = \"{}.{{endpoint}}.{{event_type}}\"\nstream = \"{}\"\nack_timeout = \"2s\"\n{common}",
                stream.prefix, stream.name
            ),
            Bus::Rabbitmq(_, queue, _) => format!(
                "[publishers.bus]\nkind = \"rabbitmq\"\nurl = \"{}\"\nexchange = \"{}\"\ndeclare_exchange = true\nqueue = \"{}\"\nconfirm_timeout = \"2s\"\n{common}",
                support::rabbitmq_url(addr),
                queue.exchange,
                queue.queue
            ),
            Bus::Redis(_, keys) => format!(
                "[publishers.bus]\nkind = \"redis\"\nurl = \"redis://{addr}\"\nstream = \"{}:{{endpoint}}\"\nmarker_prefix = \"{}\"\ntimeout = \"2s\"\n{common}",
                keys.prefix, keys.marker_prefix
            ),
        }
    }

    /// Everything that landed for this test so far, oldest first.
    async fn landed(&mut self) -> Vec<Landed> {
        match self {
            Bus::Nats(nats, stream) => match nats.js.get_stream(&stream.name).await {
                Ok(_) => nats.stream_messages(&stream.name).await,
                // Made by the publisher at its first connect.
                Err(_) => Vec::new(),
            },
            Bus::Rabbitmq(rabbitmq, queue, seen) => {
                seen.extend(rabbitmq.drain(&queue.queue).await);
                seen.clone()
            }
            Bus::Redis(conn, keys) => support::xrange(conn, &format!("{}:shop", keys.prefix)).await,
        }
    }
}

async fn spawn(backend: Backend, publisher: &str) -> Option<TestApp> {
    TestApp::builder(backend)
        .top_level("outbox_poll = \"100ms\"")
        .handler_name("publish:bus")
        .endpoints_toml(publisher)
        .spawn_if_available()
        .await
}

/// Waits (in real time: the relay runs in the background) until every
/// publication is sent.
async fn all_sent(app: &TestApp, expected: usize) {
    let started = Instant::now();
    loop {
        let rows = publications(app).await;
        let sent = rows.iter().filter(|r| r.state == "sent").count();
        if rows.len() == expected && sent == expected {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{sent} of {} publications sent ({expected} expected): {:?}",
            rows.len(),
            rows.iter()
                .filter(|r| r.state != "sent")
                .take(3)
                .collect::<Vec<_>>()
        );
        // Rows waiting out a backoff are due by the app's clock.
        app.clock.advance(Duration::from_millis(500));
        app.webhooks.outbox_signal().wake_local();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many times each message id landed.
fn id_counts(landed: &[Landed]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for message in landed {
        let id = message.id.clone().unwrap_or_default();
        *counts.entry(id).or_insert(0) += 1;
    }
    counts
}

async fn a_delivery_lands_once_and_a_storm_gives_one_message(kind: Kind, backend: Backend) {
    let Some(mut bus) = Bus::open(kind).await else {
        return;
    };
    let Some(app) = spawn(backend, &bus.publisher_toml(bus.direct())).await else {
        return;
    };
    let body = payment("pay_bus_1", 4200);
    assert_eq!(app.deliver("msg_bus_1", &body).await.status(), 200);
    let storm = payment("pay_bus_storm", 100);
    let answers =
        futures_util::future::join_all((0..64).map(|_| app.deliver("msg_bus_storm", &storm))).await;
    assert!(
        answers
            .iter()
            .all(|a| matches!(a.status().as_u16(), 200 | 409))
    );
    all_sent(&app, 2).await;

    let landed = bus.landed().await;
    let counts = id_counts(&landed);
    assert_eq!(
        counts,
        BTreeMap::from([
            ("shop:msg_bus_1".to_owned(), 1),
            ("shop:msg_bus_storm".to_owned(), 1)
        ]),
        "{kind:?}"
    );
    // The consumer's view: a CloudEvents envelope around the verified body.
    let first = landed
        .iter()
        .find(|m| m.id.as_deref() == Some("shop:msg_bus_1"))
        .unwrap();
    assert_eq!(
        first.content_type.as_deref(),
        Some("application/cloudevents+json")
    );
    let event: Value = serde_json::from_slice(&first.body).unwrap();
    assert_eq!(event["specversion"], "1.0");
    assert_eq!(event["id"], "shop:msg_bus_1");
    assert_eq!(event["type"], "standard-webhooks.payment.succeeded");
    assert_eq!(event["source"], "/webhooks/shop");
    assert_eq!(
        event["data"],
        serde_json::from_slice::<Value>(&body).unwrap()
    );
    if let Bus::Rabbitmq(..) = bus {
        assert_eq!(first.delivery_mode, Some(2), "persistent");
    }
    let rows = publications(&app).await;
    assert!(
        rows.iter()
            .all(|r| r.confirmation.as_deref() == Some("published")),
        "{rows:?}"
    );
}

async fn an_outage_under_load_loses_nothing(kind: Kind, backend: Backend) {
    let Some(mut bus) = Bus::open(kind).await else {
        return;
    };
    let proxy = CutProxy::start(bus.direct()).await;
    let Some(app) = spawn(backend, &bus.publisher_toml(&proxy.addr().to_string())).await else {
        return;
    };
    let ids: Vec<String> = (0..60).map(|n| format!("msg_out_{n:03}")).collect();
    let deliver_all = |ids: &[String]| {
        let ids = ids.to_vec();
        let app = &app;
        async move {
            futures_util::stream::iter(ids)
                .map(|id| async move {
                    let status = app
                        .deliver(&id, &payment(&format!("pay_{id}"), 10))
                        .await
                        .status();
                    (id, status.as_u16())
                })
                .buffer_unordered(8)
                .collect::<Vec<_>>()
                .await
        }
    };
    // Before the outage: published as they come.
    let before = deliver_all(&ids[..10]).await;
    assert!(before.iter().all(|(_, s)| *s == 200), "{before:?}");
    all_sent(&app, 10).await;

    // The broker goes away mid-load; deliveries are still acknowledged and
    // committed, and the outbox keeps what could not go out.
    proxy.cut();
    let during = deliver_all(&ids[10..50]).await;
    assert!(during.iter().all(|(_, s)| *s == 200), "{during:?}");
    let started = Instant::now();
    loop {
        let rows = publications(&app).await;
        assert_eq!(
            rows.len(),
            50,
            "every acknowledged delivery has its publication"
        );
        let tried = rows
            .iter()
            .filter(|r| r.state == "pending" && r.attempts > 0)
            .count();
        if tried > 0 {
            assert!(
                rows.iter().all(|r| r.state != "failed"),
                "no give-up by default"
            );
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the relay never tried during the outage"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Ten seconds of outage by the app's clock: retries come and fail.
    for _ in 0..10 {
        app.clock.advance(Duration::from_secs(1));
        app.webhooks.outbox_signal().wake_local();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let unsent = publications(&app)
        .await
        .iter()
        .filter(|r| r.state != "sent")
        .count();
    assert!(
        unsent >= 40,
        "the outage's publications waited: {unsent} unsent"
    );

    // The broker is back, and load goes on.
    proxy.restore();
    let after = deliver_all(&ids[50..]).await;
    assert!(after.iter().all(|(_, s)| *s == 200), "{after:?}");
    all_sent(&app, 60).await;

    let landed = bus.landed().await;
    let counts = id_counts(&landed);
    let expected: BTreeSet<String> = ids.iter().map(|id| format!("shop:{id}")).collect();
    assert_eq!(
        counts.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "{kind:?}: every id landed"
    );
    match kind {
        // The broker drops a copy whose ack was lost with the connection.
        Kind::Nats | Kind::Redis => {
            assert!(
                counts.values().all(|n| *n == 1),
                "{kind:?}: once per id: {counts:?}"
            )
        }
        // A copy can land twice, with the same message_id to deduplicate on.
        Kind::Rabbitmq => assert!(counts.values().all(|n| *n >= 1)),
    }
}

macro_rules! per_broker_and_backend {
    ($($scenario:ident),*) => {$(
        mod $scenario {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn nats_sqlite() { super::$scenario(Kind::Nats, Backend::Sqlite).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn nats_postgres() { super::$scenario(Kind::Nats, Backend::Postgres).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn rabbitmq_sqlite() { super::$scenario(Kind::Rabbitmq, Backend::Sqlite).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn rabbitmq_postgres() { super::$scenario(Kind::Rabbitmq, Backend::Postgres).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis_sqlite() { super::$scenario(Kind::Redis, Backend::Sqlite).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis_postgres() { super::$scenario(Kind::Redis, Backend::Postgres).await }
        }
    )*};
}

per_broker_and_backend!(
    a_delivery_lands_once_and_a_storm_gives_one_message,
    an_outage_under_load_loses_nothing
);
