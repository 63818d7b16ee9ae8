//! `POST /webhooks/{endpoint}`: limit the body, verify the signature, take
//! the provider's delivery id as the key, and hand the rest to the engine.

mod enqueue;
mod operation;
mod settings;
mod traced;

pub use crate::payload::{NUL_REPLACEMENT, parse_payload, replace_nul};
pub use enqueue::{Enqueue, QueueSettings, event_time};
pub use operation::RunHandlers;
pub use settings::EndpointSettings;

use crate::clock::SharedClock;
use crate::engine::{ClaimRequest, Engine, EngineError, Operation, Outcome};
use crate::handlers::{Event, Handler};
use crate::log_text::{Escaped, escaped};
use crate::problem::Problem;
use crate::providers::{Provider, Rejection, SignedRequest, Verified};
use crate::publishers::OutboxSignal;
use crate::reply;
use crate::telemetry::in_span::InSpanExt;
use crate::telemetry::metrics::{self, Conflict};
use crate::telemetry::request_id::{AnswerLogged, RouteLabel, millis};
use crate::traffic::{self, Traffic};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use bytes::Bytes;
use chrono::NaiveDateTime;
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{Instrument, field};

/// The default body limit of an endpoint: 1 MiB, checked before hashing.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// A configured webhook endpoint: who signs for it and what runs for it.
pub struct Endpoint {
    pub name: String,
    pub provider: Arc<dyn Provider>,
    pub handlers: Vec<(String, Arc<dyn Handler>)>,
    pub max_body: usize,
    /// This endpoint's own retention (`[endpoints.NAME] retention`); `None`:
    /// the engine's, which is the global one.
    pub retention: Option<Duration>,
    /// `mode = "queued"`: acknowledge once the job is committed, run the
    /// handlers on a worker. `None`: inline, in the request.
    pub queue: Option<QueueSettings>,
}

impl Endpoint {
    /// Whether a `publish:NAME` handler runs here: its deliveries write
    /// outbox rows, and the relay is woken once they are committed.
    pub fn publishes(&self) -> bool {
        self.handlers
            .iter()
            .any(|(name, _)| name.starts_with(crate::handlers::publish::PREFIX))
    }
}

/// The webhook face: the endpoints and the engine behind them. Mount it in an
/// actix `App` with [`Webhooks::configure`].
#[derive(Clone)]
pub struct Webhooks {
    engine: Engine,
    /// Looked up by the request's path segment on every request; foldhash,
    /// since the map is built once from the configuration.
    endpoints: Arc<HashMap<String, Arc<Endpoint>, RandomState>>,
    /// The clock that signed timestamps are checked against: the store's,
    /// unless [`Webhooks::with_clock`] fixed another.
    clock: SharedClock,
    /// Wakes this process's queue workers when a job was committed.
    queue_wake: Arc<tokio::sync::Notify>,
    /// Tells the notifier that a job was committed, for other instances.
    queue_enqueued: Arc<tokio::sync::Notify>,
    /// Wakes the relay when publications were committed.
    outbox: OutboxSignal,
    /// What the dashboard draws: each answer's outcome and time, counted
    /// in memory and flushed apart from the requests.
    traffic: Traffic,
}

impl Webhooks {
    pub fn new(engine: Engine, endpoints: impl IntoIterator<Item = Endpoint>) -> Webhooks {
        let endpoints = endpoints
            .into_iter()
            .map(|e| (e.name.clone(), Arc::new(e)))
            .collect();
        let engine_clock = engine.store().clock().clone();
        Webhooks {
            clock: engine_clock.clone(),
            engine,
            endpoints: Arc::new(endpoints),
            queue_wake: Arc::default(),
            queue_enqueued: Arc::default(),
            outbox: OutboxSignal::default(),
            traffic: Traffic::new(engine_clock),
        }
    }

