//! Queued mode's half inside the request: the delivery's job is written in
//! the transaction that claims and completes its key, and the answer stored
//! with the key is the acknowledgement. The provider hears 2xx only after
//! that commit, and a redelivery replays the same acknowledgement; a worker
//! runs the handlers later (`maintenance::queue`).

use crate::engine::{Operation, OperationError, RetryPolicy};
use crate::handlers::Event;
use crate::store::queue::NewJob;
use crate::store::{Claimed, DbConn, StoredResponse};
use chrono::{DateTime, NaiveDateTime};
use serde_json::{Value, json};

/// `[endpoints.NAME] mode = "queued"` and its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSettings {
    pub policy: RetryPolicy,
    /// A JSON pointer to the object the event is about (`/data/object/id`):
    /// deliveries with the same value run one at a time, oldest event first.
    pub ordering_key: Option<String>,
    /// A JSON pointer to the event's creation time (Unix seconds or
    /// milliseconds, or RFC 3339); without it, arrival decides the order.
    pub event_time: Option<String>,
}

/// Writes the job and answers 202.
pub struct Enqueue {
    event: Event,
    settings: QueueSettings,
}

impl Enqueue {
    pub fn new(event: Event, settings: QueueSettings) -> Enqueue {
        Enqueue { event, settings }
    }

    /// The object the event is about, as text.
    fn ordering_key(&self) -> Option<String> {
        let value =
            crate::json_pointer::get(&self.event.payload, self.settings.ordering_key.as_deref()?)?;
        match value {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    fn event_time(&self) -> Option<NaiveDateTime> {
        event_time(crate::json_pointer::get(
            &self.event.payload,
            self.settings.event_time.as_deref()?,
        )?)
    }
}

/// A creation time as providers write it: Unix seconds or milliseconds, or
/// RFC 3339 text.
pub fn event_time(value: &Value) -> Option<NaiveDateTime> {
    match value {
        Value::Number(n) => {
            let n = n.as_i64()?;
            // Past 1e11 seconds is the year 5138: milliseconds.
            let millis = if n.abs() >= 100_000_000_000 {
                n
            } else {
                n.checked_mul(1000)?
            };
            DateTime::from_timestamp_millis(millis).map(|t| t.naive_utc())
        }
        Value::String(s) => DateTime::parse_from_rfc3339(s).ok().map(|t| t.naive_utc()),
        _ => None,
    }
}

#[async_trait::async_trait(?Send)]
impl Operation for Enqueue {
    async fn run(
        &self,
        conn: &mut DbConn,
        claim: &Claimed,
    ) -> Result<StoredResponse, OperationError> {
        let ordering_key = self.ordering_key();
        let job = NewJob {
            endpoint: &self.event.endpoint,
            delivery_id: &claim.delivery_id,
            ordering_key: ordering_key.as_deref(),
            event_time: self.event_time(),
            received_at: self.event.received_at,
        };
        // Other instances are told after the commit, by the notifier
        // (`maintenance::queue`): a NOTIFY inside this transaction would
        // make every enqueue's commit wait its turn on PostgreSQL's one
        // notification queue lock.
        conn.enqueue(&job).await.map_err(OperationError::Store)?;
        let body = json!({
            "status": "queued",
            "endpoint": self.event.endpoint,
            "delivery_id": claim.delivery_id,
            "event_type": self.event.event_type,
        });
        Ok(StoredResponse {
            status: 202,
            content_type: "application/json".into(),
            body: serde_json::to_vec(&body)
                .map_err(|e| OperationError::Failed(e.into()))?
                .into(),
            location: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_times_are_seconds_milliseconds_or_rfc_3339() {
        let at = |v: Value| event_time(&v).map(|t| t.and_utc().timestamp_millis());
        assert_eq!(at(json!(1_767_225_600)), Some(1_767_225_600_000));
        assert_eq!(at(json!(1_767_225_600_123u64)), Some(1_767_225_600_123));
        assert_eq!(at(json!("2026-01-01T00:00:00.5Z")), Some(1_767_225_600_500));
        assert_eq!(at(json!("yesterday")), None);
        assert_eq!(at(json!(null)), None);
    }
}
