//! The relay of every `serve` process: per publisher, it takes due outbox
//! rows under a lease, publishes them to the broker, and marks each row
//! sent only once the broker confirmed it. A row whose publication failed is
//! due again after a backoff; one whose relay died after the broker's
//! confirm but before the mark is taken again when its lease runs out, and
//! the broker's deduplication (or the stable message id) absorbs the copy.
//!
//! Relays sleep until publications are committed: this process's
//! deliveries wake them, and on PostgreSQL so does every other instance's,
//! through `LISTEN/NOTIFY`. `outbox_poll` is the fallback, and what picks up
//! rows due after a backoff.

use crate::publishers::{Broker, Confirmed, Message, OutboxSignal, PublisherSettings};
use crate::store::outbox::OUTBOX_CHANNEL;
use crate::store::{DatabaseUrl, Store, StoreError};
use crate::telemetry::metrics::{self, OutboxGauges};
use chrono::TimeDelta;
use std::sync::Arc;
use std::time::Duration;

/// `outbox_poll`, `outbox_lease`, `outbox_batch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelaySettings {
    /// Whether this process relays (`outbox_relay`, on by default). Off: its
    /// deliveries still write publications, which other instances' relays
    /// publish (a fleet can keep ingestion and publication apart).
    pub enabled: bool,
    /// How long an idle relay waits before it looks for due rows anyway.
    pub poll: Duration,
    /// How long a taken row is the relay's: longer than a batch's publish
    /// (every broker client times out within seconds), short enough that a
    /// crashed relay's rows go out soon after.
    pub lease: Duration,
    /// Rows taken, and published concurrently, at once.
    pub batch: usize,
}

impl Default for RelaySettings {
    fn default() -> Self {
        RelaySettings {
            enabled: true,
            poll: Duration::from_secs(1),
            lease: Duration::from_secs(30),
            batch: 64,
        }
    }
}

/// How often a process with publishers samples the outbox's gauges.
const SAMPLE_EVERY: Duration = super::QUEUE_SAMPLE_EVERY;

/// One publisher's relay: its settings, its broker client and its lease
/// owner name.
#[derive(Clone)]
pub struct PublisherRelay {
    settings: PublisherSettings,
    broker: Arc<dyn Broker>,
    owner: String,
}

impl PublisherRelay {
    pub fn new(settings: PublisherSettings) -> PublisherRelay {
        let broker = settings.broker.client();
        PublisherRelay::with_broker(settings, broker)
    }

