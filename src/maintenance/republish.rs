//! `republish`: an operator puts stored deliveries on the bus again (a
//! consumer lost its copy, a publisher was added to an endpoint). Each
//! selected delivery gets a NEW outbox row per publisher its endpoint
//! publishes to, written in one transaction with a `republished` entry in
//! its history.
//!
//! The envelope is rebuilt from the stored delivery, so its CloudEvents
//! `id` stays `<endpoint>:<delivery id>` (what consumers deduplicate on);
//! the broker's message id gets a suffix `#republish-<n>`, so that JetStream's
//! duplicate window and the Redis marker, which already hold the original
//! id, do not drop the copy.

use super::event_of;
use crate::handlers::publish::{EnvelopeSettings, PREFIX, envelope};
use crate::log_text::escaped;
use crate::publishers::PublisherSettings;
use crate::store::outbox::NewPublication;
use crate::store::{COMPLETED, DbConn, DeliveryFilter, DeliveryRow, PagePosition, StoreError};
use crate::webhooks::{Endpoint, Webhooks};
use chrono::NaiveDateTime;
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;

/// The history kind of a republish.
pub const REPUBLISHED: &str = "republished";
/// What a republished row's message id ends with, before its number.
pub const SUFFIX: &str = "#republish-";
/// Deliveries read per page while a filter is walked.
const PAGE: i64 = 500;
/// Tries at a fresh number when another republish took the one read.
const NUMBER_TRIES: usize = 16;

/// Which of an endpoint's deliveries a republish takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    One(String),
    Matching {
        event_type: Option<String>,
        /// Received at or after.
        since: Option<NaiveDateTime>,
        /// Received before.
        until: Option<NaiveDateTime>,
    },
}

/// One republish, as an operator asked for it.
#[derive(Debug, Clone)]
pub struct RepublishRequest {
    pub endpoint: String,
    pub selection: Selection,
    /// Only this publisher (one the endpoint publishes to); `None`: each.
    pub publisher: Option<String>,
    /// Who asked, for the history.
    pub actor: String,
    /// Count what would be written, write nothing.
    pub dry_run: bool,
}

/// What a republish wrote (or, in a dry run, would write).
#[derive(Debug, Clone, Default, Serialize, ToSchema, PartialEq, Eq)]
pub struct RepublishReport {
    pub dry_run: bool,
    /// Deliveries the selection took.
    pub matched: usize,
    /// One per outbox row written (or that would be).
    pub republished: Vec<Republication>,
    /// Deliveries left alone, and why.
    pub skipped: Vec<Skipped>,
}

/// A new outbox row.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct Republication {
    pub delivery_id: String,
    pub publisher: String,
    /// `<endpoint>:<delivery id>#republish-<n>`.
    pub message_id: String,
    pub destination: String,
}