    /// Checks signed timestamps against `clock` instead of the store's:
    /// recorded fixtures and published vectors verify at their own time
    /// while the tolerance stays on. Leases, retention and the rows'
    /// timestamps still follow the store's clock.
    pub fn with_clock(mut self, clock: SharedClock) -> Webhooks {
        self.clock = clock;
        self
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn endpoint(&self, name: &str) -> Option<&Arc<Endpoint>> {
        self.endpoints.get(name)
    }

    /// Every configured endpoint.
    pub fn endpoints(&self) -> impl Iterator<Item = &Arc<Endpoint>> {
        self.endpoints.values()
    }

    /// What this process's queue workers wait on between jobs.
    pub fn queue_wake(&self) -> &Arc<tokio::sync::Notify> {
        &self.queue_wake
    }

    /// What the relay waits on, and what deliveries that wrote publications
    /// tell once they are committed.
    pub fn outbox_signal(&self) -> &OutboxSignal {
        &self.outbox
    }

    /// The traffic counters this face's answers are counted in (flush
    /// them with [`Traffic::flush`]).
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    /// What the notifier waits on to tell other instances of new jobs.
    pub fn queue_enqueued(&self) -> &Arc<tokio::sync::Notify> {
        &self.queue_enqueued
    }

    /// Registers `POST /webhooks/{endpoint}` on an actix app or scope.
    ///
    /// Each endpoint whose name is plain (see [`is_plain_segment`]) gets
    /// its own literal path first, `/webhooks/shop`, which actix matches by
    /// comparing strings. It matches a path with a segment in braces by a
    /// regex with captures: about 1,200 instructions a request, a fortieth
    /// of a replay's (callgrind). Both reach the same handlers; anything
    /// else (an unknown endpoint, a name written percent-encoded or with
    /// characters a literal path would read differently) goes to
    /// `/webhooks/{endpoint}` as before. Logs, metrics and traces name the
    /// route `/webhooks/{endpoint}` either way ([`RouteLabel`]).
    pub fn configure(&self, cfg: &mut web::ServiceConfig) {
        cfg.app_data(web::Data::new(self.clone()));
        let mut literal = Vec::new();
        for endpoint in self.endpoints().filter(|e| is_plain_segment(&e.name)) {
            let path = format!("/webhooks/{}", endpoint.name);
            let name: Arc<str> = endpoint.name.as_str().into();
            let challenged = name.clone();
            // One resource per method, as `App::route` makes them, so that
            // another method falls through to the pattern's and is
            // answered as before.
            cfg.route(
                &path,
                web::post().to(
                    move |request: HttpRequest,
                          payload: web::Payload,
                          webhooks: web::Data<Webhooks>| {
                        receive(request, name.clone(), payload, webhooks)
                    },
                ),
            )
            .route(
                &path,
                web::get().to(move |request: HttpRequest, webhooks: web::Data<Webhooks>| {
                    challenge(request, challenged.clone(), webhooks)
                }),
            );
            literal.push(path);
        }
        cfg.app_data(RouteLabel::new(literal, ROUTE))
            .route(ROUTE, web::post().to(receive_at_pattern))
            .route(ROUTE, web::get().to(challenge_at_pattern));
    }
}

/// The route's pattern, as logs, metrics and traces name it.
pub(crate) const ROUTE: &str = "/webhooks/{endpoint}";

/// Whether `name` can be a literal path segment that actix matches exactly
/// when, and only when, `/webhooks/{endpoint}` would capture `name`:
/// unreserved characters only (which actix's path decoding never changes),
/// and not a dot segment.
fn is_plain_segment(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.bytes().all(crate::uri_text::is_unreserved)
}

async fn challenge_at_pattern(
    request: HttpRequest,
    path: web::Path<String>,
    webhooks: web::Data<Webhooks>,
) -> HttpResponse {
    challenge(request, path.into_inner(), webhooks).await
}

async fn receive_at_pattern(
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    webhooks: web::Data<Webhooks>,
) -> HttpResponse {
    receive(request, path.into_inner(), payload, webhooks).await
}

/// `GET /webhooks/{endpoint}`: the unsigned check a provider sends when a
/// destination is created (Braintree's `bt_challenge`). It claims nothing
/// and stores nothing; an endpoint whose provider sends none answers 405,
/// as a route without `GET` would.
async fn challenge(
    request: HttpRequest,
    path: impl AsRef<str>,
    webhooks: web::Data<Webhooks>,
) -> HttpResponse {
    let reply = webhooks
        .endpoint(path.as_ref())
        .and_then(|endpoint| endpoint.provider.challenge(request.query_string()));
    match reply {
        Some(reply) => HttpResponse::Ok()
            .content_type(reply.content_type)
            .body(reply.body),
        None => {
            let mut response = Problem::method_not_allowed().to_response();
            response.headers_mut().insert(
                actix_web::http::header::ALLOW,
                actix_web::http::header::HeaderValue::from_static("POST"),
            );
            response
        }
    }
}

/// `POST /webhooks/{endpoint}`, with the endpoint's name from the path.
async fn receive(
    request: HttpRequest,
    path: impl AsRef<str>,
    payload: web::Payload,
    webhooks: web::Data<Webhooks>,
) -> HttpResponse {
    // Made before it is entered: a caller's trace can only be continued
    // by a span that has not started. Lent, not looked up again: see
    // `InSpan`.
    let span = traced::webhook_span(&request, path.as_ref());
    receive_in(request, path, payload, webhooks, &span)
        .in_span(&span)
        .await
}

/// [`receive`] inside `span`, the request's `webhook` span.
async fn receive_in(
    request: HttpRequest,
    path: impl AsRef<str>,
    payload: web::Payload,
    webhooks: web::Data<Webhooks>,
    span: &tracing::Span,
) -> HttpResponse {
    let started = Instant::now();
    let answered = answer(&request, path.as_ref(), payload, &webhooks, span, started).await;
    // One record for all: each record is a lookup of the span, a lock of
    // its extensions and an append to its formatted fields, in every layer
    // (a `None` records nothing). The fields are visited in this order,
    // the span's own, so the line reads as if each had been recorded when
    // it was known.
    let delivery = answered
        .delivery
        .as_ref()
        .map(|(id, event_type)| delivery_fields(id, event_type.as_deref()));
    tracing::record_all!(
        span,
        delivery_id = delivery.as_ref().map(|(id, _)| id),
        event_type = delivery.as_ref().map(|(_, event_type)| event_type),
        outcome = answered.outcome,
        reason = answered.reason.as_deref(),
        duration_ms = millis(started.elapsed()),
    );
    traced::answered(span, &answered);
    let status = answered.response.status().as_u16();
    match &answered.detail {
        Some(detail) => tracing::info!(status, detail = %escaped(detail), "delivery answered"),
        None => tracing::info!(status, "delivery answered"),
    }
    // This line is the request's info line; the request's own closing line
    // goes to debug.
    request.extensions_mut().insert(AnswerLogged);
    answered.response
}

/// A delivery's answer and how to log it.
struct Answered {
    response: HttpResponse,
    /// `rejected`, or what the engine decided (see `reply::outcome_name`).
    outcome: &'static str,
    /// A refusal's problem type suffix.
    reason: Option<String>,
    /// Why it was refused, in words (never a secret: see `Rejection`).
    detail: Option<String>,
    /// The delivery's id and event type, still to be recorded on the
    /// `webhook` span with the answer: an early replay's, which nothing
    /// logs between its cache hit and its answer, so one record of the span
    /// serves for both (see [`replay_early`]).
    delivery: Option<(String, Option<String>)>,
}

impl Answered {
    fn refused(problem: &Problem, detail: Option<String>) -> Answered {
        Answered {
            response: problem.to_response(),
            outcome: "rejected",
            reason: Some(problem.slug().to_owned()),
            detail,
            delivery: None,
        }
    }
}

/// Verifies and processes one delivery, counting it in the metrics; `span`
/// is the request's `webhook` span, the current one.
async fn answer(
    request: &HttpRequest,
    name: &str,
    payload: web::Payload,
    webhooks: &Webhooks,
    span: &tracing::Span,
    started: Instant,
) -> Answered {
    // An unknown endpoint is not counted per endpoint: its name comes from
    // the request, and would make a time series per probe.
    let Some(endpoint) = webhooks.endpoint(name).cloned() else {
        return Answered::refused(&Problem::unknown_endpoint(name), None);
    };
    let provider = endpoint.provider.name();
    metrics::delivery_received(&endpoint.name, provider);
    let refuse = |problem: Problem, detail: Option<String>| {
        refused(webhooks, &endpoint, problem, detail, started)
    };
    let body = match crate::body::read_limited(request.headers(), payload, endpoint.max_body).await
    {
        Ok(body) => body,
        Err(problem) => return refuse(problem, None),
    };
    let refuse_rejection =
        |rejection: Rejection| refused_rejection(webhooks, &endpoint, rejection, started);
    // Created only when exported (it is at debug): the provider's
    // preparation (a certificate fetched) and the signature check.
    let verifying = tracing::debug_span!("verify");
    if let Some(preparing) = endpoint.provider.prepare(request.headers())
        && let Err(rejection) = preparing.instrument(verifying.clone()).await
    {
        traced::refused(&verifying, &rejection);
        return refuse_rejection(rejection);
    }
    let signed = SignedRequest {
        headers: request.headers(),
        body: &body,
        method: request.method().as_str(),
        query: request.query_string(),
    };
    let signature = verifying.in_scope(|| {
        let verified = endpoint.provider.verify(&signed, webhooks.clock.now());
        if let Ok(verified) = &verified {
            tracing::debug!(secret_index = verified.secret_index, "signature verified");
        }
        verified
    });
    let verified = match signature {
        Ok(verified) => verified,
        Err(rejection) => {
            traced::refused(&verifying, &rejection);
            return refuse_rejection(rejection);
        }
    };
    let body_fingerprint = crate::digest_hex::sha256_hex(&body);
    if let Some(answered) = replay_early(
        webhooks,
        &endpoint,
        &signed,
        &body_fingerprint,
        span,
        started,
    ) {
        return answered;
    }
    // Boxed: what follows (the parse, the claim, the handlers) would
    // otherwise size the future of every request, a repeat's too. Inline
    // it made the boxed handler future over 1 KiB, a size glibc serves
    // from its large bins after consolidating the fast ones: a
    // `malloc_consolidate` per request.
    Box::pin(answer_fresh(
        webhooks,
        &endpoint,
        &signed,
        &body,
        &verified,
        body_fingerprint,
        verifying,
        span,
        started,
    ))
    .await
}

/// The rest of [`answer`] for a delivery the replay cache did not answer:
/// parsed, claimed and processed.
#[allow(clippy::too_many_arguments)]
async fn answer_fresh(
    webhooks: &Webhooks,
    endpoint: &Arc<Endpoint>,
    signed: &SignedRequest<'_>,
    body: &Bytes,
    verified: &Verified,
    body_fingerprint: String,
    verifying: tracing::Span,
    span: &tracing::Span,
    started: Instant,
) -> Answered {
    let provider = endpoint.provider.name();
    // Read here, once verified, rather than on arrival: a repeat answered
    // from memory above never needs it.
    let received_at = webhooks.engine().store().clock().naive_now();
    let incoming = verifying.in_scope(|| {
        deliveries_of(
            endpoint,
            signed,
            body,
            verified,
            body_fingerprint,
            received_at,
        )
    });
    let incoming = match incoming {
        Ok(incoming) => incoming,
        Err(rejection) => {
            traced::refused(&verifying, &rejection);
            return refused_rejection(webhooks, endpoint, rejection, started);
        }
    };
    drop(verifying);
    metrics::delivery_verified(&endpoint.name, provider);
    let deliveries = match incoming {
        Incoming::Handshake(reply) => {
            tracing::info!("handshake answered");
            return Answered {
                response: HttpResponse::Ok()
                    .content_type(reply.content_type)
                    .body(reply.body),
                outcome: "handshake",
                reason: None,
                detail: None,
                delivery: None,
            };
        }
        Incoming::Deliveries(deliveries) => deliveries,
    };
    if let Some((claim, _)) = deliveries.first() {
        record_delivery(span, &claim.scope, &claim.key, claim.event_type.as_deref());
    }
    let batch = deliveries.len() > 1;
    let mut results = Vec::with_capacity(deliveries.len());
    for (claim, event) in deliveries {
        // Boxed: inline, it made this request's future 16 KiB (against 1
        // KiB), held by every request in flight.
        let result = Box::pin(process_one(webhooks, endpoint, claim, event, span.clone())).await;
        let Some(result) = result else {
            let problem = Problem::processing_failed();
            metrics::delivery_failed(&endpoint.name, provider, problem.slug(), started.elapsed());
            webhooks.traffic.record(
                &endpoint.name,
                traffic::Outcome::failed(problem.slug()),
                started.elapsed(),
            );
            return Answered {
                response: problem.to_response(),
                outcome: "failed",
                reason: None,
                detail: None,
                delivery: None,
            };
        };
        count(
            &webhooks.traffic,
            &endpoint.name,
            provider,
            &result.1,
            started.elapsed(),
        );
        // A batch stops at the first item that did not finish: the provider
        // retries the whole batch, and the finished items replay.
        let stop = !finished(&result.1);
        results.push(result);
        if stop {
            break;
        }
    }
    respond_to(endpoint.provider.as_ref(), results, batch)
}

/// A refused delivery's answer, counted in the metrics and the traffic.
fn refused(
    webhooks: &Webhooks,
    endpoint: &Endpoint,
    problem: Problem,
    detail: Option<String>,
    started: Instant,
) -> Answered {
    let provider = endpoint.provider.name();
    metrics::delivery_rejected(&endpoint.name, provider, problem.slug(), started.elapsed());
    webhooks.traffic.record(
        &endpoint.name,
        traffic::Outcome::rejected(problem.slug()),
        started.elapsed(),
    );
    Answered::refused(&problem, detail)
}

/// A refused verification's answer: its problem, with the provider's own
/// status for a bad signature where it has one.
fn refused_rejection(
    webhooks: &Webhooks,
    endpoint: &Endpoint,
    rejection: Rejection,
    started: Instant,
) -> Answered {
    let mut problem = Problem::from(&rejection);
    if rejection == Rejection::InvalidSignature
        && let Some(status) = endpoint.provider.invalid_signature_status()
        && let Ok(status) = actix_web::http::StatusCode::from_u16(status)
    {
        problem.status = status.as_u16();
    }
    refused(
        webhooks,
        endpoint,
        problem,
        Some(rejection.to_string()),
        started,
    )
}

/// The request's first delivery on its span: its id and event type.
fn record_delivery(
    span: &tracing::Span,
    endpoint: &str,
    delivery_id: &str,
    event_type: Option<&str>,
) {
    let (logged_id, logged_type) = delivery_fields(delivery_id, event_type);
    tracing::record_all!(span, delivery_id = logged_id, event_type = logged_type);
    traced::delivery(span, endpoint, delivery_id, event_type);
}

/// A delivery's `delivery_id` and `event_type` as the `webhook` span logs
/// them: escaped, and an absent event type empty. A delivery id is visible
/// ASCII (`check_key`), but the event type is any string of the sender's
/// body.
fn delivery_fields<'a>(
    delivery_id: &'a str,
    event_type: Option<&'a str>,
) -> (
    field::DisplayValue<Escaped<'a>>,
    field::DisplayValue<Escaped<'a>>,
) {
    (
        field::display(escaped(delivery_id)),
        field::display(escaped(event_type.unwrap_or(""))),
    )
}

