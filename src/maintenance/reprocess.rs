//! `reprocess`: an operator deliberately runs a stored delivery's handlers
//! again (after a bug fix, or for one that was refused). Deduplication does
//! not stop it; the key's history records who did it and when.

use super::event_of;
use crate::engine::{EngineError, Operation, OperationError};
use crate::store::{Claimed, StoreError, StoredResponse};
use crate::webhooks::{RunHandlers, Webhooks};

#[derive(Debug, thiserror::Error)]
pub enum ReprocessError {
    #[error("no endpoint named {0:?} is configured")]
    UnknownEndpoint(String),
    #[error("no delivery {delivery_id:?} is stored for endpoint {endpoint:?}")]
    NotFound {
        endpoint: String,
        delivery_id: String,
    },
    #[error("the delivery's body was not stored, so it cannot be run again")]
    NoPayload,
    #[error("the delivery is being processed right now; try again after its lease")]
    Busy,
    #[error("the handlers failed again: {0}")]
    Failed(String),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl From<StoreError> for ReprocessError {
    fn from(error: StoreError) -> Self {
        ReprocessError::Engine(error.into())
    }
}

/// Runs the delivery's handlers again and stores their new answer.
pub async fn reprocess(
    webhooks: &Webhooks,
    endpoint: &str,
    delivery_id: &str,
    actor: &str,
) -> Result<StoredResponse, ReprocessError> {
    let configured = webhooks
        .endpoint(endpoint)
        .cloned()
        .ok_or_else(|| ReprocessError::UnknownEndpoint(endpoint.to_owned()))?;
    let store = webhooks.engine().store();
    let mut conn = store.conn().await?;
    let row = conn
        .find_delivery(endpoint, delivery_id)
        .await?
        .ok_or_else(|| ReprocessError::NotFound {
            endpoint: endpoint.to_owned(),
            delivery_id: delivery_id.to_owned(),
        })?;
    let now = store.clock().naive_now();
    if row.status != crate::store::COMPLETED
        && row.lease_expires_at.is_some_and(|until| until > now)
    {
        return Err(ReprocessError::Busy);
    }
    let body = conn.request_body(endpoint, delivery_id).await?;
    drop(conn);
    let event = body
        .and_then(|body| event_of(&configured, &row, body))
        .ok_or(ReprocessError::NoPayload)?;
    let operation = RunHandlers::new(configured, event);
    let claimed = Claimed {
        delivery_id: delivery_id.to_owned(),
        lease_owner: format!("reprocess/{actor}"),
        attempt: row.attempts + 1,
        taken_over: false,
    };
    let mut tx = store.begin().await?;
    let outcome = match operation.run_external(&claimed).await {
        Ok(()) => operation.run(tx.conn(), &claimed).await,
        Err(error) => Err(error),
    };
    let response = match outcome {
        Ok(response) => response,
        // A final refusal is an answer too: it replaces the stored one.
        Err(OperationError::Rejected(response)) => {
            if let Err(error) = tx.rollback().await {
                tracing::warn!(%error, "rollback failed");
            }
            tx = store.begin().await?;
            response
        }
        Err(error) => {
            if let Err(error) = tx.rollback().await {
                tracing::warn!(%error, "rollback failed");
            }
            let detail = error.to_string();
            let mut conn = store.conn().await?;
            conn.record_history(
                endpoint,
                delivery_id,
                "reprocess-failed",
                Some(actor),
                Some(&detail),
                store.clock().naive_now(),
            )
            .await?;
            return Err(ReprocessError::Failed(detail));
        }
    };
    let conn = tx.conn();
    conn.replace_response(endpoint, delivery_id, &response, store.clock().naive_now())
        .await?;
    let detail = format!("answered {}", response.status);
    conn.record_history(
        endpoint,
        delivery_id,
        "reprocessed",
        Some(actor),
        Some(&detail),
        store.clock().naive_now(),
    )
    .await?;
    tx.commit().await?;
    // Redeliveries get the new answer from now on, in this process; another
    // instance's cache may answer the old one for up to its TTL.
    store.replay_cache().forget(endpoint, delivery_id);
    Ok(response)
}
