//! An endpoint's handlers as one engine operation: handlers with effects
//! outside the database perform first, under the claim's lease; the others
//! run in the claim's transaction; the response lists every handler's effect.

use super::Endpoint;
use crate::clock::SharedClock;
use crate::engine::{Landed, Operation, OperationError, Planned};
use crate::handlers::{Event, HandlerError};
use crate::log_text::escaped;
use crate::problem::{CONTENT_TYPE_PROBLEM, Problem};
use crate::store::{Claimed, DbConn, Flight, StoredResponse};
use crate::telemetry::traces::{self, KeyValue};
use actix_web::http::StatusCode;
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::sync::Arc;
use tracing::{Instrument, Span};

pub struct RunHandlers {
    endpoint: Arc<Endpoint>,
    /// Shared with the request that parsed it, which drops it last: see
    /// [`RunHandlers::shared`].
    event: Arc<Event>,
    /// What the external handlers returned (or, when reconciling, what the
    /// downstream says they did).
    external: RefCell<Map<String, Value>>,
    /// Whence `processed_at`: the store's clock, like every other timestamp.
    clock: SharedClock,
}

impl RunHandlers {
    pub fn new(endpoint: Arc<Endpoint>, event: Event, clock: SharedClock) -> RunHandlers {
        RunHandlers::shared(endpoint, Arc::new(event), clock)
    }

    /// [`RunHandlers::new`] for an event its caller keeps a handle to. On
    /// SQLite the operation runs, and is dropped, on the store's writer
    /// thread, through which every delivery passes one after another; the
    /// event's parsed body is a tree of small allocations made by the HTTP
    /// worker that parsed it. Freed on the writer they cost that thread
    /// about 2,600 instructions a delivery (callgrind), and jemalloc more
    /// to hand them back to the worker's cache. A caller that holds its own
    /// handle until the operation's result is back frees the event where
    /// it was made, off the serial path.
    pub fn shared(endpoint: Arc<Endpoint>, event: Arc<Event>, clock: SharedClock) -> RunHandlers {
        RunHandlers {
            endpoint,
            event,
            external: RefCell::new(Map::new()),
            clock,
        }
    }

    pub fn event(&self) -> &Event {
        &self.event
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Records an external handler's effect found by reconciliation.
    pub fn set_external(&self, handler: &str, effect: Value) {
        self.external
            .borrow_mut()
            .insert(handler.to_owned(), effect);
    }

    /// Puts a handler's effect into `effects`, or turns its error into the
    /// operation's.
    fn absorb(
        &self,
        effects: &mut Map<String, Value>,
        name: &str,
        result: Result<Option<Value>, HandlerError>,
    ) -> Result<(), OperationError> {
        match result {
            Ok(Some(effect)) => {
                effects.insert(name.to_owned(), effect);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(error) => Err(self.failure(name, error)),
        }
    }

    fn failure(&self, handler: &str, error: HandlerError) -> OperationError {
        match error {
            HandlerError::Rejected(detail) => {
                // A handler's words may quote the event: escaped, capped.
                tracing::warn!(%handler, detail = %escaped(&detail), "event rejected");
                let problem = Problem::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "event-rejected",
                    "Event rejected",
                    format!("{handler}: {detail}"),
                );
                OperationError::Rejected(StoredResponse {
                    status: problem.status,
                    content_type: CONTENT_TYPE_PROBLEM.into(),
                    body: problem.body().into(),
                    location: None,
                })
            }
            HandlerError::Database(e) => OperationError::Store(e),
            HandlerError::Failed(e) => {
                tracing::warn!(%handler, error = %escaped(&e.to_string()), "handler failed");
                OperationError::Failed(e)
            }
        }
    }
}

#[async_trait::async_trait(?Send)]
impl Operation for RunHandlers {
    fn has_external_effects(&self) -> bool {
        self.endpoint.handlers.iter().any(|(_, h)| h.external())
    }

    async fn run_external(&self, _claim: &Claimed) -> Result<(), OperationError> {
        for (name, handler) in self.endpoint.handlers.iter().filter(|(_, h)| h.external()) {
            let span = handler_span(name);
            let performed = handler.perform(&self.event).instrument(span.clone()).await;
            handler_done(&span, &performed);
            match performed {
                Ok(Some(effect)) => self.set_external(name, effect),
                Ok(None) => {}
                Err(error) => return Err(self.failure(name, error)),
            }
        }
        Ok(())
    }

