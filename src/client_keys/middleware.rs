use super::fingerprint::fingerprint;
use super::key::{self, KeyError};
use super::tx::{Slot, Unit};
use crate::engine::{ClaimRequest, Engine, EngineError, Outcome};
use crate::problem::Problem;
use crate::reply;
use crate::store::StoredResponse;
use crate::telemetry::metrics;
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::header::{CONTENT_TYPE, HeaderName, LOCATION};
use actix_web::http::{Method, StatusCode};
use actix_web::{Error, HttpMessage};
use futures_util::future::LocalBoxFuture;
use std::future::{Ready, ready};
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::Mutex;

/// The default limit of a keyed request's body (it is buffered to hash it).
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// What a reused key with another payload gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
pub enum Mismatch {
    /// 409 Conflict, what payment APIs answer.
    #[default]
    Conflict,
    /// 422 Unprocessable Content, as the IETF draft specifies.
    Unprocessable,
}

/// Reads the authenticated principal of a request.
pub type Principal = Arc<dyn Fn(&ServiceRequest) -> Option<String> + Send + Sync>;

/// Where the tenant that scopes keys comes from.
#[derive(Clone, Default)]
pub enum TenantSource {
    /// No tenants: keys are scoped by method and route only.
    #[default]
    None,
    /// A request header the operator trusts (e.g. `X-Tenant-Id` set by a
    /// gateway that authenticated the caller).
    Header(HeaderName),
    /// The authenticated principal, however the app knows it.
    Principal(Principal),
}

/// The `Idempotency-Key` middleware. Wrap a resource (so that the route
/// pattern, not the raw path, scopes the key):
/// `web::resource("/payments").wrap(Idempotency::new(engine).required())`.
///
/// Only `POST` and `PATCH` use keys; other methods pass through and a key
/// they send is ignored.
#[derive(Clone)]
pub struct Idempotency {
    engine: Engine,
    required: bool,
    mismatch: Mismatch,
    tenant: TenantSource,
    max_body: usize,
}

impl Idempotency {
    /// A key is optional: requests without one run unprotected (but still in
    /// one transaction).
    pub fn new(engine: Engine) -> Idempotency {
        Idempotency {
            engine,
            required: false,
            mismatch: Mismatch::default(),
            tenant: TenantSource::default(),
            max_body: DEFAULT_MAX_BODY,
        }
    }

    /// Requests without a key are refused with 400.
    pub fn required(mut self) -> Idempotency {
        self.required = true;
        self
    }

    pub fn mismatch(mut self, mismatch: Mismatch) -> Idempotency {
        self.mismatch = mismatch;
        self
    }

    pub fn tenant(mut self, tenant: TenantSource) -> Idempotency {
        self.tenant = tenant;
        self
    }

    pub fn max_body(mut self, bytes: usize) -> Idempotency {
        self.max_body = bytes;
        self
    }

    /// Where tenants come from, for routes that read back what a keyed
    /// route created: they scope by it exactly as keys are scoped.
    pub fn tenant_source(&self) -> &TenantSource {
        &self.tenant
    }
}

impl TenantSource {
    /// The tenant `req` belongs to, read as for its key's scope.
    pub fn of(&self, req: &ServiceRequest) -> Option<String> {
        tenant_of(self, req)
    }
}

impl<S, B> Transform<S, ServiceRequest> for Idempotency
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = Error;
    type Transform = IdempotencyService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(IdempotencyService {
            service: Rc::new(service),
            config: Rc::new(self.clone()),
        }))
    }
}

pub struct IdempotencyService<S> {
    service: Rc<S>,
    config: Rc<Idempotency>,
}

impl<S, B> Service<ServiceRequest> for IdempotencyService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let service = self.service.clone();
        let config = self.config.clone();
        Box::pin(async move { handle(&config, service.as_ref(), req).await })
    }
}

#[tracing::instrument(name = "client_key", skip_all, fields(route, key, outcome))]
async fn handle<S, B>(
    config: &Idempotency,
    service: &S,
    req: ServiceRequest,
) -> Result<ServiceResponse<BoxBody>, Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    B: MessageBody + 'static,
{
    // The pattern, never the raw path, labels the metric.
    let pattern = req.match_pattern();
    let (result, outcome) = run(config, service, req).await;
    if let Some(outcome) = outcome {
        tracing::Span::current().record("outcome", outcome);
        metrics::client_key_request(pattern.as_deref().unwrap_or("unmatched"), outcome);
    }
    result
}

/// What became of a keyed request (`None`: a method that takes no key).
type Handled = (
    Result<ServiceResponse<BoxBody>, Error>,
    Option<&'static str>,
);

