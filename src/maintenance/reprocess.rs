//! `reprocess`: an operator deliberately runs a stored delivery's handlers
//! again (after a bug fix, or for one that was refused). Deduplication does
//! not stop it; the key's history records who did it and when.

use super::event_of;
use crate::engine::{EngineError, Outcome};
use crate::store::{StoreError, StoredResponse};
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

/// Runs the delivery's handlers again and stores their new answer, through
/// the engine's two-phase path: no transaction is open while a handler
/// works outside the database (a `forward`).
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
    let engine = webhooks.engine();
    let mut conn = engine.store().conn().await?;
    let row = conn
        .find_delivery(endpoint, delivery_id)
        .await?
        .ok_or_else(|| ReprocessError::NotFound {
            endpoint: endpoint.to_owned(),
            delivery_id: delivery_id.to_owned(),
        })?;
    let body = conn.request_body(endpoint, delivery_id).await?;
    drop(conn);
    let event = body
        .and_then(|body| event_of(&configured, &row, body))
        .ok_or(ReprocessError::NoPayload)?;
    let operation = RunHandlers::new(configured, event, engine.store().clock().clone());
    match engine.reprocess(&row, actor, &operation).await {
        Ok(Outcome::Fresh(response)) => Ok(response),
        Ok(_) => Err(ReprocessError::Busy),
        Err(EngineError::Operation(error)) => Err(ReprocessError::Failed(error.to_string())),
        Err(error) => Err(error.into()),
    }
}