/// An exact repeat answered from the replay cache as soon as its signature
/// is verified, before its body is parsed: where the provider gives the key
/// in a header, a cached completion of that key with this body's
/// fingerprint is the answer the full path would find (the same bytes make
/// the same delivery). Anything else (no such header, a miss, another body
/// under the key, a key past its retention) is `None`: the full path then
/// parses, refuses or claims exactly as it would have.
///
/// Most of a redelivery storm is such repeats; parsing each body into a
/// JSON tree only to find the key already answered was about a twelfth of
/// a replay's CPU.
fn replay_early(
    webhooks: &Webhooks,
    endpoint: &Endpoint,
    signed: &SignedRequest<'_>,
    body_fingerprint: &str,
    span: &tracing::Span,
    started: Instant,
) -> Option<Answered> {
    let key = endpoint.provider.header_key(signed)?;
    crate::providers::check_key(key).ok()?;
    let (response, event_type) = webhooks.engine().replay_from_cache(
        &endpoint.name,
        key,
        body_fingerprint,
        endpoint.retention,
    )?;
    let provider = endpoint.provider.name();
    metrics::delivery_verified(&endpoint.name, provider);
    // The span's fields are recorded with the answer (`receive_in`); the
    // trace's attributes are set here, as for any delivery.
    traced::delivery(span, &endpoint.name, key, event_type.as_deref());
    let result = Ok(Outcome::Replayed(response));
    count(
        &webhooks.traffic,
        &endpoint.name,
        provider,
        &result,
        started.elapsed(),
    );
    let mut answered = respond_to_one(endpoint.provider.as_ref(), result);
    answered.delivery = Some((key.to_owned(), event_type));
    Some(answered)
}

