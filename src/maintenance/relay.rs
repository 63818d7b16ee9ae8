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
use crate::store::outbox::{OUTBOX_CHANNEL, TakenPublication};
use crate::store::{DatabaseUrl, Store, StoreError};
use crate::telemetry::metrics::{self, OutboxGauges};
use chrono::{NaiveDateTime, TimeDelta};
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

/// Publishes one batch of `relay`'s due rows and waits for it. Tests call
/// it to relay under their clock; the background relay keeps several
/// batches in flight instead (see [`Relay`]). No database connection is
/// held while the broker is asked.
pub async fn relay_due(
    store: &Store,
    relay: &PublisherRelay,
    settings: &RelaySettings,
) -> Result<RelayReport, StoreError> {
    let taken = take(store, relay, settings).await?;
    publish(store, relay, taken).await
}

/// Takes up to a batch of `relay`'s due rows under its lease.
async fn take(
    store: &Store,
    relay: &PublisherRelay,
    settings: &RelaySettings,
) -> Result<Vec<TakenPublication>, StoreError> {
    let now = store.clock().naive_now();
    let lease = TimeDelta::from_std(settings.lease).unwrap_or(TimeDelta::MAX);
    store
        .conn()
        .await?
        .take_publications(
            relay.name(),
            &relay.owner,
            now.checked_add_signed(lease).unwrap_or(NaiveDateTime::MAX),
            now,
            i64::try_from(settings.batch).unwrap_or(i64::MAX),
        )
        .await
}

/// Publishes taken rows concurrently, then marks each as the broker
/// answered.
async fn publish(
    store: &Store,
    relay: &PublisherRelay,
    taken: Vec<TakenPublication>,
) -> Result<RelayReport, StoreError> {
    if taken.is_empty() {
        return Ok(RelayReport::default());
    }
    let clock = store.clock();
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
                        confirmed_at
                            .checked_add_signed(delay)
                            .unwrap_or(NaiveDateTime::MAX),
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
    let sent = conn
        .mark_sent(&published, &relay.owner, "published", confirmed_at)
        .await?;
    let deduplicated = conn
        .mark_sent(&duplicates, &relay.owner, "duplicate", confirmed_at)
        .await?;
    report.published = sent;
    report.duplicates = deduplicated;
    // A row confirmed after its lease ran out may have been taken (and
    // published, and deduplicated) by another relay meanwhile.
    report.lease_lost +=
        published.len().saturating_sub(sent) + duplicates.len().saturating_sub(deduplicated);
    Ok(report)
}

/// The running relays of this process.
pub struct Relay {
    stop: tokio::sync::watch::Sender<bool>,
    /// One per publisher: each finishes the batches it has out.
    relays: Vec<tokio::task::JoinHandle<()>>,
    /// The listener, the notifier and the sampler: nothing to finish.
    helpers: Vec<tokio::task::JoinHandle<()>>,
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
        if publishers.is_empty() {
            return None;
        }
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (mut relays, mut helpers) = (Vec::new(), Vec::new());
        let postgres = match store.url() {
            DatabaseUrl::Postgres(url) => Some(url.clone()),
            DatabaseUrl::Sqlite(_) => None,
        };
        // An instance that only ingests still tells the others' relays.
        if postgres.is_some() {
            helpers.push(tokio::spawn(super::wakeups::notify_after_commits(
                store.clone(),
                signal.committed_notify().clone(),
                OUTBOX_CHANNEL,
                "publications",
            )));
        }
        if !settings.enabled {
            tracing::info!("this process relays no publications (outbox_relay = false)");
            return Some(Relay {
                stop,
                relays,
                helpers,
            });
        }
        for publisher in publishers {
            let relay = PublisherRelay::new(publisher.clone());
            relays.push(tokio::spawn(run(
                store.clone(),
                relay,
                settings.clone(),
                signal.subscribe(),
                stopped.clone(),
            )));
        }
        if let Some(url) = postgres {
            let signal = signal.clone();
            helpers.push(tokio::spawn(super::wakeups::listen(
                url,
                OUTBOX_CHANNEL,
                "outbox",
                move || signal.wake_local(),
                stopped.clone(),
            )));
        }
        let names = publishers.iter().map(|p| p.name.clone());
        helpers.push(tokio::spawn(sample_gauges(
            OutboxGauges::new(names),
            store,
            stopped,
        )));
        tracing::info!(publishers = publishers.len(), "outbox relay started");
        Some(Relay {
            stop,
            relays,
            helpers,
        })
    }

    /// Stops the relays after the batch each is publishing.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for helper in &self.helpers {
            helper.abort();
        }
        for relay in self.relays {
            // A batch waits at most its broker's timeout; past this, its
            // rows are left to their lease.
            let abort = relay.abort_handle();
            if tokio::time::timeout(Duration::from_secs(10), relay)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

/// Batches one relay task keeps in flight. Each waits for its broker's
/// confirmations; while it does, the next rows go out in another batch, so
/// that a broker's confirmation latency does not cap the throughput at a
/// batch per round trip.
const BATCHES_IN_FLIGHT: usize = 4;

async fn run(
    store: Store,
    relay: PublisherRelay,
    settings: RelaySettings,
    mut wake: tokio::sync::watch::Receiver<u64>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut in_flight = tokio::task::JoinSet::new();
    loop {
        if *stopped.borrow() {
            // The batches out now finish (each within the broker's
            // timeout) and mark their rows; nothing new is taken.
            while in_flight.join_next().await.is_some() {}
            return;
        }
        while in_flight.len() < BATCHES_IN_FLIGHT {
            match take(&store, &relay, &settings).await {
                Ok(rows) if rows.is_empty() => break,
                Ok(rows) => {
                    let full = rows.len() == settings.batch;
                    let (store, relay) = (store.clone(), relay.clone());
                    in_flight.spawn(async move {
                        if let Err(error) = publish(&store, &relay, rows).await {
                            // The rows keep their lease and are taken again
                            // once it has run out.
                            tracing::warn!(publisher = relay.name(), %error, "relay could not mark publications");
                        }
                    });
                    if !full {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(publisher = relay.name(), %error, "relay could not take publications");
                    break;
                }
            }
        }
        tokio::select! {
            biased;
            _ = stopped.changed() => {}
            _ = wake.changed() => {}
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
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