    async fn run(
        &self,
        conn: &mut DbConn,
        claim: &Claimed,
    ) -> Result<StoredResponse, OperationError> {
        let mut effects = self.external.borrow().clone();
        let handlers: Vec<_> = self
            .endpoint
            .handlers
            .iter()
            .filter(|(_, h)| !h.external())
            .collect();
        let mut next = 0;
        while let Some((name, handler)) = handlers.get(next) {
            // Consecutive handlers that can share a flight send their
            // statements together (PostgreSQL); the rest run one by one.
            let landed = match conn.flight() {
                Some(flight) => {
                    let (names, futures): (Vec<_>, Vec<_>) = handlers[next..]
                        .iter()
                        .map_while(|(name, h)| {
                            let future = h.handle_in_flight(&self.event, flight)?;
                            Some((name.as_str(), traced_handler(name, future)))
                        })
                        .unzip();
                    let results = futures_util::future::join_all(futures).await;
                    names.into_iter().zip(results).collect()
                }
                None => Vec::new(),
            };
            if landed.is_empty() {
                let span = handler_span(name);
                let result = handler
                    .handle(&self.event, conn)
                    .instrument(span.clone())
                    .await;
                handler_done(&span, &result);
                self.absorb(&mut effects, name, result)?;
                next += 1;
                continue;
            }
            next += landed.len();
            // In configured order: the first failure is the one reported,
            // as if the handlers had run one after another.
            for (name, result) in landed {
                self.absorb(&mut effects, name, result)?;
            }
        }
        self.response(effects, claim)
    }

    fn run_in_flight<'f>(
        &'f self,
        flight: Flight<'f>,
    ) -> Option<LocalBoxFuture<'f, Result<Landed, OperationError>>> {
        // All of them or none: a handler that cannot fly needs the claim's
        // answer first, and so do those configured after it.
        let mut names = Vec::with_capacity(self.endpoint.handlers.len());
        let mut futures = Vec::with_capacity(self.endpoint.handlers.len());
        for (name, handler) in &self.endpoint.handlers {
            if handler.external() {
                return None;
            }
            let future = handler.handle_in_flight(&self.event, flight)?;
            names.push(name.as_str());
            futures.push(traced_handler(name, future));
        }
        Some(
            async move {
                let results = futures_util::future::join_all(futures).await;
                let mut effects = self.external.borrow().clone();
                // In configured order: the first failure is the one
                // reported, as if the handlers had run one after another.
                for (name, result) in names.into_iter().zip(results) {
                    self.absorb(&mut effects, name, result)?;
                }
                Ok(Box::new(effects) as Landed)
            }
            .boxed_local(),
        )
    }

    fn plan(
        &self,
        claim: &Claimed,
        ledger_id: &mut Option<i64>,
    ) -> Option<Result<Planned<'_>, OperationError>> {
        // All of them or none, in configured order: the first refusal is
        // the one stored, as if they had run one after another.
        let mut effects = self.external.borrow().clone();
        let mut writes = Vec::with_capacity(self.endpoint.handlers.len());
        for (name, handler) in &self.endpoint.handlers {
            if handler.external() {
                return None;
            }
            // Its span, as where it runs: here it decides, and the claim's
            // statement writes.
            let span = handler_span(name);
            let planned = span
                .in_scope(|| handler.plan(&self.event, ledger_id))?
                .map(|plan| {
                    writes.extend(plan.write);
                    plan.answer
                });
            handler_done(&span, &planned);
            if let Err(error) = self.absorb(&mut effects, name, planned) {
                return Some(Err(error));
            }
        }
        Some(
            self.response(effects, claim)
                .map(|response| Planned { response, writes }),
        )
    }

    fn finish_flight(
        &self,
        landed: Landed,
        claim: &Claimed,
    ) -> Result<StoredResponse, OperationError> {
        let effects = landed
            .downcast::<Map<String, Value>>()
            .map_err(|_| OperationError::Failed("the handlers' flight gave no effects".into()))?;
        self.response(*effects, claim)
    }
}

