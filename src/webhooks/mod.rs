//! `POST /webhooks/{endpoint}`: limit the body, verify the signature, take
//! the provider's delivery id as the key, and hand the rest to the engine.

mod operation;

pub use operation::RunHandlers;

use crate::engine::{ClaimRequest, Engine, Outcome};
use crate::handlers::{Event, Handler};
use crate::problem::Problem;
use crate::providers::{Provider, Rejection, SignedRequest};
use crate::{replay_count, reply};
use actix_web::http::header::{CONTENT_LENGTH, HeaderMap};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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

/// The clock that signed timestamps are checked against.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The webhook face: the endpoints and the engine behind them. Mount it in an
/// actix `App` with [`Webhooks::configure`].
#[derive(Clone)]
pub struct Webhooks {
    engine: Engine,
    endpoints: Arc<HashMap<String, Arc<Endpoint>>>,
    clock: Clock,
}

impl Webhooks {
    pub fn new(engine: Engine, endpoints: impl IntoIterator<Item = Endpoint>) -> Webhooks {
        let endpoints = endpoints
            .into_iter()
            .map(|e| (e.name.clone(), Arc::new(e)))
            .collect();
        Webhooks {
            engine,
            endpoints: Arc::new(endpoints),
            clock: Arc::new(Utc::now),
        }
    }

    /// Checks signed timestamps against `clock` instead of the system clock:
    /// recorded fixtures and published vectors verify at their own time
    /// while the tolerance stays on.
    pub fn with_clock(mut self, clock: Clock) -> Webhooks {
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

#[tracing::instrument(
    name = "webhook",
    skip_all,
    fields(endpoint = %path, delivery_id, event_type, outcome)
)]
async fn receive(
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    webhooks: web::Data<Webhooks>,
) -> HttpResponse {
    let Some(endpoint) = webhooks.endpoint(&path).cloned() else {
        return Problem::unknown_endpoint(&path).to_response();
    };
    let body = match read_limited(request.headers(), payload, endpoint.max_body).await {
        Ok(body) => body,
        Err(problem) => return problem.to_response(),
    };
    let (claim, event) = match verify(&endpoint, request.headers(), body, (webhooks.clock)()) {
        Ok(verified) => verified,
        Err(rejection) => {
            tracing::info!(%rejection, "delivery refused");
            return Problem::from(&rejection).to_response();
        }
    };
    let span = tracing::Span::current();
    span.record("delivery_id", claim.key.as_str());
    span.record("event_type", claim.event_type.as_deref().unwrap_or(""));

    let engine = webhooks.engine().clone();
    let replayed_key = (
        claim.scope.clone(),
        claim.key.clone(),
        claim.body_key.clone(),
    );
    let operation = RunHandlers::new(endpoint, event);
    // Once a delivery is claimed it runs to the end even if the sender hangs
    // up: a cancelled future would leave its transaction to the pool to clean.
    let task = actix_web::rt::spawn(async move { engine.process(&claim, &operation).await });
    let result = match task.await {
        Ok(result) => result,
        Err(error) => {
            tracing::error!(%error, "processing task panicked");
            return Problem::processing_failed().to_response();
        }
    };
    span.record("outcome", reply::outcome_name(&result));
    let replayed = matches!(result, Ok(Outcome::Replayed(_)));
    let response = reply::respond(result);
    if replayed {
        let (scope, key, body_key) = replayed_key;
        replay_count::count_in_background(webhooks.engine().store(), scope, key, body_key);
    }
    response
}

/// Reads the body, refusing it as soon as it is known to exceed `limit`.
async fn read_limited(
    headers: &HeaderMap,
    mut payload: web::Payload,
    limit: usize,
) -> Result<Bytes, Problem> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(Problem::payload_too_large(limit));
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|_| Problem::unreadable_body())?;
        if body.len() + chunk.len() > limit {
            return Err(Problem::payload_too_large(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Verifies the delivery and extracts its key and event.
fn verify(
    endpoint: &Endpoint,
    headers: &HeaderMap,
    body: Bytes,
    now: DateTime<Utc>,
) -> Result<(ClaimRequest, Event), Rejection> {
    let signed = SignedRequest {
        headers,
        body: &body,
    };
    let verified = endpoint.provider.verify(&signed, now)?;
    tracing::debug!(secret_index = verified.secret_index, "signature verified");
    let payload: Value = serde_json::from_slice(&body).map_err(|_| Rejection::MalformedBody)?;
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
        received_at: Utc::now().naive_utc(),
    };
    Ok((claim, event))
}