/// Claims and processes one delivery. `None`: the processing task panicked.
async fn process_one(
    webhooks: &Webhooks,
    endpoint: &Arc<Endpoint>,
    claim: ClaimRequest,
    event: Event,
    span: tracing::Span,
) -> Option<(String, Result<Outcome, EngineError>)> {
    let engine = webhooks.engine().clone();
    if let Some(outcome) = engine.answer_from_cache(&claim) {
        return Some((claim.key, Ok(outcome)));
    }
    let key = claim.key.clone();
    let store = engine.store().clone();
    let task_endpoint = endpoint.clone();
    // Held here until the task's result is back, so that the event is
    // freed on this thread rather than on SQLite's writer thread (see
    // `RunHandlers::shared`): the task drops its operation before it
    // answers. A queued endpoint's operation takes the event whole.
    let task_event = Arc::new(event);
    let kept = endpoint.queue.is_none().then(|| task_event.clone());
    // Once a delivery is claimed it runs to the end even if the sender hangs
    // up: a cancelled future would leave its transaction to the pool to
    // clean. The task carries the request's spans, so that the engine's
    // lines name the request and the delivery. The operation is built
    // where it runs: it is not `Send`.
    let task = store.run_delivery(move || {
        let operation: Box<dyn Operation> = match task_endpoint.queue.clone() {
            Some(settings) => Box::new(Enqueue::new(Arc::unwrap_or_clone(task_event), settings)),
            None => Box::new(RunHandlers::shared(
                task_endpoint,
                task_event,
                engine.store().clock().clone(),
            )),
        };
        async move {
            let result = engine.process(&claim, operation.as_ref()).await;
            // Before the answer goes back, so that `kept` is the event's
            // last handle.
            drop(operation);
            result
        }
        .instrument(span)
    });
    let answered = task.await;
    drop(kept);
    match answered {
        Ok(result) => {
            if matches!(result, Ok(Outcome::Fresh(_))) {
                if endpoint.queue.is_some() {
                    webhooks.queue_wake.notify_one();
                    webhooks.queue_enqueued.notify_one();
                } else if endpoint.publishes() {
                    webhooks.outbox.committed();
                }
            }
            Some((key, result))
        }
        Err(error) => {
            tracing::error!(%error, "processing task panicked");
            None
        }
    }
}