impl RunHandlers {
    /// The stored answer of a run whose handlers had `effects`.
    fn response(
        &self,
        effects: Map<String, Value>,
        claim: &Claimed,
    ) -> Result<StoredResponse, OperationError> {
        let processed_at = self
            .clock
            .now()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let body = Processed {
            attempt: claim.attempt,
            delivery_id: &self.event.delivery_id,
            effects: &effects,
            endpoint: &self.event.endpoint,
            event_type: self.event.event_type.as_deref(),
            processed_at: &processed_at,
            status: "processed",
        };
        Ok(StoredResponse {
            status: 200,
            content_type: "application/json".into(),
            body: serde_json::to_vec(&body)
                .map_err(|e| OperationError::Failed(e.into()))?
                .into(),
            location: None,
        })
    }
}

/// The stored answer to a processed delivery, serialized from borrowed
/// parts. It was a `json!` tree, whose keys serde_json sorts; the fields
/// keep that order, so an answer reads the same as the ones stored before
/// (a repeat gets its stored bytes, and clients may compare them). On
/// SQLite it is built inside the write gate, where the tree's copies and
/// map inserts were a twentieth of a delivery's instructions.
#[derive(serde::Serialize)]
struct Processed<'a> {
    attempt: i32,
    delivery_id: &'a str,
    effects: &'a Map<String, Value>,
    endpoint: &'a str,
    event_type: Option<&'a str>,
    processed_at: &'a str,
    status: &'static str,
}

/// A handler's flying future, within its span.
fn traced_handler<'f>(
    name: &str,
    future: LocalBoxFuture<'f, Result<Option<Value>, HandlerError>>,
) -> impl std::future::Future<Output = Result<Option<Value>, HandlerError>> + 'f {
    let span = handler_span(name);
    async move {
        let handled = future.await;
        handler_done(&tracing::Span::current(), &handled);
        handled
    }
    .instrument(span)
}

/// One handler's span, at debug: created only when exported (or logged at
/// debug). Its name is the configured one, never the request's.
fn handler_span(name: &str) -> Span {
    let span = tracing::debug_span!("handler", handler = %name);
    traces::set_attributes(&span, || {
        vec![KeyValue::new("webhook.handler", name.to_owned())]
    });
    span
}

/// A handler that failed or refused the event: the span's status is Error.
fn handler_done(span: &Span, result: &Result<Option<Value>, HandlerError>) {
    if let Err(error) = result {
        traces::set_error(span, &error.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::Processed;
    use serde_json::{Map, Value, json};

    /// What `response` built before: a `json!` tree, keys sorted.
    fn as_tree(p: &Processed<'_>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "status": p.status,
            "endpoint": p.endpoint,
            "delivery_id": p.delivery_id,
            "event_type": p.event_type,
            "attempt": p.attempt,
            "processed_at": p.processed_at,
            "effects": p.effects,
        }))
        .unwrap()
    }

    #[test]
    fn a_processed_answer_has_the_bytes_the_json_tree_had() {
        let mut effects = Map::new();
        effects.insert(
            "payments".into(),
            json!({"kind": "charge", "ledger_entry_id": 7}),
        );
        effects.insert("record".into(), json!({"recorded": true}));
        effects.insert("zz \"quoted\"\n".into(), Value::Null);
        let empty = Map::new();
        let cases = [
            Processed {
                attempt: 1,
                delivery_id: "msg_2Lk",
                effects: &effects,
                endpoint: "shop",
                event_type: Some("payment.succeeded"),
                processed_at: "2026-12-05T06:00:00.123Z",
                status: "processed",
            },
            Processed {
                attempt: 3,
                delivery_id: "a \"quoted\" id\u{7f}\u{1b}é",
                effects: &empty,
                endpoint: "ünï/codé",
                event_type: None,
                processed_at: "2026-12-05T06:00:00.000Z",
                status: "processed",
            },
        ];
        for case in &cases {
            let bytes = serde_json::to_vec(case).unwrap();
            assert_eq!(
                String::from_utf8(bytes).unwrap(),
                String::from_utf8(as_tree(case)).unwrap()
            );
        }
    }
}
