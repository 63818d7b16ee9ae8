//! What runs for a verified delivery, inside the claim's transaction.

mod payments;
mod record;

pub use payments::Payments;
pub use record::Record;

use crate::store::DbConn;
use chrono::NaiveDateTime;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A verified delivery, as handlers see it.
#[derive(Debug, Clone)]
pub struct Event {
    pub endpoint: String,
    pub provider: &'static str,
    pub delivery_id: String,
    pub event_type: Option<String>,
    pub payload: Value,
    /// The body exactly as received and verified.
    pub raw: bytes::Bytes,
    pub received_at: NaiveDateTime,
}

/// Business logic for verified deliveries.
///
/// `handle` runs inside the transaction that also completes the delivery's
/// key: write through `conn` and the writes commit together with the key, or
/// not at all. Return `Ok(Some(value))` to put `value` in the stored response
/// under the handler's name.
#[async_trait::async_trait(?Send)]
pub trait Handler: Send + Sync + 'static {
    async fn handle(&self, event: &Event, conn: &mut DbConn)
    -> Result<Option<Value>, HandlerError>;
}

#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The event can never succeed as sent (for example a payment without an
    /// amount). Its effects are rolled back and a 422 is stored, so every
    /// redelivery gets the same answer instead of running again.
    #[error("the event was rejected: {0}")]
    Rejected(String),
    #[error(transparent)]
    Database(#[from] crate::store::StoreError),
    /// Anything else: the transaction rolls back, the key is released and the
    /// provider's retry runs the handlers again.
    #[error(transparent)]
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

impl From<diesel::result::Error> for HandlerError {
    fn from(error: diesel::result::Error) -> Self {
        HandlerError::Database(error.into())
    }
}

/// Handlers by the name endpoints refer to them with (`handlers = [...]`).
#[derive(Clone)]
pub struct Registry {
    handlers: BTreeMap<String, Arc<dyn Handler>>,
}

impl Registry {
    /// An empty registry.
    pub fn empty() -> Registry {
        Registry {
            handlers: BTreeMap::new(),
        }
    }

    /// The built-in handlers: `record` and `payments`.
    pub fn builtin() -> Registry {
        Registry::empty()
            .with("record", Record)
            .with("payments", Payments)
    }

    pub fn with(mut self, name: &str, handler: impl Handler) -> Registry {
        self.handlers.insert(name.to_owned(), Arc::new(handler));
        self
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Handler>> {
        self.handlers.get(name).cloned()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.handlers.keys().map(String::as_str)
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::builtin()
    }
}