/// Whether a delivery's result is an answer the provider can stop at.
fn finished(result: &Result<Outcome, EngineError>) -> bool {
    matches!(result, Ok(Outcome::Fresh(_) | Outcome::Replayed(_)))
}

/// The answer to a request's deliveries. One delivery is answered with its
/// stored response, byte for byte. A batch whose items all finished gets
/// 200 and each item's outcome; otherwise the first unfinished item's answer
/// (a 409 to retry, a 5xx), so that the provider sends the batch again.
/// A provider that demands a fixed acknowledgement (Adyen's `[accepted]`)
/// gets it for a finished delivery.
fn respond_to(
    provider: &dyn Provider,
    mut results: Vec<(String, Result<Outcome, EngineError>)>,
    batch: bool,
) -> Answered {
    if !batch || !results.iter().all(|(_, r)| finished(r)) {
        let Some((_, result)) = results.pop() else {
            return Answered::refused(&Problem::from(&Rejection::MalformedBody), None);
        };
        return respond_to_one(provider, result);
    }
    let outcome = if results
        .iter()
        .all(|(_, r)| matches!(r, Ok(Outcome::Replayed(_))))
    {
        "replayed"
    } else {
        "processed"
    };
    if let Some(body) = provider.acknowledgement() {
        return acknowledged(body, outcome);
    }
    let items: Vec<serde_json::Value> = results
        .iter()
        .map(|(key, result)| {
            let status = match result {
                Ok(Outcome::Fresh(stored) | Outcome::Replayed(stored)) => stored.status,
                _ => 500,
            };
            serde_json::json!({
                "delivery_id": key,
                "outcome": reply::outcome_name(result),
                "status": status,
            })
        })
        .collect();
    Answered {
        outcome,
        response: finished_ok(outcome).json(serde_json::json!({
            "status": "processed",
            "deliveries": items,
        })),
        reason: None,
        detail: None,
        delivery: None,
    }
}