    /// A relay over an already built client (tests share one).
    pub fn with_broker(settings: PublisherSettings, broker: Arc<dyn Broker>) -> PublisherRelay {
        let owner = format!(
            "relay-{}-pid{}-{}",
            settings.name,
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        PublisherRelay {
            settings,
            broker,
            owner,
        }
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// The delay before attempt `attempts + 1`: `retry_backoff` doubled per
    /// failed attempt, capped at `retry_backoff_max`.
    fn backoff(&self, attempts: i32) -> Duration {
        let doublings = u32::try_from(attempts.saturating_sub(1))
            .unwrap_or(0)
            .min(20);
        self.settings
            .retry_backoff
            .saturating_mul(1 << doublings)
            .min(self.settings.retry_backoff_max)
    }
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RelayReport {
    pub published: usize,
    /// Confirmed as already there (JetStream's duplicate window, the Redis
    /// marker): sent all the same.
    pub duplicates: usize,
    /// Failed and due again after a backoff.
    pub retrying: usize,
    /// Failed for the last time (`max_attempts`): `failed`.
    pub failed: usize,
    /// Confirmed, but the lease had run out and another relay took the row.
    pub lease_lost: usize,
}

impl RelayReport {
    pub fn taken(&self) -> usize {
        self.published + self.duplicates + self.retrying + self.failed + self.lease_lost
    }
}

/// Publishes one batch of `relay`'s due rows. Workers call it when woken;
/// tests call it to relay under their clock. No database connection is
/// held while the broker is asked.
pub async fn relay_due(
    store: &Store,
    relay: &PublisherRelay,
    settings: &RelaySettings,
) -> Result<RelayReport, StoreError> {
    let clock = store.clock();
    let now = clock.naive_now();
    let lease = TimeDelta::from_std(settings.lease).unwrap_or(TimeDelta::MAX);
    let taken = store
        .conn()
        .await?
        .take_publications(
            relay.name(),
            &relay.owner,
            now + lease,
            now,
            i64::try_from(settings.batch).unwrap_or(i64::MAX),
        )
        .await?;
    if taken.is_empty() {
        return Ok(RelayReport::default());
    }
    let answers = futures_util::future::join_all(taken.iter().map(|row| async move {
        let message = Message {
            id: &row.message_id,
            destination: &row.destination,
            body: &row.body,
        };
        relay.broker.publish(&message).await
    }))
    .await;

    let mut report = RelayReport::default();
    let confirmed_at = clock.naive_now();
    let (mut published, mut duplicates) = (Vec::new(), Vec::new());
    let mut conn = store.conn().await?;
    for (row, answer) in taken.iter().zip(answers) {
        match answer {
            Ok(confirmed) => {
                let since_receipt = (confirmed_at - row.received_at)
                    .to_std()
                    .unwrap_or_default();
                let duplicate = confirmed == Confirmed::Duplicate;
                metrics::outbox_published(relay.name(), duplicate, since_receipt);
                if duplicate {
                    duplicates.push(row.id);
                } else {
                    published.push(row.id);
                }
            }
            Err(error) => {
                let give_up = relay
                    .settings
                    .max_attempts
                    .is_some_and(|max| row.attempts >= i32::try_from(max).unwrap_or(i32::MAX));
                let delay =
                    TimeDelta::from_std(relay.backoff(row.attempts)).unwrap_or(TimeDelta::MAX);
                let message = error.to_string();
                let message = crate::log_text::escaped(&message);
                tracing::warn!(
                    publisher = relay.name(),
                    message_id = %crate::log_text::escaped(&row.message_id),
                    attempts = row.attempts,
                    error = %message,
                    gave_up = give_up,
                    "publication not confirmed"
                );
                metrics::outbox_failed(relay.name(), give_up);
                if conn
                    .mark_unsent(
                        row.id,
                        &relay.owner,
                        &message.to_string(),
                        confirmed_at + delay,
                        give_up,
                    )
                    .await?
                {
                    if give_up {
                        report.failed += 1;
                    } else {
                        report.retrying += 1;
                    }
                } else {
                    report.lease_lost += 1;
                }
            }
        }
    }
    let marked = conn
        .mark_sent(&published, &relay.owner, "published", confirmed_at)
        .await?
        + conn
            .mark_sent(&duplicates, &relay.owner, "duplicate", confirmed_at)
            .await?;
    report.published = published.len();
    report.duplicates = duplicates.len();
    // A row confirmed after its lease ran out may have been taken (and
    // published, and deduplicated) by another relay meanwhile.
    let lost = (published.len() + duplicates.len()).saturating_sub(marked);
    report.lease_lost += lost;
    report.published = report.published.saturating_sub(lost.min(report.published));
    Ok(report)
}

/// The running relays of this process.
pub struct Relay {
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Relay {
    /// Starts one relay task per publisher, on PostgreSQL a listener for
    /// other instances' publications and the notifier that tells them of
    /// this process's, and the sampler of the outbox's gauges. `None` when
    /// no publisher is configured.
    pub fn spawn(
        store: Store,
        publishers: &[PublisherSettings],
        settings: RelaySettings,
        signal: OutboxSignal,
    ) -> Option<Relay> {
        if publishers.is_empty() || !settings.enabled {
            return None;
        }
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for publisher in publishers {
            let relay = PublisherRelay::new(publisher.clone());
            tasks.push(tokio::spawn(run(
                store.clone(),
                relay,
                settings.clone(),
                signal.subscribe(),
                stopped.clone(),
            )));
        }
        if let DatabaseUrl::Postgres(url) = store.url() {
            tasks.push(tokio::spawn(listen(
                url.clone(),
                signal.clone(),
                stopped.clone(),
            )));
            tasks.push(tokio::spawn(notify(store.clone(), signal.clone())));
        }
        let names = publishers.iter().map(|p| p.name.clone());
        tasks.push(tokio::spawn(sample_gauges(
            OutboxGauges::new(names),
            store,
            stopped,
        )));
        tracing::info!(publishers = publishers.len(), "outbox relay started");
        Some(Relay { stop, tasks })
    }

    /// Stops the relays after the batch each is publishing.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            // The listener, notifier and sampler wait on nothing worth
            // finishing; relay tasks return at their next wait.
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

async fn run(
    store: Store,
    relay: PublisherRelay,
    settings: RelaySettings,
    mut wake: tokio::sync::watch::Receiver<u64>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if *stopped.borrow() {
            return;
        }
        match relay_due(&store, &relay, &settings).await {
            // A full batch that all went out: more may be due.
            Ok(report) if report.taken() == settings.batch && report.retrying == 0 => continue,
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(publisher = relay.name(), %error, "relay could not take publications")
            }
        }
        tokio::select! {
            biased;
            _ = stopped.changed() => return,
            _ = wake.changed() => {}
            () = tokio::time::sleep(settings.poll) => {}
        }
    }
}

/// Samples the outbox's gauges now and every [`SAMPLE_EVERY`].
async fn sample_gauges(
    mut gauges: OutboxGauges,
    store: Store,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        match tokio::time::timeout(SAMPLE_EVERY, gauges.sample(&store)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::debug!(%error, "could not sample the outbox's gauges"),
            Err(_) => tracing::debug!("sampling the outbox's gauges timed out"),
        }
        tokio::select! {
            _ = stopped.changed() => return,
            () = tokio::time::sleep(SAMPLE_EVERY) => {}
        }
    }
}

/// Wakes this process's relays whenever any instance commits publications.
/// A lost connection is re-established; meanwhile the poll covers.
async fn listen(
    url: String,
    signal: OutboxSignal,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    use diesel_async::{AsyncConnection, RunQueryDsl};
    use futures_util::StreamExt;
    loop {
        let connected = async {
            let mut conn = diesel_async::AsyncPgConnection::establish(&url)
                .await
                .map_err(|e| e.to_string())?;
            diesel::sql_query(format!("LISTEN {OUTBOX_CHANNEL}"))
                .execute(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(conn)
        };
        let mut conn = match connected.await {
            Ok(conn) => conn,
            Err(error) => {
                tracing::warn!(error = %crate::log_text::escaped(&error), "outbox listener could not connect; relying on the poll");
                tokio::select! {
                    _ = stopped.changed() => return,
                    () = tokio::time::sleep(Duration::from_secs(5)) => continue,
                }
            }
        };
        let mut notifications = std::pin::pin!(conn.notifications_stream());
        loop {
            tokio::select! {
                _ = stopped.changed() => return,
                next = notifications.next() => match next {
                    Some(Ok(_)) => signal.wake_local(),
                    Some(Err(error)) => {
                        tracing::warn!(%error, "outbox listener lost its connection");
                        break;
                    }
                    None => break,
                },
            }
        }
    }
}

/// Tells other instances' relays, through `NOTIFY`, that this process
/// committed publications: after the commits, at most once per 20 ms, on a
/// connection of its own (a `NOTIFY` inside every delivery's transaction
/// would serialise their commits).
async fn notify(store: Store, signal: OutboxSignal) {
    const NOTIFY_EVERY: Duration = Duration::from_millis(20);
    let committed = signal.committed_notify().clone();
    loop {
        committed.notified().await;
        tokio::time::sleep(NOTIFY_EVERY).await;
        let sent = match store.conn().await {
            Ok(mut conn) => conn.notify_outbox().await,
            Err(e) => Err(e),
        };
        if let Err(error) = sent {
            tracing::warn!(%error, "could not notify other instances of publications; they poll");
        }
    }
}
