//! The operator's hold on the outbox (issue #14): list publications (by
//! default the unsent ones, pending and failed) with each publisher's
//! backlog, make failed ones due again, and republish stored deliveries.
//! The API, the page and the `outbox` command all act through here.
//! A republish is recorded in the delivery's history with the actor, in
//! the transaction that writes its rows (see `maintenance::Republisher`); a
//! retry changes rows that belong to no key's history, so it is logged.

use super::error::AdminError;
use super::listing::instant;
use super::model::rfc3339;
use super::queue::{flag, given, limit, name, optional_name};
use crate::log_text::escaped;
use crate::maintenance::{RepublishReport, RepublishRequest, Republisher, Selection};
use crate::store::Store;
use crate::store::outbox::{FAILED, PENDING, PublicationFilter, PublicationRow, SENT};
use chrono::NaiveDateTime;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

pub const DEFAULT_PUBLICATIONS: i64 = 100;
pub const MAX_PUBLICATIONS: i64 = 500;
const STATES: [&str; 3] = [PENDING, FAILED, SENT];

/// The outbox listing's filters, as query parameters. Empty values count
/// as absent (a form submits its empty fields).
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OutboxQuery {
    /// Only this publisher.
    pub publisher: Option<String>,
    /// Only this endpoint.
    pub endpoint: Option<String>,
    /// Only this delivery's publications.
    pub delivery_id: Option<String>,
    /// pending, failed or sent, or several separated by commas (default:
    /// the unsent ones, pending and failed).
    pub state: Option<String>,
    /// Publications at most, 1 to 500 (default 100), newest first.
    #[param(value_type = Option<u32>)]
    pub limit: Option<String>,
}

/// Which failed publications a retry makes due again.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OutboxRetryQuery {
    /// Only this publisher.
    pub publisher: Option<String>,
    /// Only this endpoint.
    pub endpoint: Option<String>,
    /// Only this delivery's publications.
    pub delivery_id: Option<String>,
}

/// A republish's options, as query parameters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RepublishQuery {
    /// Only this publisher (one the endpoint publishes to; default: each).
    pub publisher: Option<String>,
    /// `true`: only say what would be written.
    #[param(value_type = Option<bool>)]
    pub dry_run: Option<String>,
}

impl OutboxQuery {
    /// The filter and the limit.
    pub fn validate(&self) -> Result<(PublicationFilter, i64), AdminError> {
        let states = match given(&self.state) {
            None => None,
            Some(text) => {
                let mut states = Vec::new();
                for state in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if !STATES.contains(&state) {
                        return Err(AdminError::bad(
                            "state",
                            format!("{state:?} is not one of {}", STATES.join(", ")),
                        ));
                    }
                    states.push(state.to_owned());
                }
                Some(states)
            }
        };
        let limit = limit(&self.limit, DEFAULT_PUBLICATIONS, MAX_PUBLICATIONS)?;
        let filter = PublicationFilter {
            states,
            ..retry_filter(&self.publisher, &self.endpoint, &self.delivery_id)?
        };
        Ok((filter, limit))
    }
}

impl OutboxRetryQuery {
    pub fn validate(&self) -> Result<PublicationFilter, AdminError> {
        retry_filter(&self.publisher, &self.endpoint, &self.delivery_id)
    }
}

fn retry_filter(
    publisher: &Option<String>,
    endpoint: &Option<String>,
    delivery_id: &Option<String>,
) -> Result<PublicationFilter, AdminError> {
    Ok(PublicationFilter {
        publisher: optional_name("publisher", publisher)?,
        endpoint: optional_name("endpoint", endpoint)?,
        delivery_id: optional_name("delivery_id", delivery_id)?,
        states: None,
    })
}

impl RepublishQuery {
    /// The request for one delivery, as `actor`.
    pub fn one(
        &self,
        endpoint: &str,
        delivery_id: &str,
        actor: &str,
    ) -> Result<RepublishRequest, AdminError> {
        let selection = Selection::One(name("delivery_id", delivery_id)?);
        self.request(endpoint, selection, actor)
    }

    /// The request for the endpoint's deliveries `filter` selects, as
    /// `actor`; `now` anchors relative times.
    pub fn matching(
        &self,
        endpoint: &str,
        filter: &RepublishFilter,
        actor: &str,
        now: NaiveDateTime,
    ) -> Result<RepublishRequest, AdminError> {
        let selection = Selection::Matching {
            event_type: optional_name("event_type", &filter.event_type)?,
            since: instant("since", given(&filter.since), now)?,
            until: instant("until", given(&filter.until), now)?,
        };
        self.request(endpoint, selection, actor)
    }

    fn request(
        &self,
        endpoint: &str,
        selection: Selection,
        actor: &str,
    ) -> Result<RepublishRequest, AdminError> {
        Ok(RepublishRequest {
            endpoint: name("endpoint", endpoint)?,
            selection,
            publisher: optional_name("publisher", &self.publisher)?,
            actor: actor.to_owned(),
            dry_run: flag("dry_run", &self.dry_run)?,
        })
    }
}

/// What an operator's republish by filter selects (the CLI's flags).
pub struct RepublishFilter {
    pub event_type: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
}