/// [`respond_to`] for a request of one delivery: its answer never names
/// the key, so a repeat answered early builds neither a list nor a copy of
/// its key for it.
fn respond_to_one(provider: &dyn Provider, result: Result<Outcome, EngineError>) -> Answered {
    if finished(&result)
        && let Some(body) = provider.acknowledgement()
    {
        let outcome = reply::outcome_name(&result);
        return acknowledged(body, outcome);
    }
    Answered {
        outcome: reply::outcome_name(&result),
        response: reply::respond(result),
        reason: None,
        detail: None,
        delivery: None,
    }
}

/// A finished delivery's answer where the provider demands a fixed
/// acknowledgement.
fn acknowledged(body: &'static str, outcome: &'static str) -> Answered {
    let mut response = finished_ok(outcome);
    response.content_type("text/plain; charset=utf-8");
    Answered {
        outcome,
        response: response.body(body),
        reason: None,
        detail: None,
        delivery: None,
    }
}

/// A 200 for finished deliveries that the receiver words itself (a batch's
/// list, a fixed acknowledgement): a repeat says so in its header, as a
/// stored answer does.
fn finished_ok(outcome: &str) -> actix_web::HttpResponseBuilder {
    let mut response = HttpResponse::Ok();
    if outcome == "replayed" {
        response.insert_header((reply::REPLAYED_HEADER, "true"));
    }
    response
}