/// A delivery that was not republished.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct Skipped {
    pub delivery_id: String,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RepublishError {
    #[error("no endpoint named {0:?} is configured")]
    UnknownEndpoint(String),
    #[error("no delivery {delivery_id:?} is stored for endpoint {endpoint:?}")]
    NotFound {
        endpoint: String,
        delivery_id: String,
    },
    #[error(
        "endpoint {endpoint:?} does not publish to {publisher:?} (it publishes to: {publishes})"
    )]
    UnknownPublisher {
        endpoint: String,
        publisher: String,
        publishes: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The configured endpoints and publishers a republish needs: the
/// endpoint's provider (to read the stored body back) and its `publish:NAME`
/// handlers, and each publisher's destination and envelope settings.
#[derive(Clone)]
pub struct Republisher {
    webhooks: Webhooks,
    publishers: Arc<Vec<PublisherSettings>>,
}

impl Republisher {
    pub fn new(webhooks: Webhooks, publishers: &[PublisherSettings]) -> Republisher {
        Republisher {
            webhooks,
            publishers: Arc::new(publishers.to_vec()),
        }
    }

    /// The configured endpoints (the admin dashboard shows their settings;
    /// an operator's reprocessing runs through their engine too).
    pub fn webhooks(&self) -> &Webhooks {
        &self.webhooks
    }

    /// What wakes the relays of this process.
    pub fn outbox_signal(&self) -> &crate::publishers::OutboxSignal {
        self.webhooks.outbox_signal()
    }

    /// Writes the republications `request` asks for, one transaction per
    /// delivery, and wakes this process's relays (and, through the
    /// notifier, other instances') once they are committed. Another
    /// process (the CLI) tells the serving instances itself: `NOTIFY` on
    /// PostgreSQL; on SQLite the relays find the rows at `outbox_poll`.
    pub async fn republish(
        &self,
        request: &RepublishRequest,
    ) -> Result<RepublishReport, RepublishError> {
        let endpoint = self
            .webhooks
            .endpoint(&request.endpoint)
            .cloned()
            .ok_or_else(|| RepublishError::UnknownEndpoint(request.endpoint.clone()))?;
        let publishers = self.publishers_of(&endpoint, request.publisher.as_deref())?;
        let mut report = RepublishReport {
            dry_run: request.dry_run,
            ..RepublishReport::default()
        };
        let store = self.webhooks.engine().store();
        match &request.selection {
            Selection::One(delivery_id) => {
                let row = store
                    .conn()
                    .await?
                    .find_delivery(&endpoint.name, delivery_id)
                    .await?
                    .ok_or_else(|| RepublishError::NotFound {
                        endpoint: endpoint.name.clone(),
                        delivery_id: delivery_id.clone(),
                    })?;
                self.one(&endpoint, &publishers, &row, request, &mut report)
                    .await?;
            }
            Selection::Matching {
                event_type,
                since,
                until,
            } => {
                let filter = DeliveryFilter {
                    endpoint: Some(endpoint.name.clone()),
                    event_type: event_type.clone(),
                    since: *since,
                    until: *until,
                    ..DeliveryFilter::default()
                };
                let mut after: Option<PagePosition> = None;
                loop {
                    let page = store
                        .conn()
                        .await?
                        .list_deliveries(&filter, after.as_ref(), PAGE)
                        .await?;
                    for summary in &page {
                        let row = store
                            .conn()
                            .await?
                            .find_delivery(&summary.endpoint, &summary.delivery_id)
                            .await?;
                        // Purged meanwhile: nothing to republish.
                        if let Some(row) = row {
                            self.one(&endpoint, &publishers, &row, request, &mut report)
                                .await?;
                        }
                    }
                    match page.last() {
                        Some(last) if page.len() as i64 == PAGE => after = Some(last.position()),
                        _ => break,
                    }
                }
            }
        }
        if !request.dry_run && !report.republished.is_empty() {
            self.webhooks.outbox_signal().committed();
            tracing::info!(
                endpoint = %escaped(&endpoint.name),
                matched = report.matched,
                republished = report.republished.len(),
                skipped = report.skipped.len(),
                actor = %escaped(&request.actor),
                "deliveries republished by an operator"
            );
        }
        Ok(report)
    }

    /// The publishers `endpoint` publishes to, or only `named` among them.
    fn publishers_of(
        &self,
        endpoint: &Endpoint,
        named: Option<&str>,
    ) -> Result<Vec<&PublisherSettings>, RepublishError> {
        let publishes: Vec<&str> = endpoint
            .handlers
            .iter()
            .filter_map(|(name, _)| name.strip_prefix(PREFIX))
            .collect();
        let chosen: Vec<&str> = match named {
            None => publishes.clone(),
            Some(name) if publishes.contains(&name) => vec![name],
            Some(name) => {
                return Err(RepublishError::UnknownPublisher {
                    endpoint: endpoint.name.clone(),
                    publisher: name.to_owned(),
                    publishes: if publishes.is_empty() {
                        "nothing".to_owned()
                    } else {
                        publishes.join(", ")
                    },
                });
            }
        };
        Ok(self
            .publishers
            .iter()
            .filter(|p| chosen.contains(&p.name.as_str()))
            .collect())
    }

    /// Republishes one delivery to `publishers`, or says why not.
    async fn one(
        &self,
        endpoint: &Endpoint,
        publishers: &[&PublisherSettings],
        row: &DeliveryRow,
        request: &RepublishRequest,
        report: &mut RepublishReport,
    ) -> Result<(), StoreError> {
        report.matched += 1;
        let store = self.webhooks.engine().store();
        let mut conn = store.conn().await?;
        let event = match self.eligible(&mut conn, endpoint, publishers, row).await? {
            Ok(event) => event,
            Err(reason) => {
                report.skipped.push(Skipped {
                    delivery_id: row.delivery_id.clone(),
                    reason,
                });
                return Ok(());
            }
        };
        // Numbers read outside the transaction: on SQLite its first
        // statement is then the insert, which waits for the write lock
        // rather than failing as a read upgraded to a write can.
        let mut planned = Vec::with_capacity(publishers.len());
        for publisher in publishers {
            let n = next_number(&mut conn, publisher, row).await?;
            planned.push(Planned {
                publisher,
                n,
                body: envelope(&event, &EnvelopeSettings::of(publisher)),
                destination: publisher.broker.destination().render(
                    &event.endpoint,
                    event.provider,
                    event.event_type.as_deref(),
                ),
            });
        }
        drop(conn);
        if !request.dry_run {
            let mut tx = store.begin().await?;
            let now = store.clock().naive_now();
            match write(tx.conn(), &event, &mut planned, &request.actor, now).await {
                Ok(()) => tx.commit().await?,
                Err(error) => {
                    if let Err(rollback) = tx.rollback().await {
                        tracing::warn!(error = %rollback, "rollback failed; the connection is discarded");
                    }
                    return Err(error);
                }
            }
        }
        let key = event.idempotency_key();
        report
            .republished
            .extend(planned.into_iter().map(|p| Republication {
                delivery_id: event.delivery_id.clone(),
                publisher: p.publisher.name.clone(),
                message_id: numbered(&key, p.n),
                destination: p.destination,
            }));
        Ok(())
    }

    /// The delivery's event, or why it is not republished: its handlers
    /// never accepted it (nothing was published then either), or its body
    /// is not there to rebuild the envelope from.
    async fn eligible(
        &self,
        conn: &mut DbConn,
        endpoint: &Endpoint,
        publishers: &[&PublisherSettings],
        row: &DeliveryRow,
    ) -> Result<Result<crate::handlers::Event, String>, StoreError> {
        if publishers.is_empty() {
            return Ok(Err(format!(
                "endpoint {:?} publishes to nothing (no publish:NAME handler)",
                endpoint.name
            )));
        }
        if row.status != COMPLETED {
            return Ok(Err("it is still being processed".to_owned()));
        }
        if let Some(status) = row.response_status.filter(|s| !(200..300).contains(s)) {
            return Ok(Err(format!(
                "its handlers did not accept it (HTTP {status}): it was never published"
            )));
        }
        if endpoint.queue.is_some() {
            let job = conn.job(&endpoint.name, &row.delivery_id).await?;
            if let Some(job) = job.filter(|job| job.state != crate::store::queue::DONE) {
                return Ok(Err(format!(
                    "its queue job is {}: its handlers have not run to the end",
                    job.state
                )));
            }
        }
        let body = conn.request_body(&endpoint.name, &row.delivery_id).await?;
        Ok(match body {
            None => Err("its body was not stored".to_owned()),
            Some(body) => event_of(endpoint, row, body)
                .ok_or_else(|| "its stored body is not a payload it can read".to_owned()),
        })
    }
}

/// One row to write: its publisher, its republish number and its message.
struct Planned<'a> {
    publisher: &'a PublisherSettings,
    n: u32,
    body: Vec<u8>,
    destination: String,
}