async fn run<S, B>(config: &Idempotency, service: &S, mut req: ServiceRequest) -> Handled
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    B: MessageBody + 'static,
{
    if !matches!(*req.method(), Method::POST | Method::PATCH) {
        return (
            service.call(req).await.map(|r| r.map_into_boxed_body()),
            None,
        );
    }
    let refuse = |req: ServiceRequest, problem: Problem, outcome: &'static str| {
        (Ok(req.into_response(problem.to_response())), Some(outcome))
    };

    // Everything refused before the claim stores nothing.
    let key = match key::from_headers(req.headers()) {
        Ok(key) => key,
        Err(error) => return refuse(req, key_problem(&error), "malformed_key"),
    };
    if key.is_none() && config.required {
        return refuse(req, missing_key(), "missing_key");
    }
    let payload = req.take_payload();
    let body = match crate::body::read_limited(req.headers(), payload, config.max_body).await {
        Ok(body) => body,
        Err(problem) => return refuse(req, problem, "too_large"),
    };
    req.set_payload(Payload::from(body.clone()));

    let route = req.match_pattern().unwrap_or_else(|| req.path().to_owned());
    let tenant = tenant_of(&config.tenant, &req);
    let span = tracing::Span::current();
    span.record("route", route.as_str());

    let store = config.engine.store();
    let unit = match &key {
        None => match store.begin().await {
            Ok(tx) => Unit::Plain(tx),
            Err(error) => return engine_error(req, error.into()),
        },
        Some(key) => {
            span.record("key", key.as_str());
            let method = req.method().as_str().to_owned();
            let scope = match &tenant {
                Some(tenant) => format!("tenant:{tenant} {method} {route}"),
                None => format!("{method} {route}"),
            };
            let claim = config
                .engine
                .claim(&ClaimRequest {
                    scope,
                    key: key.as_str().to_owned(),
                    fingerprint: fingerprint(&method, &route, &body),
                    event_type: None,
                    body_key: None,
                    retention: None,
                    payload: None,
                })
                .await;
            let claim = match claim {
                Ok(claim) => claim,
                Err(error) => return engine_error(req, error),
            };
            match claim.fresh() {
                Ok(pending) => Unit::Keyed(pending),
                // A reused key's status is this route's to choose.
                Err(Outcome::Mismatch) => {
                    return refuse(req, mismatch_problem(config.mismatch), "key_reused");
                }
                Err(answer) => return answered(req, Ok(answer)),
            }
        }
    };

    let keyed = key.is_some();
    let unit = Arc::new(Mutex::new(Some(unit)));
    req.extensions_mut().insert(Slot {
        unit: unit.clone(),
        key: key.as_ref().map(|k| k.as_str().to_owned()),
        tenant,
    });
    let response = match service.call(req).await {
        Ok(response) => response,
        Err(error) => {
            // An error the handler returned is still its answer.
            let unit = unit.lock().await.take();
            if let Some(unit) = unit {
                unit.release().await;
            }
            return (Err(error), Some("failed"));
        }
    };
    let taken = unit.lock().await.take();
    let (result, outcome) = match taken {
        Some(unit) => finish(unit, response).await,
        None => (Ok(response.map_into_boxed_body()), "processed"),
    };
    // A request without a key ran unprotected: say so rather than
    // "processed", which promises a stored answer.
    let outcome = match outcome {
        "processed" if !keyed => "unkeyed",
        outcome => outcome,
    };
    (result, Some(outcome))
}

/// The engine's answer (a replay, a busy key, a failed claim or
/// transaction), and its outcome's name.
fn answered(req: ServiceRequest, result: Result<Outcome, EngineError>) -> Handled {
    let outcome = reply::outcome_name(&result);
    (Ok(req.into_response(reply::respond(result))), Some(outcome))
}

fn engine_error(req: ServiceRequest, error: EngineError) -> Handled {
    answered(req, Err(error))
}

/// Stores the handler's answer with the key and commits, or, for a 5xx,
/// rolls everything back so that the retry runs again.
async fn finish<B>(
    unit: Unit,
    response: ServiceResponse<B>,
) -> (Result<ServiceResponse<BoxBody>, Error>, &'static str)
where
    B: MessageBody + 'static,
{
    let status = response.status();
    // A refusal of the request itself (a body too large, not JSON, of
    // another content type: an extractor's error, see
    // `problem::refuses_request`) says nothing about the operation: like a
    // 5xx it is not stored, so the corrected request can use the key.
    if status.is_server_error() || crate::problem::refuses_request(response.response()) {
        unit.release().await;
        return (Ok(response.map_into_boxed_body()), "released");
    }
    let (request, response) = response.into_parts();
    let (head, body) = response.into_parts();
    let body = match actix_web::body::to_bytes(body).await {
        Ok(body) => body,
        Err(_) => {
            unit.release().await;
            return (
                Ok(ServiceResponse::new(
                    request,
                    Problem::processing_failed().to_response(),
                )),
                "failed",
            );
        }
    };
    let header = |name| {
        head.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let stored = StoredResponse {
        status: status.as_u16(),
        content_type: header(CONTENT_TYPE).unwrap_or_default(),
        body: body.clone(),
        location: header(LOCATION),
    };
    match unit.finish(&stored).await {
        Ok(()) => (
            Ok(ServiceResponse::new(
                request,
                head.set_body(BoxBody::new(body)),
            )),
            "processed",
        ),
        // The handler's effects were rolled back: its answer must not be
        // given as if they had happened.
        Err(error) => {
            let result = Err::<Outcome, _>(error);
            let outcome = reply::outcome_name(&result);
            (
                Ok(ServiceResponse::new(request, reply::respond(result))),
                outcome,
            )
        }
    }
}

fn tenant_of(source: &TenantSource, req: &ServiceRequest) -> Option<String> {
    match source {
        TenantSource::None => None,
        TenantSource::Header(name) => req
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned),
        TenantSource::Principal(principal) => principal(req),
    }
}

fn key_problem(error: &KeyError) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "idempotency-key-malformed",
        "Malformed Idempotency-Key",
        error.to_string(),
    )
}

fn missing_key() -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "idempotency-key-missing",
        "Idempotency-Key required",
        "this route requires an Idempotency-Key header: one UUID per logical operation, reused on every retry of it",
    )
}

fn mismatch_problem(mismatch: Mismatch) -> Problem {
    let status = match mismatch {
        Mismatch::Conflict => StatusCode::CONFLICT,
        Mismatch::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
    };
    let mut problem = Problem::key_reused();
    problem.status = status.as_u16();
    problem
}