/// Counts what the engine decided for a verified delivery, in the metrics
/// and in the dashboard's traffic counters.
fn count(
    traffic: &Traffic,
    endpoint: &str,
    provider: &'static str,
    result: &Result<Outcome, EngineError>,
    elapsed: Duration,
) {
    let failed = |reason: &str| {
        metrics::delivery_failed(endpoint, provider, reason, elapsed);
        traffic::Outcome::failed(reason)
    };
    let conflict = |kind: Conflict| {
        metrics::delivery_conflict(endpoint, provider, kind, elapsed);
        traffic::Outcome::conflict(kind.label())
    };
    let outcome = match result {
        Ok(Outcome::Fresh(_)) => {
            metrics::delivery_processed(endpoint, provider, elapsed);
            traffic::Outcome::processed()
        }
        Ok(Outcome::Replayed(_)) => {
            metrics::delivery_replayed(endpoint, provider, elapsed);
            traffic::Outcome::replayed()
        }
        Ok(Outcome::InProgress { .. }) => conflict(Conflict::InProgress),
        Ok(Outcome::Mismatch) => conflict(Conflict::KeyReused),
        Err(EngineError::Store(e)) if e.is_transient() => failed("storage-unavailable"),
        Err(EngineError::LeaseLost) => failed("lease-lost"),
        Err(_) => failed("processing-failed"),
    };
    traffic.record(endpoint, outcome, elapsed);
}

