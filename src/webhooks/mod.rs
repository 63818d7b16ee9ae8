//! `POST /webhooks/{endpoint}`: limit the body, verify the signature, take
//! the provider's delivery id as the key, and hand the rest to the engine.

mod operation;
mod payload;
mod settings;

pub use operation::RunHandlers;
pub use payload::{NUL_REPLACEMENT, parse_payload};
pub use settings::EndpointSettings;

use crate::clock::SharedClock;
use crate::engine::{ClaimRequest, Engine, EngineError, Outcome};
use crate::handlers::{Event, Handler};
use crate::log_text::escaped;
use crate::problem::Problem;
use crate::providers::{Provider, Rejection, SignedRequest};
use crate::reply;
use crate::telemetry::metrics::{self, Conflict};
use crate::telemetry::request_id::{AnswerLogged, millis};
use actix_web::http::header::HeaderMap;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use bytes::Bytes;
use chrono::{DateTime, NaiveDateTime, Utc};
use sha2::{Digest, Sha256};
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
}

/// The webhook face: the endpoints and the engine behind them. Mount it in an
/// actix `App` with [`Webhooks::configure`].
#[derive(Clone)]
pub struct Webhooks {
    engine: Engine,
    endpoints: Arc<HashMap<String, Arc<Endpoint>>>,
    /// The clock that signed timestamps are checked against: the store's,
    /// unless [`Webhooks::with_clock`] fixed another.
    clock: SharedClock,
}

impl Webhooks {
    pub fn new(engine: Engine, endpoints: impl IntoIterator<Item = Endpoint>) -> Webhooks {
        let endpoints = endpoints
            .into_iter()
            .map(|e| (e.name.clone(), Arc::new(e)))
            .collect();
        Webhooks {
            clock: engine.store().clock().clone(),
            engine,
            endpoints: Arc::new(endpoints),
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

    /// Registers `POST /webhooks/{endpoint}` on an actix app or scope.
    pub fn configure(&self, cfg: &mut web::ServiceConfig) {
        cfg.app_data(web::Data::new(self.clone()))
            .route("/webhooks/{endpoint}", web::post().to(receive));
    }
}

// The endpoint segment is the caller's text, percent-decoded: a newline or
// an ESC in it would forge or recolour log lines, so it is logged escaped
// and capped like every other field taken from a request.
#[tracing::instrument(
    name = "webhook",
    skip_all,
    fields(endpoint = %escaped(&path), delivery_id, event_type, outcome, reason, duration_ms)
)]
async fn receive(
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    webhooks: web::Data<Webhooks>,
) -> HttpResponse {
    let started = Instant::now();
    let answered = answer(&request, &path, payload, &webhooks, started).await;
    let span = tracing::Span::current();
    span.record("outcome", answered.outcome);
    if let Some(reason) = &answered.reason {
        span.record("reason", reason.as_str());
    }
    span.record("duration_ms", millis(started.elapsed()));
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
}

impl Answered {
    fn refused(problem: &Problem, detail: Option<String>) -> Answered {
        Answered {
            response: problem.to_response(),
            outcome: "rejected",
            reason: Some(problem.slug().to_owned()),
            detail,
        }
    }
}

