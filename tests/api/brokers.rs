//! The three broker clients against the real services, through the
//! library's API: settings from TOML, `BrokerSettings::client()`, and
//! `Broker::publish`. What landed is read back with the brokers' own
//! clients (`tests/support/brokers.rs`); outages are made with a proxy
//! that cuts the connections (`tests/support/cut_proxy.rs`), never by
//! stopping the shared services.

#[path = "../support/cut_proxy.rs"]
pub(crate) mod cut_proxy;
#[path = "../support/brokers.rs"]
pub(crate) mod support;

use cut_proxy::CutProxy;
use futures_util::future::join_all;
use idempotent_receiver::publishers::{
    Broker, BrokerSettings, CLOUDEVENTS_JSON, Confirmed, Message, NatsSettings, PublishError,
    RabbitmqSettings, RedisSettings,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{Landed, TestKeys, TestQueue, TestStream};

/// Longer than any publication may take: a test that hits it found a hang.
const NO_HANG: Duration = Duration::from_secs(20);

fn no_env(_: &str) -> Option<String> {
    None
}

fn nats_settings(text: &str) -> BrokerSettings {
    BrokerSettings::Nats(NatsSettings::from_toml(text.parse().unwrap(), &no_env).unwrap())
}

fn rabbitmq_settings(text: &str) -> BrokerSettings {
    BrokerSettings::Rabbitmq(RabbitmqSettings::from_toml(text.parse().unwrap(), &no_env).unwrap())
}

fn redis_settings(text: &str) -> BrokerSettings {
    BrokerSettings::Redis(RedisSettings::from_toml(text.parse().unwrap(), &no_env).unwrap())
}

/// A CloudEvents envelope as the relay would send it.
fn envelope(id: &str) -> Vec<u8> {
    serde_json::json!({
        "specversion": "1.0",
        "id": id,
        "source": "/webhooks/shop",
        "type": "com.example.invoice.paid",
        "datacontenttype": "application/json",
        "data": { "invoice": id, "amount": 4200 },
    })
    .to_string()
    .into_bytes()
}

/// A delivery's message id, unique per call.
fn message_id() -> String {
    format!("shop:{}", uuid::Uuid::new_v4())
}

/// Publishes, failing the test if the broker leaves it hanging.
async fn publish(
    broker: &dyn Broker,
    id: &str,
    destination: &str,
    body: &[u8],
) -> Result<Confirmed, PublishError> {
    let message = Message {
        id,
        destination,
        body,
    };
    tokio::time::timeout(NO_HANG, broker.publish(&message))
        .await
        .expect("publish returned (no hang)")
}

/// Publishes until the broker confirms (the client reconnecting by
/// itself), and says how long that took.
async fn publish_until_confirmed(
    broker: &dyn Broker,
    id: &str,
    destination: &str,
    body: &[u8],
) -> (Confirmed, Duration) {
    let started = Instant::now();
    loop {
        match publish(broker, id, destination, body).await {
            Ok(confirmed) => return (confirmed, started.elapsed()),
            Err(e) if started.elapsed() < Duration::from_secs(45) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("still failing 45 s after the outage: {e}"),
        }
    }
}

fn assert_landed(landed: &Landed, id: &str, destination: &str, body: &[u8]) {
    assert_eq!(landed.id.as_deref(), Some(id));
    assert_eq!(landed.content_type.as_deref(), Some(CLOUDEVENTS_JSON));
    assert_eq!(landed.body, body);
    assert_eq!(landed.destination, destination);
}

// ---------------------------------------------------------------- NATS

fn jetstream_settings(stream: &TestStream, extra: &str) -> BrokerSettings {
    nats_settings(&format!(
        "subject = \"{}.{{endpoint}}.{{event_type}}\"\nstream = \"{}\"\n{extra}",
        stream.prefix, stream.name
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jetstream_publication_is_acked_and_lands_with_its_id_content_type_and_body() {
    let Some(nats) = support::nats().await else {
        return;
    };
    let stream = TestStream::new();
    let settings = jetstream_settings(&stream, "");
    let broker = settings.client();
    let subject = settings
        .destination()
        .render("shop", "stripe", Some("invoice.paid"));
    assert_eq!(subject, format!("{}.shop.invoice.paid", stream.prefix));
    let (id, body) = (message_id(), envelope("evt_1"));

    let confirmed = publish(broker.as_ref(), &id, &subject, &body).await;

    assert_eq!(confirmed.unwrap(), Confirmed::Published);
    let landed = nats.stream_messages(&stream.name).await;
    assert_eq!(landed.len(), 1, "{landed:?}");
    assert_landed(&landed[0], &id, &subject, &body);
    assert_eq!(nats.subject_messages(&stream.name, &subject).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_id_twice_lands_once_on_jetstream_and_the_second_is_a_duplicate() {
    let Some(nats) = support::nats().await else {
        return;
    };
    let stream = TestStream::new();
    let broker = jetstream_settings(&stream, "").client();
    let subject = format!("{}.shop.invoice.paid", stream.prefix);
    let (id, body) = (message_id(), envelope("evt_2"));

    let first = publish(broker.as_ref(), &id, &subject, &body)
        .await
        .unwrap();
    let second = publish(broker.as_ref(), &id, &subject, &body)
        .await
        .unwrap();
    let other = publish(broker.as_ref(), &message_id(), &subject, &body)
        .await
        .unwrap();

    assert_eq!(
        (first, second, other),
        (
            Confirmed::Published,
            Confirmed::Duplicate,
            Confirmed::Published
        )
    );
    let landed = nats.stream_messages(&stream.name).await;
    assert_eq!(landed.len(), 2, "{landed:?}");
    assert_eq!(
        landed
            .iter()
            .filter(|m| m.id.as_deref() == Some(&*id))
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_publications_of_one_id_land_once_on_jetstream() {
    let Some(nats) = support::nats().await else {
        return;
    };
    let stream = TestStream::new();
    let broker = jetstream_settings(&stream, "").client();
    let subject = format!("{}.shop.invoice.paid", stream.prefix);
    let (id, body) = (message_id(), envelope("evt_storm"));
    // Connected first, so that the 64 race on the stream, not on the connect.
    publish(broker.as_ref(), &message_id(), &subject, &body)
        .await
        .unwrap();

    let results = storm(&broker, &id, &subject, &body).await;

    let published = results
        .iter()
        .filter(|r| **r == Confirmed::Published)
        .count();
    assert_eq!(published, 1, "{results:?}");
    let landed = nats.stream_messages(&stream.name).await;
    assert_eq!(
        landed
            .iter()
            .filter(|m| m.id.as_deref() == Some(&*id))
            .count(),
        1
    );
    assert_eq!(landed.len(), 2);
}

/// 64 publications of one id at once on one client; every one must be
/// confirmed.
async fn storm(broker: &Arc<dyn Broker>, id: &str, subject: &str, body: &[u8]) -> Vec<Confirmed> {
    let tasks = (0..64).map(|_| {
        let (broker, id, subject, body) = (
            broker.clone(),
            id.to_owned(),
            subject.to_owned(),
            body.to_vec(),
        );
        tokio::spawn(async move { publish(broker.as_ref(), &id, &subject, &body).await })
    });
    join_all(tasks)
        .await
        .into_iter()
        .map(|joined| joined.expect("the task ran").expect("every copy confirmed"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_no_stream_takes_is_refused_at_once_not_left_hanging() {
    let Some(_nats) = support::nats().await else {
        return;
    };
    let prefix = support::unique("irtest.nostream.");
    let broker = nats_settings(&format!(
        "subject = \"{prefix}.{{endpoint}}\"\nack_timeout = \"3s\""
    ))
    .client();
    let subject = format!("{prefix}.shop");
    // The first publication also connects.
    publish(broker.as_ref(), &message_id(), &subject, b"{}")
        .await
        .unwrap_err();

    let started = Instant::now();
    let result = publish(broker.as_ref(), &message_id(), &subject, b"{}").await;

    assert!(
        matches!(result, Err(PublishError::Refused(_))),
        "{result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "no responders should answer at once, took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_outage_fails_publications_within_the_timeout_and_the_same_client_publishes_after_it()
 {
    let Some(nats) = support::nats().await else {
        return;
    };
    let proxy = CutProxy::start(support::NATS_ADDR).await;
    let stream = TestStream::new();
    let broker = jetstream_settings(
        &stream,
        &format!("url = \"nats://{}\"\nack_timeout = \"1s\"", proxy.addr()),
    )
    .client();
    let subject = format!("{}.shop.invoice.paid", stream.prefix);
    let body = envelope("evt_outage");
    let before = message_id();
    assert_eq!(
        publish(broker.as_ref(), &before, &subject, &body)
            .await
            .unwrap(),
        Confirmed::Published
    );

    proxy.cut();
    let started = Instant::now();
    let during = publish(broker.as_ref(), &message_id(), &subject, &body).await;
    let failed_after = started.elapsed();
    proxy.restore();
    let after = message_id();
    let (confirmed, _) = publish_until_confirmed(broker.as_ref(), &after, &subject, &body).await;

    assert!(
        matches!(during, Err(PublishError::Unavailable(_))),
        "{during:?}"
    );
    assert!(
        failed_after < Duration::from_secs(3),
        "took {failed_after:?}"
    );
    assert_eq!(confirmed, Confirmed::Published);
    assert!(proxy.accepted() >= 2, "the client connected again");
    let ids: Vec<_> = nats
        .stream_messages(&stream.name)
        .await
        .into_iter()
        .filter_map(|m| m.id)
        .collect();
    assert!(ids.contains(&before) && ids.contains(&after), "{ids:?}");
}

// ------------------------------------------------------------ RabbitMQ

/// A topic exchange and a queue bound to all of it, declared by the
/// publisher at connect.
fn rabbitmq_topology(queue: &TestQueue, extra: &str) -> BrokerSettings {
    rabbitmq_settings(&format!(
        "exchange = \"{}\"\ndeclare_exchange = true\nqueue = \"{}\"\n{extra}",
        queue.exchange, queue.queue
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rabbitmq_publication_is_confirmed_and_lands_persistent_with_its_message_id() {
    let Some(rabbitmq) = support::rabbitmq().await else {
        return;
    };
    let queue = TestQueue::new();
    let settings = rabbitmq_topology(&queue, "");
    let broker = settings.client();
    let routing_key = settings
        .destination()
        .render("shop", "stripe", Some("invoice.paid"));
    assert_eq!(routing_key, "webhooks.shop.invoice.paid");
    let (id, body) = (message_id(), envelope("evt_1"));

    let confirmed = publish(broker.as_ref(), &id, &routing_key, &body).await;

    assert_eq!(confirmed.unwrap(), Confirmed::Published);
    let landed = rabbitmq.drain(&queue.queue).await;
    assert_eq!(landed.len(), 1, "{landed:?}");
    assert_landed(&landed[0], &id, &routing_key, &body);
    assert_eq!(landed[0].delivery_mode, Some(2), "persistent");
    rabbitmq.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_id_twice_is_two_rabbitmq_messages_with_one_message_id() {
    let Some(rabbitmq) = support::rabbitmq().await else {
        return;
    };
    let queue = TestQueue::new();
    let broker = rabbitmq_topology(&queue, "").client();
    let (id, body) = (message_id(), envelope("evt_2"));

    let first = publish(broker.as_ref(), &id, "webhooks.shop.x", &body)
        .await
        .unwrap();
    let second = publish(broker.as_ref(), &id, "webhooks.shop.x", &body)
        .await
        .unwrap();

    assert_eq!(
        (first, second),
        (Confirmed::Published, Confirmed::Published)
    );
    let landed = rabbitmq.drain(&queue.queue).await;
    assert_eq!(landed.len(), 2, "{landed:?}");
    assert!(landed.iter().all(|m| m.id.as_deref() == Some(&*id)));
    rabbitmq.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_rabbitmq_publications_are_each_confirmed_on_one_channel() {
    let Some(rabbitmq) = support::rabbitmq().await else {
        return;
    };
    let queue = TestQueue::new();
    let broker = rabbitmq_topology(&queue, "").client();
    let (id, body) = (message_id(), envelope("evt_storm"));

    let results = storm(&broker, &id, "webhooks.shop.x", &body).await;

    assert!(results.iter().all(|r| *r == Confirmed::Published));
    let landed = rabbitmq.drain(&queue.queue).await;
    assert_eq!(landed.len(), 64);
    assert!(landed.iter().all(|m| m.id.as_deref() == Some(&*id)));
    rabbitmq.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_rabbitmq_message_is_refused() {
    let Some(rabbitmq) = support::rabbitmq().await else {
        return;
    };
    let queue = TestQueue::new();
    // The exchange exists, but no queue is bound to it.
    let broker = rabbitmq_settings(&format!(
        "exchange = \"{}\"\ndeclare_exchange = true",
        queue.exchange
    ))
    .client();
    // The default exchange, to a queue that does not exist.
    let to_nowhere = rabbitmq_settings("").client();

    let unbound = publish(broker.as_ref(), &message_id(), "webhooks.shop.x", b"{}").await;
    let no_queue = publish(to_nowhere.as_ref(), &message_id(), &queue.queue, b"{}").await;

    assert!(
        matches!(&unbound, Err(PublishError::Refused(m)) if m.contains("NO_ROUTE")),
        "{unbound:?}"
    );
    assert!(
        matches!(&no_queue, Err(PublishError::Refused(m)) if m.contains("NO_ROUTE")),
        "{no_queue:?}"
    );
    // The client is still usable after a refusal.
    let declared = rabbitmq_topology(&queue, "").client();
    assert_eq!(
        publish(declared.as_ref(), &message_id(), "webhooks.shop.x", b"{}")
            .await
            .unwrap(),
        Confirmed::Published
    );
    assert!(matches!(
        publish(to_nowhere.as_ref(), &message_id(), &queue.queue, b"{}").await,
        Ok(Confirmed::Published)
    ));
    assert_eq!(rabbitmq.drain(&queue.queue).await.len(), 2);
    rabbitmq.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rabbitmq_outage_fails_publications_within_the_timeout_and_the_same_client_publishes_after_it()
 {
    let Some(rabbitmq) = support::rabbitmq().await else {
        return;
    };
    let proxy = CutProxy::start(support::RABBITMQ_ADDR).await;
    let queue = TestQueue::new();
    let broker = rabbitmq_topology(
        &queue,
        &format!(
            "url = \"{}\"\nconfirm_timeout = \"2s\"",
            support::rabbitmq_url(&proxy.addr().to_string())
        ),
    )
    .client();
    let body = envelope("evt_outage");
    let before = message_id();
    assert_eq!(
        publish(broker.as_ref(), &before, "webhooks.shop.x", &body)
            .await
            .unwrap(),
        Confirmed::Published
    );

    proxy.cut();
    let started = Instant::now();
    let during = publish(broker.as_ref(), &message_id(), "webhooks.shop.x", &body).await;
    let again = publish(broker.as_ref(), &message_id(), "webhooks.shop.x", &body).await;
    let failed_after = started.elapsed();
    proxy.restore();
    let after = message_id();
    let (confirmed, _) =
        publish_until_confirmed(broker.as_ref(), &after, "webhooks.shop.x", &body).await;

    assert!(
        matches!(during, Err(PublishError::Unavailable(_))),
        "{during:?}"
    );
    assert!(
        matches!(again, Err(PublishError::Unavailable(_))),
        "{again:?}"
    );
    assert!(
        failed_after < Duration::from_secs(5),
        "took {failed_after:?}"
    );
    assert_eq!(confirmed, Confirmed::Published);
    assert!(proxy.accepted() >= 2, "the client connected again");
    let ids: Vec<_> = rabbitmq
        .drain(&queue.queue)
        .await
        .into_iter()
        .filter_map(|m| m.id)
        .collect();
    assert!(ids.contains(&before) && ids.contains(&after), "{ids:?}");
    rabbitmq.close().await;
}

// --------------------------------------------------------------- Redis

fn redis_stream_settings(keys: &TestKeys, extra: &str) -> BrokerSettings {
    redis_settings(&format!(
        "stream = \"{}:{{endpoint}}\"\nmarker_prefix = \"{}\"\n{extra}",
        keys.prefix, keys.marker_prefix
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_publication_is_added_with_its_id_content_type_and_body() {
    let Some(mut conn) = support::redis().await else {
        return;
    };
    let keys = TestKeys::new();
    let settings = redis_stream_settings(&keys, "");
    let broker = settings.client();
    let stream = settings
        .destination()
        .render("shop", "stripe", Some("invoice.paid"));
    assert_eq!(stream, format!("{}:shop", keys.prefix));
    let (id, body) = (message_id(), envelope("evt_1"));

    let confirmed = publish(broker.as_ref(), &id, &stream, &body).await;

    assert_eq!(confirmed.unwrap(), Confirmed::Published);
    let landed = support::xrange(&mut conn, &stream).await;
    assert_eq!(landed.len(), 1, "{landed:?}");
    assert_landed(&landed[0], &id, &stream, &body);
    // The marker holds the entry's id, with the TTL of the settings.
    let marker = format!("{}{id}", keys.marker_prefix);
    let (entry, ttl_ms): (String, i64) = redis::pipe()
        .get(&marker)
        .pttl(&marker)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(entry, landed[0].position);
    assert!(
        ttl_ms > 71 * 3600 * 1000 && ttl_ms <= 72 * 3600 * 1000,
        "{ttl_ms}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_id_twice_is_one_redis_entry_and_the_second_is_a_duplicate() {
    let Some(mut conn) = support::redis().await else {
        return;
    };
    let keys = TestKeys::new();
    let broker = redis_stream_settings(&keys, "").client();
    let stream = format!("{}:shop", keys.prefix);
    let (id, body) = (message_id(), envelope("evt_2"));

    let first = publish(broker.as_ref(), &id, &stream, &body).await.unwrap();
    let second = publish(broker.as_ref(), &id, &stream, b"another body")
        .await
        .unwrap();
    let other = publish(broker.as_ref(), &message_id(), &stream, &body)
        .await
        .unwrap();

    assert_eq!(
        (first, second, other),
        (
            Confirmed::Published,
            Confirmed::Duplicate,
            Confirmed::Published
        )
    );
    let landed = support::xrange(&mut conn, &stream).await;
    assert_eq!(landed.len(), 2, "{landed:?}");
    assert_landed(&landed[0], &id, &stream, &body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_publications_of_one_id_are_one_redis_entry() {
    let Some(mut conn) = support::redis().await else {
        return;
    };
    let keys = TestKeys::new();
    let broker = redis_stream_settings(&keys, "").client();
    let stream = format!("{}:shop", keys.prefix);
    let (id, body) = (message_id(), envelope("evt_storm"));

    let results = storm(&broker, &id, &stream, &body).await;

    let published = results
        .iter()
        .filter(|r| **r == Confirmed::Published)
        .count();
    assert_eq!(published, 1, "{results:?}");
    let landed = support::xrange(&mut conn, &stream).await;
    assert_eq!(landed.len(), 1, "{landed:?}");
    assert_eq!(landed[0].id.as_deref(), Some(&*id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_marker_expires_after_its_ttl_and_the_id_is_added_again() {
    let Some(mut conn) = support::redis().await else {
        return;
    };
    let keys = TestKeys::new();
    let broker = redis_stream_settings(&keys, "dedup_ttl = \"300ms\"").client();
    let stream = format!("{}:shop", keys.prefix);
    let (id, body) = (message_id(), envelope("evt_ttl"));

    let first = publish(broker.as_ref(), &id, &stream, &body).await.unwrap();
    let within_ttl = publish(broker.as_ref(), &id, &stream, &body).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let after_ttl = publish(broker.as_ref(), &id, &stream, &body).await.unwrap();

    assert_eq!(
        (first, within_ttl, after_ttl),
        (
            Confirmed::Published,
            Confirmed::Duplicate,
            Confirmed::Published
        )
    );
    assert_eq!(support::xrange(&mut conn, &stream).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stream_is_trimmed_to_about_maxlen() {
    let Some(mut conn) = support::redis().await else {
        return;
    };
    let keys = TestKeys::new();
    let broker = redis_stream_settings(&keys, "maxlen = 10").client();
    let stream = format!("{}:shop", keys.prefix);

    for _ in 0..300 {
        publish(broker.as_ref(), &message_id(), &stream, b"{}")
            .await
            .unwrap();
    }

    // `MAXLEN ~` trims whole nodes (100 entries by default), so the stream
    // keeps somewhat more than 10 entries, but far fewer than 300.
    let len = support::xrange(&mut conn, &stream).await.len();
    assert!((10..300).contains(&len), "{len}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_fails_publications_within_the_timeout_and_the_same_client_publishes_after_it()
 {
    let Some(mut conn) = support::redis().await else {
        return;
    };
    let proxy = CutProxy::start(support::REDIS_ADDR).await;
    let keys = TestKeys::new();
    let broker = redis_stream_settings(
        &keys,
        &format!("url = \"redis://{}\"\ntimeout = \"1s\"", proxy.addr()),
    )
    .client();
    let stream = format!("{}:shop", keys.prefix);
    let body = envelope("evt_outage");
    let before = message_id();
    assert_eq!(
        publish(broker.as_ref(), &before, &stream, &body)
            .await
            .unwrap(),
        Confirmed::Published
    );

    proxy.cut();
    let started = Instant::now();
    let during = publish(broker.as_ref(), &message_id(), &stream, &body).await;
    let again = publish(broker.as_ref(), &message_id(), &stream, &body).await;
    let failed_after = started.elapsed();
    proxy.restore();
    let after = message_id();
    let (confirmed, _) = publish_until_confirmed(broker.as_ref(), &after, &stream, &body).await;

    assert!(
        matches!(during, Err(PublishError::Unavailable(_))),
        "{during:?}"
    );
    assert!(
        matches!(again, Err(PublishError::Unavailable(_))),
        "{again:?}"
    );
    assert!(
        failed_after < Duration::from_secs(3),
        "took {failed_after:?}"
    );
    assert_eq!(confirmed, Confirmed::Published);
    assert!(proxy.accepted() >= 2, "the client connected again");
    let ids: Vec<_> = support::xrange(&mut conn, &stream)
        .await
        .into_iter()
        .filter_map(|m| m.id)
        .collect();
    assert!(ids.contains(&before) && ids.contains(&after), "{ids:?}");
}

// ------------------------------------------------------------ settings

#[test]
fn publisher_settings_reject_unknown_keys_by_name() {
    let nats = NatsSettings::from_toml("subjekt = \"a\"".parse().unwrap(), &no_env);
    let rabbitmq = RabbitmqSettings::from_toml("routingkey = \"a\"".parse().unwrap(), &no_env);
    let redis = RedisSettings::from_toml("max_len = 5".parse().unwrap(), &no_env);

    assert!(nats.unwrap_err().contains("`subjekt`"));
    assert!(rabbitmq.unwrap_err().contains("`routingkey`"));
    assert!(redis.unwrap_err().contains("`max_len`"));
}

#[test]
fn publisher_settings_never_print_a_password() {
    let env = |name: &str| match name {
        "NATS_PASSWORD" => Some("nats-pw-4711".to_owned()),
        "AMQP_URL" => Some("amqps://app:amqp-pw-4711@mq.internal/prod".to_owned()),
        "REDIS_URL" => Some("rediss://:redis-pw-4711@cache.internal:6380".to_owned()),
        _ => None,
    };
    let all = [
        BrokerSettings::Nats(
            NatsSettings::from_toml(
                "user = \"app\"\npassword_env = \"NATS_PASSWORD\""
                    .parse()
                    .unwrap(),
                &env,
            )
            .unwrap(),
        ),
        BrokerSettings::Nats(
            NatsSettings::from_toml(
                "url = \"nats://app:nats-pw-4711@h:4222\"".parse().unwrap(),
                &env,
            )
            .unwrap(),
        ),
        BrokerSettings::Rabbitmq(
            RabbitmqSettings::from_toml("url_env = \"AMQP_URL\"".parse().unwrap(), &env).unwrap(),
        ),
        BrokerSettings::Rabbitmq(
            RabbitmqSettings::from_toml(
                "url = \"amqp://app:amqp-pw-4711@h/x\"".parse().unwrap(),
                &env,
            )
            .unwrap(),
        ),
        BrokerSettings::Redis(
            RedisSettings::from_toml("url_env = \"REDIS_URL\"".parse().unwrap(), &env).unwrap(),
        ),
    ];

    for settings in &all {
        let debug = format!("{settings:?}");
        assert!(!debug.contains("pw-4711"), "{debug}");
        assert!(
            debug.contains("***") || debug.contains("redacted"),
            "{debug}"
        );
    }
}

#[tokio::test]
async fn a_client_for_an_unreachable_broker_is_made_and_fails_its_publication_in_time() {
    // Nothing listens on this port: the client is built all the same (it
    // connects lazily), and a publication fails within its timeout.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let all = [
        nats_settings(&format!("url = \"nats://{closed}\"\nack_timeout = \"1s\"")),
        rabbitmq_settings(&format!(
            "url = \"amqp://{closed}/%2f\"\nconfirm_timeout = \"1s\""
        )),
        redis_settings(&format!("url = \"redis://{closed}\"\ntimeout = \"1s\"")),
    ];
    for settings in all {
        let broker = settings.client();
        let started = Instant::now();
        let result = publish(broker.as_ref(), "shop:1", "webhooks.shop.x", b"{}").await;
        assert!(
            matches!(result, Err(PublishError::Unavailable(_))),
            "{}: {result:?}",
            settings.kind()
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{}",
            settings.kind()
        );
    }
}
