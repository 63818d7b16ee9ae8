//! What runs for a verified delivery, inside the claim's transaction.

mod forward;
mod payments;
pub mod publish;
mod record;

pub use forward::{Forward, ForwarderSettings};
pub use payments::Payments;
pub use publish::Publish;
pub use record::Record;

use crate::store::{DbConn, Flight, PlannedWrite};
use chrono::NaiveDateTime;
use futures_util::future::LocalBoxFuture;
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
    /// Queued endpoints with an ordering key: an event older than the newest
    /// one already processed for its object. It is recorded and
    /// acknowledged; handlers that apply state should skip it (the built-in
    /// `payments` does).
    pub stale: bool,
}

/// Business logic for verified deliveries.
///
/// `handle` runs inside the transaction that also completes the delivery's
/// key: write through `conn` and the writes commit together with the key, or
/// not at all. Return `Ok(Some(value))` to put `value` in the stored response
/// under the handler's name.
///
/// A handler whose work leaves the database (an HTTP call to another system)
/// says so with [`Handler::external`] and does that work in
/// [`Handler::perform`]: it runs under a committed, renewed lease before the
/// transaction, must pass [`Event::idempotency_key`] downstream, and answers
/// [`Handler::reconcile`] when a crash left its outcome unknown.
#[async_trait::async_trait(?Send)]
pub trait Handler: Send + Sync + 'static {
    async fn handle(
        &self,
        _event: &Event,
        _conn: &mut DbConn,
    ) -> Result<Option<Value>, HandlerError> {
        Ok(None)
    }

    /// Whether this handler acts outside the database.
    fn external(&self) -> bool {
        false
    }

    /// `handle`, written so that its statements can travel in one flight
    /// with those of the handlers beside it (PostgreSQL pipelining; see
    /// [`Flight`]): the same effect, the same answer. Consecutive handlers
    /// that return `Some` here are polled together and their statements sent
    /// without waiting for each other's answers, so they must not depend on
    /// each other's writes: a statement the connection has not prepared yet
    /// costs a `Parse` round trip first and may run after one sent later. A
    /// handler that returns `None` (the default) runs alone through `handle`,
    /// after the flight before it has landed. Errors are reported in the
    /// configured order, as if the handlers had run one after another.
    ///
    /// Where every handler of the endpoint flies, their statements travel
    /// right behind `BEGIN` and the claim, before anyone knows whether the
    /// claim won (one round trip less per fresh delivery). For a duplicate
    /// that lost the claim they run too, and are rolled back with its
    /// transaction: they must only write to the database, as here always.
    fn handle_in_flight<'a>(
        &'a self,
        _event: &'a Event,
        _flight: Flight<'a>,
    ) -> Option<LocalBoxFuture<'a, Result<Option<Value>, HandlerError>>> {
        None
    }

    /// `handle`'s whole work as data, decided from the event alone before
    /// the claim: the one row it would write, of a table the store knows
    /// ([`PlannedWrite`]), and the answer it would give. `ledger_id` is an id
    /// drawn for the delivery's ledger row; a plan that writes one takes it
    /// (and where it is gone already, returns `None`). A plan must mean
    /// exactly what `handle` does: the same row, the same answer, the same
    /// refusal. It must decide from the event and the id alone: on SQLite
    /// a delivery that finds no spare id is planned with a stand-in first,
    /// and a plan that took it is made again with a reserved id, with no
    /// tracing subscriber (its spans and lines are the first plan's).
    ///
    /// Where every handler of an endpoint plans, a fresh delivery on
    /// PostgreSQL claims its key, makes the writes and stores its answer in
    /// one statement, its own transaction (`store::one_statement`); a claim
    /// that loses writes nothing. `None` (the default): the handler runs
    /// through [`Handler::handle_in_flight`] or [`Handler::handle`].
    fn plan<'a>(
        &'a self,
        _event: &'a Event,
        _ledger_id: &mut Option<i64>,
    ) -> Option<Result<Plan<'a>, HandlerError>> {
        None
    }

    /// The work outside the database (only for [`Handler::external`]).
    async fn perform(&self, _event: &Event) -> Result<Option<Value>, HandlerError> {
        Ok(None)
    }

    /// Asks the outside system what became of `event` after its claim was
    /// abandoned mid-way (only for [`Handler::external`]).
    async fn reconcile(&self, _event: &Event) -> Result<Reconciled, HandlerError> {
        Ok(Reconciled::Unknown)
    }
}

/// A handler's whole work, decided from the event alone: see
/// [`Handler::plan`].
#[derive(Debug)]
pub struct Plan<'a> {
    /// The row it writes, if any.
    pub write: Option<PlannedWrite<'a>>,
    /// Its answer, as `handle` gives it: stored under the handler's name.
    pub answer: Option<Value>,
}

/// What the outside system says about an abandoned delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum Reconciled {
    /// It happened; this is what `perform` would have returned.
    Done(Option<Value>),
    /// It never happened: release the key, so the provider's retry runs it.
    NotDone,
    /// Cannot tell yet (the system is unreachable): ask again later.
    Unknown,
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

impl Event {
    /// The key to pass to a downstream system: `<endpoint>:<delivery_id>`.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.endpoint, self.delivery_id)
    }
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

    /// Adds a `forward` handler per `[forwarders.NAME]` table.
    pub fn with_forwarders(mut self, forwarders: &[ForwarderSettings]) -> Registry {
        for f in forwarders {
            self = self.with(&f.name, Forward::new(&f.url, f.timeout, f.retries));
        }
        self
    }

    /// Adds a `publish:NAME` handler per `[publishers.NAME]` table.
    pub fn with_publishers(
        mut self,
        publishers: &[crate::publishers::PublisherSettings],
        clock: &crate::clock::SharedClock,
    ) -> Registry {
        for p in publishers {
            let name = format!("{}{}", publish::PREFIX, p.name);
            self = self.with(&name, Publish::new(p, clock.clone()));
        }
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