/// Verifies and processes one delivery, counting it in the metrics.
async fn answer(
    request: &HttpRequest,
    name: &str,
    payload: web::Payload,
    webhooks: &Webhooks,
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
        metrics::delivery_rejected(&endpoint.name, provider, problem.slug(), started.elapsed());
        Answered::refused(&problem, detail)
    };
    let body = match crate::body::read_limited(request.headers(), payload, endpoint.max_body).await
    {
        Ok(body) => body,
        Err(problem) => return refuse(problem, None),
    };
    let received_at = webhooks.engine().store().clock().naive_now();
    let verified = verify(
        &endpoint,
        request.headers(),
        body,
        webhooks.clock.now(),
        received_at,
    );
    let (claim, event) = match verified {
        Ok(verified) => verified,
        Err(rejection) => {
            return refuse(Problem::from(&rejection), Some(rejection.to_string()));
        }
    };
    metrics::delivery_verified(&endpoint.name, provider);
    let span = tracing::Span::current();
    // A delivery id is visible ASCII (`check_key`), but the event type is
    // any string of the sender's body.
    span.record("delivery_id", field::display(escaped(&claim.key)));
    span.record(
        "event_type",
        field::display(escaped(claim.event_type.as_deref().unwrap_or(""))),
    );

    let engine = webhooks.engine().clone();
    let result = match engine.answer_from_cache(&claim) {
        Some(outcome) => Ok(outcome),
        None => {
            let operation =
                RunHandlers::new(endpoint.clone(), event, engine.store().clock().clone());
            // Once a delivery is claimed it runs to the end even if the
            // sender hangs up: a cancelled future would leave its
            // transaction to the pool to clean. The task carries the
            // request's spans, so that the engine's lines name the request
            // and the delivery.
            let task = actix_web::rt::spawn(
                async move { engine.process(&claim, &operation).await }.instrument(span),
            );
            match task.await {
                Ok(result) => result,
                Err(error) => {
                    tracing::error!(%error, "processing task panicked");
                    let problem = Problem::processing_failed();
                    metrics::delivery_failed(
                        &endpoint.name,
                        provider,
                        problem.slug(),
                        started.elapsed(),
                    );
                    return Answered {
                        response: problem.to_response(),
                        outcome: "failed",
                        reason: None,
                        detail: None,
                    };
                }
            }
        }
    };
    count(&endpoint.name, provider, &result, started.elapsed());
    Answered {
        outcome: reply::outcome_name(&result),
        response: reply::respond(result),
        reason: None,
        detail: None,
    }
}

/// Counts what the engine decided for a verified delivery.
fn count(
    endpoint: &str,
    provider: &'static str,
    result: &Result<Outcome, EngineError>,
    elapsed: Duration,
) {
    match result {
        Ok(Outcome::Fresh(_)) => metrics::delivery_processed(endpoint, provider, elapsed),
        Ok(Outcome::Replayed(_)) => metrics::delivery_replayed(endpoint, provider, elapsed),
        Ok(Outcome::InProgress { .. }) => {
            metrics::delivery_conflict(endpoint, provider, Conflict::InProgress, elapsed)
        }
        Ok(Outcome::Mismatch) => {
            metrics::delivery_conflict(endpoint, provider, Conflict::KeyReused, elapsed)
        }
        Err(EngineError::Store(e)) if e.is_transient() => {
            metrics::delivery_failed(endpoint, provider, "storage-unavailable", elapsed)
        }
        Err(EngineError::LeaseLost) => {
            metrics::delivery_failed(endpoint, provider, "lease-lost", elapsed)
        }
        Err(_) => metrics::delivery_failed(endpoint, provider, "processing-failed", elapsed),
    }
}

/// Verifies the delivery and extracts its key and event.
fn verify(
    endpoint: &Endpoint,
    headers: &HeaderMap,
    body: Bytes,
    now: DateTime<Utc>,
    received_at: NaiveDateTime,
) -> Result<(ClaimRequest, Event), Rejection> {
    let signed = SignedRequest {
        headers,
        body: &body,
    };
    let verified = endpoint.provider.verify(&signed, now)?;
    tracing::debug!(secret_index = verified.secret_index, "signature verified");
    // NUL-free, so that both backends store what handlers read from it.
    let payload = parse_payload(&body).map_err(|_| Rejection::MalformedBody)?;
    let delivery_id = endpoint.provider.delivery_id(&signed, &payload)?;
    let event_type = endpoint.provider.event_type(&signed, &payload);
    let fingerprint = hex::encode(Sha256::digest(&body));
    let claim = ClaimRequest {
        scope: endpoint.name.clone(),
        key: delivery_id.clone(),
        body_key: (!endpoint.provider.delivery_id_is_signed()).then(|| fingerprint.clone()),
        retention: endpoint.retention,
        payload: Some(body.clone()),
        fingerprint,
        event_type: event_type.clone(),
    };
    let event = Event {
        endpoint: endpoint.name.clone(),
        provider: endpoint.provider.name(),
        delivery_id,
        event_type,
        payload,
        raw: body,
        received_at,
    };
    Ok((claim, event))
}