/// Writes `planned`'s rows and their history entries through `conn`, in
/// the caller's transaction; a number another republish took meanwhile is
/// moved on (and `planned` says which one was written).
async fn write(
    conn: &mut DbConn,
    event: &crate::handlers::Event,
    planned: &mut [Planned<'_>],
    actor: &str,
    now: NaiveDateTime,
) -> Result<(), StoreError> {
    let key = event.idempotency_key();
    for row in planned {
        let mut tries = 0;
        let message_id = loop {
            let message_id = numbered(&key, row.n);
            let new = NewPublication {
                publisher: &row.publisher.name,
                endpoint: &event.endpoint,
                delivery_id: &event.delivery_id,
                message_id: &message_id,
                destination: &row.destination,
                body: &row.body,
                // The latency and the backlog's age count from the
                // republish, not from a receipt that may be weeks old.
                received_at: now,
                now,
            };
            if conn.insert_publication(&new).await? {
                break message_id;
            }
            tries += 1;
            if tries >= NUMBER_TRIES {
                return Err(StoreError::Unavailable(format!(
                    "no free republish number for {key:?} after {NUMBER_TRIES} tries"
                )));
            }
            row.n = row.n.saturating_add(1);
        };
        let detail = format!(
            "publisher {}, message id {message_id}, destination {}",
            row.publisher.name, row.destination
        );
        conn.record_history(
            &event.endpoint,
            &event.delivery_id,
            REPUBLISHED,
            Some(actor),
            Some(&detail),
            now,
        )
        .await?;
    }
    Ok(())
}

fn numbered(message_id: &str, n: u32) -> String {
    format!("{message_id}{SUFFIX}{n}")
}

/// The number after the highest `#republish-<n>` this publisher has for
/// the delivery; 1 for the first republish.
async fn next_number(
    conn: &mut DbConn,
    publisher: &PublisherSettings,
    row: &DeliveryRow,
) -> Result<u32, StoreError> {
    let rows = conn
        .publications_of(&row.endpoint, &row.delivery_id)
        .await?;
    let highest = rows
        .iter()
        .filter(|r| r.publisher == publisher.name)
        .filter_map(|r| r.message_id.rsplit_once(SUFFIX))
        .filter_map(|(_, n)| n.parse::<u32>().ok())
        .max()
        .unwrap_or(0);
    Ok(highest.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_republished_id_keeps_the_original_and_numbers_the_copy() {
        assert_eq!(numbered("shop:evt_1", 1), "shop:evt_1#republish-1");
        assert_eq!(
            "shop:evt_1#republish-12".rsplit_once(SUFFIX),
            Some(("shop:evt_1", "12"))
        );
    }
}
