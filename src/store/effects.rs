//! What a delivery's handlers wrote, read back for the operator's key page:
//! the `events` row, the ledger entries, the payment a client key created,
//! and the other queued deliveries about the same object (same ordering
//! key). Each query is written once for both backends.

use super::queue::JobRow;
use super::schema::{events, ledger_entries, payments, queue_jobs};
use super::{DbConn, StoreError};
use crate::with_conn;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

/// How many related deliveries the key page lists at most: an object with
/// more events than this is a rare case the queue page can page through.
pub const MAX_RELATED: i64 = 50;

/// The `record` handler's row of a delivery.
#[derive(Queryable, Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    pub event_type: Option<String>,
    pub payload: String,
    pub recorded_at: NaiveDateTime,
}

/// One ledger entry a delivery wrote.
#[derive(Queryable, Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub kind: String,
    pub payment_id: String,
    pub order_id: Option<String>,
    pub amount: i64,
    pub currency: String,
    pub created_at: NaiveDateTime,
}

/// A payment a client key (`POST /payments`) created.
#[derive(Queryable, Debug, Clone, PartialEq, Eq)]
pub struct CreatedPayment {
    pub id: String,
    pub order_id: String,
    pub amount: i64,
    pub currency: String,
    pub status: String,
    pub created_at: NaiveDateTime,
}

/// Another queued delivery of the same endpoint about the same object.
#[derive(Queryable, Debug, Clone, PartialEq, Eq)]
pub struct RelatedDelivery {
    pub delivery_id: String,
    pub state: String,
    pub event_time: Option<NaiveDateTime>,
    pub received_at: NaiveDateTime,
}

/// Everything a delivery left behind besides its key, its history and its
/// outbox rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    pub event: Option<RecordedEvent>,
    pub ledger: Vec<LedgerEntry>,
    pub payments: Vec<CreatedPayment>,
    /// Its job, when its endpoint is queued.
    pub job: Option<JobRow>,
    /// Oldest event first; empty without an ordering key.
    pub related: Vec<RelatedDelivery>,
}

/// The client-key scope of `POST /payments`, with the tenant it was
/// scoped to: `Some(None)` for `POST /payments`, `Some(Some(t))` for
/// `tenant:t POST /payments`, `None` for any other endpoint.
fn payments_scope(endpoint: &str) -> Option<Option<&str>> {
    const ROUTE: &str = "POST /payments";
    if endpoint == ROUTE {
        return Some(None);
    }
    let tenant = endpoint.strip_prefix("tenant:")?.strip_suffix(ROUTE)?;
    tenant.strip_suffix(' ').map(Some)
}

impl DbConn {
    /// What `endpoint`/`delivery_id`'s handlers wrote.
    pub async fn effects(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
    ) -> Result<Effects, StoreError> {
        let event = with_conn!(self, |c| {
            events::table
                .find((endpoint, delivery_id))
                .select((events::event_type, events::payload, events::recorded_at))
                .first::<RecordedEvent>(c)
                .await
                .optional()
        })?;
        let ledger = with_conn!(self, |c| {
            ledger_entries::table
                .filter(ledger_entries::endpoint.eq(endpoint))
                .filter(ledger_entries::delivery_id.eq(delivery_id))
                .order(ledger_entries::id.asc())
                .select((
                    ledger_entries::kind,
                    ledger_entries::payment_id,
                    ledger_entries::order_id,
                    ledger_entries::amount,
                    ledger_entries::currency,
                    ledger_entries::created_at,
                ))
                .load::<LedgerEntry>(c)
                .await
        })?;
        let payments = match payments_scope(endpoint) {
            None => Vec::new(),
            Some(tenant) => with_conn!(self, |c| {
                let mut query = payments::table
                    .filter(payments::idempotency_key.eq(delivery_id))
                    .into_boxed();
                query = match tenant {
                    Some(tenant) => query.filter(payments::tenant.eq(tenant)),
                    None => query.filter(payments::tenant.is_null()),
                };
                query
                    .order(payments::created_at.asc())
                    .select((
                        payments::id,
                        payments::order_id,
                        payments::amount,
                        payments::currency,
                        payments::status,
                        payments::created_at,
                    ))
                    .load::<CreatedPayment>(c)
                    .await
            })?,
        };
        let job = self.job(endpoint, delivery_id).await?;
        let related = match job.as_ref().and_then(|job| job.ordering_key.as_deref()) {
            None => Vec::new(),
            Some(key) => with_conn!(self, |c| {
                queue_jobs::table
                    .filter(queue_jobs::endpoint.eq(endpoint))
                    .filter(queue_jobs::ordering_key.eq(key))
                    .filter(queue_jobs::delivery_id.ne(delivery_id))
                    .order((
                        queue_jobs::event_time.asc(),
                        queue_jobs::received_at.asc(),
                        queue_jobs::delivery_id.asc(),
                    ))
                    .limit(MAX_RELATED)
                    .select((
                        queue_jobs::delivery_id,
                        queue_jobs::state,
                        queue_jobs::event_time,
                        queue_jobs::received_at,
                    ))
                    .load::<RelatedDelivery>(c)
                    .await
            })?,
        };
        Ok(Effects {
            event,
            ledger,
            payments,
            job,
            related,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::payments_scope;

    #[test]
    fn the_payments_scope_names_its_tenant() {
        assert_eq!(payments_scope("POST /payments"), Some(None));
        assert_eq!(
            payments_scope("tenant:acme POST /payments"),
            Some(Some("acme"))
        );
        assert_eq!(payments_scope("shop"), None);
        assert_eq!(payments_scope("POST /orders"), None);
        assert_eq!(payments_scope("tenant:POST /payments"), None);
    }
}