/// One outbox row, without its body.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct Publication {
    pub id: i64,
    pub publisher: String,
    pub endpoint: String,
    pub delivery_id: String,
    /// What brokers deduplicate on: `<endpoint>:<delivery id>`, with
    /// `#republish-<n>` for an operator's republish.
    pub message_id: String,
    /// The subject, routing key or stream.
    pub destination: String,
    /// pending, failed or sent.
    pub state: String,
    /// Attempts so far (an operator's retry counts afresh).
    pub attempts: i32,
    /// When it is due (RFC 3339, UTC).
    pub next_attempt_at: String,
    /// The last failed attempt's error.
    pub last_error: Option<String>,
    /// `published`, or `duplicate` when the broker already had the id.
    pub confirmation: Option<String>,
    /// When its delivery was received (for a republish: when it was made).
    pub received_at: String,
    pub created_at: String,
    pub sent_at: Option<String>,
}

impl From<PublicationRow> for Publication {
    fn from(row: PublicationRow) -> Publication {
        Publication {
            id: row.id,
            publisher: row.publisher,
            endpoint: row.endpoint,
            delivery_id: row.delivery_id,
            message_id: row.message_id,
            destination: row.destination,
            state: row.state,
            attempts: row.attempts,
            next_attempt_at: rfc3339(row.next_attempt_at),
            last_error: row.last_error,
            confirmation: row.confirmation,
            received_at: rfc3339(row.received_at),
            created_at: rfc3339(row.created_at),
            sent_at: row.sent_at.map(rfc3339),
        }
    }
}

/// One publisher's unsent rows.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct PublisherBacklog {
    pub publisher: String,
    pub pending: i64,
    pub failed: i64,
    /// The oldest unsent row's receipt (RFC 3339, UTC).
    pub oldest: Option<String>,
}

/// The publications a filter selects, newest first, and every publisher's
/// backlog.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OutboxListing {
    pub publications: Vec<Publication>,
    pub backlog: Vec<PublisherBacklog>,
}

/// A retry's outcome.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct OutboxRetry {
    /// Failed publications made due again.
    pub retried: usize,
}

pub async fn list(
    store: &Store,
    filter: &PublicationFilter,
    limit: i64,
) -> Result<OutboxListing, AdminError> {
    let mut conn = store.conn().await?;
    let publications = conn.publications(filter, limit).await?;
    let backlog = conn.outbox_backlog().await?;
    Ok(OutboxListing {
        publications: publications.into_iter().map(Publication::from).collect(),
        backlog: backlog
            .into_iter()
            .map(|b| PublisherBacklog {
                publisher: b.publisher,
                pending: b.pending,
                failed: b.failed,
                oldest: b.oldest.map(rfc3339),
            })
            .collect(),
    })
}

/// A delivery's publications, oldest first.
pub async fn of_delivery(
    store: &Store,
    endpoint: &str,
    delivery_id: &str,
) -> Result<Vec<Publication>, AdminError> {
    let rows = store
        .conn()
        .await?
        .publications_of(endpoint, delivery_id)
        .await?;
    Ok(rows.into_iter().map(Publication::from).collect())
}

/// Makes the failed publications `filter` selects due now, their attempts
/// counted afresh. The caller wakes the relays.
pub async fn retry(
    store: &Store,
    filter: &PublicationFilter,
    actor: &str,
) -> Result<OutboxRetry, AdminError> {
    let now = store.clock().naive_now();
    let retried = store.conn().await?.retry_publications(filter, now).await?;
    tracing::info!(
        retried,
        publisher = %escaped(filter.publisher.as_deref().unwrap_or("*")),
        endpoint = %escaped(filter.endpoint.as_deref().unwrap_or("*")),
        delivery_id = %escaped(filter.delivery_id.as_deref().unwrap_or("*")),
        actor = %escaped(actor),
        "failed publications retried by an operator"
    );
    Ok(OutboxRetry { retried })
}

/// Republishes one delivery: its report, or 409 when it was skipped (the
/// reason is the problem's detail).
pub async fn republish_one(
    republisher: &Republisher,
    request: &RepublishRequest,
) -> Result<RepublishReport, AdminError> {
    let report = republisher.republish(request).await?;
    match report.skipped.first() {
        Some(skipped) if report.republished.is_empty() => {
            Err(AdminError::NotRepublishable(format!(
                "delivery {:?} of {:?} was not republished: {}",
                skipped.delivery_id, request.endpoint, skipped.reason
            )))
        }
        _ => Ok(report),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_takes_unsent_rows_unless_told_and_refuses_unknown_states() {
        let (filter, limit) = OutboxQuery::default().validate().unwrap();
        assert_eq!((filter.states, limit), (None, DEFAULT_PUBLICATIONS));
        let query = OutboxQuery {
            state: Some("failed, sent".into()),
            publisher: Some("bus".into()),
            ..OutboxQuery::default()
        };
        let (filter, _) = query.validate().unwrap();
        assert_eq!(filter.states, Some(vec!["failed".into(), "sent".into()]));
        assert_eq!(filter.publisher.as_deref(), Some("bus"));
        for query in [
            OutboxQuery {
                state: Some("lost".into()),
                ..OutboxQuery::default()
            },
            OutboxQuery {
                limit: Some("0".into()),
                ..OutboxQuery::default()
            },
            OutboxQuery {
                endpoint: Some("a\0b".into()),
                ..OutboxQuery::default()
            },
        ] {
            assert!(query.validate().is_err(), "{query:?}");
        }
    }
}