/// A verified request: a handshake to answer, or deliveries to process.
enum Incoming {
    Handshake(crate::providers::HandshakeReply),
    Deliveries(Vec<(ClaimRequest, Event)>),
}

/// Parses a request whose signature was verified, and extracts each
/// delivery's key and event. `body_fingerprint` is the body's SHA-256.
fn deliveries_of(
    endpoint: &Endpoint,
    signed: &SignedRequest<'_>,
    body: &Bytes,
    verified: &Verified,
    body_fingerprint: String,
    received_at: NaiveDateTime,
) -> Result<Incoming, Rejection> {
    let provider = endpoint.provider.as_ref();
    // NUL-free, so that both backends store what handlers read from it.
    let payload = provider.payload(signed)?;
    if let Some(reply) = provider.handshake(signed, &payload, verified)? {
        return Ok(Incoming::Handshake(reply));
    }
    let deliveries = provider.deliveries(signed, &payload)?;
    // What is stored with each key and handed to handlers: the raw body for
    // a JSON delivery; a batch item's own JSON; the decoded payload of a form
    // or XML body, so that reprocessing reads what the handlers read.
    let json_body = serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
    // The last delivery takes the parsed payload and the body's fingerprint
    // rather than copies: most requests carry one delivery, and a deep copy
    // of the payload was a third of a replay's allocations.
    let count = deliveries.len();
    let mut payload = Some(payload);
    let mut body_fingerprint = Some(body_fingerprint);
    deliveries
        .into_iter()
        .enumerate()
        .map(|(n, delivery)| {
            let last = n + 1 == count;
            let (raw, item_payload) = match delivery.item {
                Some(item) => {
                    let bytes = serde_json::to_vec(&item).map_err(|_| Rejection::MalformedBody)?;
                    (Bytes::from(bytes), item)
                }
                None => {
                    let payload = take_or_copy(&mut payload, last).unwrap_or_default();
                    if json_body {
                        (body.clone(), payload)
                    } else {
                        let bytes =
                            serde_json::to_vec(&payload).map_err(|_| Rejection::MalformedBody)?;
                        (Bytes::from(bytes), payload)
                    }
                }
            };
            let fingerprint = match delivery.fingerprint {
                Some(fingerprint) => fingerprint,
                None if raw == *body => take_or_copy(&mut body_fingerprint, last)
                    .unwrap_or_else(|| crate::digest_hex::sha256_hex(body)),
                None => crate::digest_hex::sha256_hex(&raw),
            };
            let claim = ClaimRequest {
                scope: endpoint.name.clone(),
                key: delivery.key.clone(),
                body_key: (!delivery.key_signed).then(|| fingerprint.clone()),
                retention: endpoint.retention,
                payload: Some(raw.clone()),
                fingerprint,
                event_type: delivery.event_type.clone(),
            };
            let event = Event {
                endpoint: endpoint.name.clone(),
                provider: provider.name(),
                delivery_id: delivery.key,
                event_type: delivery.event_type,
                payload: item_payload,
                raw,
                received_at,
                stale: false,
            };
            Ok((claim, event))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Incoming::Deliveries)
}

/// The value itself for the last user, a copy for the others.
fn take_or_copy<T: Clone>(value: &mut Option<T>, last: bool) -> Option<T> {
    if last { value.take() } else { value.clone() }
}
