//! The outbox's crash window, with each real broker and on both backends:
//! the receiver is `kill -9`ed after the broker has accepted its
//! publications and before the confirmations reached it. A proxy between
//! the receiver and the broker withholds the broker's answers, so the
//! window is hit every time rather than by chance: the test waits until
//! publications are on the broker unconfirmed, kills the receiver, and
//! checks that the database still shows them unsent. After a restart the relay takes
//! them again once their lease has run out and publishes them again.
//!
//! Afterwards: one message per delivery on JetStream (its duplicate window
//! drops the copies, by `Nats-Msg-Id`) and on Redis (the guarded `XADD`),
//! and on RabbitMQ every delivery's `message_id` present — twice, the copy
//! carrying the same id for consumers to deduplicate on.

#[path = "../support/cut_proxy.rs"]
mod cut_proxy;
#[path = "../support/brokers.rs"]
mod support;

use crate::postgres::SharedSchema;
use crate::server::{self, Server};
use crate::{SECRET, SERIAL, Workspace, http_client, say, signer};
use cut_proxy::CutProxy;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use futures_util::StreamExt;
use idempotent_receiver::client;
use idempotent_receiver::store::schema::outbox;
use idempotent_receiver::store::{DatabaseUrl, Store, StoreOptions};
use idempotent_receiver::with_conn;
use std::collections::BTreeMap;
use std::time::Duration;
use support::{Bus, Kind, id_counts};
use tokio::time::Instant;

/// Deliveries sent while the broker's confirmations are withheld.
const N: usize = 40;
const ENDPOINT: &str = "orders";
/// The outbox lease: a row taken by the killed process is due again this
/// long after it was taken.
const OUTBOX_LEASE: Duration = Duration::from_secs(2);
const BUDGET: Duration = Duration::from_secs(60);

fn config(workspace: &Workspace, publisher: &str) -> std::path::PathBuf {
    let path = workspace.path.join("outbox.toml");
    let text = format!(
        "workers = 2\npool_size = 8\npurge_interval = \"0\"\nreconcile_interval = \"0\"\n\
         outbox_lease = \"{}s\"\noutbox_poll = \"200ms\"\n\n{publisher}\n\
         [endpoints.{ENDPOINT}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\n\
         handlers = [\"record\", \"publish:bus\"]\n",
        OUTBOX_LEASE.as_secs(),
    );
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

/// Sends `ids` until each is answered 200, 8 at a time.
async fn deliver(base: &str, ids: &[String]) -> Result<(), String> {
    let provider = signer();
    let http = http_client();
    let url = format!("{base}/webhooks/{ENDPOINT}");
    let deadline = Instant::now() + BUDGET;
    let sends = ids.iter().map(|id| {
        let (provider, http, url) = (provider.clone(), http.clone(), url.clone());
        async move {
            loop {
                if Instant::now() >= deadline {
                    return Err(format!("{id} was not answered 200 within {BUDGET:?}"));
                }
                let delivery = client::sign(
                    provider.as_ref(),
                    id,
                    chrono::Utc::now().timestamp(),
                    None,
                    client::sample_payment(id),
                )
                .map_err(|e| format!("cannot sign {id}: {e}"))?;
                match client::post(&http, &url, &delivery).await {
                    Ok(answer) if answer.status == 200 => return Ok(()),
                    Ok(answer) if !matches!(answer.status, 409 | 503) => {
                        return Err(format!("{id}: {} {}", answer.status, answer.body));
                    }
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }
    });
    let results: Vec<Result<(), String>> = futures_util::stream::iter(sends)
        .buffer_unordered(8)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The outbox: message id -> (state, attempts, confirmation).
async fn rows(url: &str) -> Result<BTreeMap<String, (String, i32, Option<String>)>, String> {
    let url = DatabaseUrl::parse(url)?;
    let store = Store::connect(&url, &StoreOptions::default()).map_err(|e| e.to_string())?;
    let mut conn = store.conn().await.map_err(|e| e.to_string())?;
    let rows: Vec<(String, String, i32, Option<String>)> = with_conn!(&mut conn, |c| {
        outbox::table
            .select((
                outbox::message_id,
                outbox::state,
                outbox::attempts,
                outbox::confirmation,
            ))
            .load(c)
            .await
    })
    .map_err(|e| format!("cannot read the outbox: {e}"))?;
    Ok(rows
        .into_iter()
        .map(|(id, state, attempts, confirmation)| (id, (state, attempts, confirmation)))
        .collect())
}

async fn until<F: AsyncFnMut() -> Result<bool, String>>(
    what: &str,
    mut check: F,
) -> Result<(), String> {
    let started = Instant::now();
    loop {
        if check().await? {
            return Ok(());
        }
        if started.elapsed() >= BUDGET {
            return Err(format!("{what}: not within {BUDGET:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn killed_between_accept_and_confirm(kind: Kind, backend: &str, url: &str) {
    let name = format!("outbox-kill-9-{kind:?}");
    let Some(mut bus) = Bus::open(kind).await else {
        return;
    };
    let proxy = CutProxy::start(bus.direct()).await;
    let workspace = Workspace::new();
    let port = server::free_port().unwrap_or_else(|e| panic!("{e}"));
    let mut server = Server::new(
        &workspace.path,
        config(
            &workspace,
            &bus.publisher_toml(
                &proxy.addr().to_string(),
                "30s",
                "retry_backoff = \"200ms\"\nretry_backoff_max = \"1s\"",
            ),
        ),
        url.to_owned(),
        port,
    );
    let http = http_client();
    let started = Instant::now();
    let outcome: Result<(usize, BTreeMap<String, usize>), String> = async {
        server.start(&http).await?;
        // A first delivery goes all the way: the relay is connected (the
        // handshake needs the broker's answers) and the stream or queue
        // exists.
        deliver(&server.base_url(), &["msg_warm".to_owned()]).await?;
        until("the first publication sent", async || {
            let rows = rows(url).await?;
            Ok(rows.len() == 1 && rows.values().all(|(state, ..)| state == "sent"))
        })
        .await?;

        // From now on the broker's answers stay in the proxy: the relay's
        // first batch reaches the broker, and its confirmations wait (the
        // relay with them; the later rows stay pending).
        proxy.hold();
        let ids: Vec<String> = (0..N).map(|n| format!("msg_window_{n:03}")).collect();
        deliver(&server.base_url(), &ids).await?;
        until("a publication on the broker, unconfirmed", async || {
            Ok(bus.landed(ENDPOINT).await.len() > 1)
        })
        .await?;
        server.note("kill -9 with the broker's confirmations withheld");
        server.kill();
        // Whatever the dead process sent had reached the proxy before it
        // died, and was passed on: what landed now is the window.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let in_window = bus.landed(ENDPOINT).await.len() - 1;
        let rows_at_kill = rows(url).await?;
        let unsent = rows_at_kill
            .values()
            .filter(|(state, ..)| state == "pending")
            .count();
        if unsent != N {
            return Err(format!(
                "{unsent} of {N} rows unsent at the kill, with {in_window} on the broker unconfirmed"
            ));
        }
        // The withheld answers go to a dead process; the next one connects
        // afresh.
        proxy.cut();
        proxy.release();
        proxy.restore();
        server.start(&http).await?;
        until("every publication sent after the restart", async || {
            let rows = rows(url).await?;
            Ok(rows.len() == N + 1 && rows.values().all(|(state, ..)| state == "sent"))
        })
        .await?;
        Ok((in_window, id_counts(&bus.landed(ENDPOINT).await)))
    }
    .await;
    server.kill();
    let (in_window, counts) = match outcome {
        Ok(outcome) => outcome,
        Err(problem) => panic!(
            "{name} on {backend}: {problem}\nserver log {} ends with:\n{}",
            server.log.display(),
            server.log_tail(40)
        ),
    };
    let mut problems = Vec::new();
    let expected: Vec<String> = std::iter::once("msg_warm".to_owned())
        .chain((0..N).map(|n| format!("msg_window_{n:03}")))
        .map(|id| format!("{ENDPOINT}:{id}"))
        .collect();
    if counts.keys().cloned().collect::<Vec<_>>() != {
        let mut sorted = expected.clone();
        sorted.sort();
        sorted
    } {
        problems.push(format!(
            "ids on the broker differ from the deliveries: {counts:?}"
        ));
    }
    let copies: usize = counts.values().map(|n| n - 1).sum();
    match kind {
        Kind::Nats | Kind::Redis if copies != 0 => {
            problems.push(format!(
                "{copies} copies landed where the broker deduplicates"
            ));
        }
        Kind::Rabbitmq if copies != in_window => {
            problems.push(format!(
                "{copies} copies on RabbitMQ, {in_window} expected (one per withheld confirm)"
            ));
        }
        _ => {}
    }
    let rows = rows(url).await.unwrap_or_default();
    let duplicates = rows
        .values()
        .filter(|(_, _, c)| c.as_deref() == Some("duplicate"))
        .count();
    let retaken = rows
        .values()
        .filter(|(_, attempts, _)| *attempts > 1)
        .count();
    if in_window == 0 || retaken < in_window {
        problems.push(format!(
            "{retaken} rows taken again after the kill, {in_window} were on the broker unconfirmed"
        ));
    }
    if matches!(kind, Kind::Nats | Kind::Redis) && duplicates != in_window {
        problems.push(format!(
            "{duplicates} publications confirmed as duplicates, {in_window} expected"
        ));
    }
    let panics = server.log_lines("panicked");
    if !panics.is_empty() {
        problems.push(format!("the server panicked: {}", panics.join(" | ")));
    }
    say(&format!(
        "outbox crash summary: backend={backend} broker={kind:?} N={N} unconfirmed_at_kill={in_window} retaken={retaken} confirmed_duplicate={duplicates} copies_on_broker={copies} took_s={:.1}",
        started.elapsed().as_secs_f64()
    ));
    if !problems.is_empty() {
        panic!(
            "{name} on {backend} failed:\n- {}\nserver log {} ends with:\n{}",
            problems.join("\n- "),
            server.log.display(),
            server.log_tail(40)
        );
    }
}

async fn on_sqlite(kind: Kind) {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("receiver.db").display());
    killed_between_accept_and_confirm(kind, "sqlite", &url).await;
}

async fn on_postgres(kind: Kind) {
    let _serial = SERIAL.lock().await;
    let schema = match SharedSchema::create().await {
        Ok(schema) => schema,
        Err(reason) => return crate::postgres::unavailable("outbox kill-9 on postgres", &reason),
    };
    killed_between_accept_and_confirm(kind, "postgres", &schema.url).await;
    schema.drop_schema().await;
}

mod a_receiver_killed_between_the_brokers_accept_and_its_confirm {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publishes_once_on_jetstream_on_sqlite() {
        on_sqlite(Kind::Nats).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publishes_once_on_jetstream_on_postgres() {
        on_postgres(Kind::Nats).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publishes_one_distinct_id_on_rabbitmq_on_sqlite() {
        on_sqlite(Kind::Rabbitmq).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publishes_one_distinct_id_on_rabbitmq_on_postgres() {
        on_postgres(Kind::Rabbitmq).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publishes_once_on_redis_on_sqlite() {
        on_sqlite(Kind::Redis).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn publishes_once_on_redis_on_postgres() {
        on_postgres(Kind::Redis).await
    }
}
