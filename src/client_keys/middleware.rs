use super::fingerprint::fingerprint;
use super::key::{self, KeyError};
use super::tx::{Slot, Unit};
use crate::engine::{Claim, ClaimRequest, Engine, EngineError};
use crate::problem::Problem;
use crate::store::StoredResponse;
use crate::{replay_count, reply};
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderName, LOCATION};
use actix_web::http::{Method, StatusCode};
use actix_web::{Error, HttpMessage};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
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
    mut req: ServiceRequest,
) -> Result<ServiceResponse<BoxBody>, Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    B: MessageBody + 'static,
{
    if !matches!(*req.method(), Method::POST | Method::PATCH) {
        return Ok(service.call(req).await?.map_into_boxed_body());
    }
    let refuse =
        |req: ServiceRequest, problem: Problem| Ok(req.into_response(problem.to_response()));

    // Everything refused before the claim stores nothing.
    let key = match key::from_headers(req.headers()) {
        Ok(key) => key,
        Err(error) => return refuse(req, key_problem(&error)),
    };
    if key.is_none() && config.required {
        return refuse(req, missing_key());
    }
    let body = match read_limited(&mut req, config.max_body).await {
        Ok(body) => body,
        Err(problem) => return refuse(req, problem),
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
            Err(error) => return Ok(req.into_response(reply::respond(Err(error.into())))),
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
                    scope: scope.clone(),
                    key: key.as_str().to_owned(),
                    fingerprint: fingerprint(&method, &route, &body),
                    event_type: None,
                    body_key: None,
                    retention: None,
                    payload: None,
                })
                .await;
            match claim {
                Ok(Claim::Fresh(pending)) => Unit::Keyed(pending),
                Ok(Claim::Replay(stored)) => {
                    span.record("outcome", "replayed");
                    let mut response = reply::stored_response(&stored);
                    response.headers_mut().insert(
                        HeaderName::from_static("idempotent-replayed"),
                        actix_web::http::header::HeaderValue::from_static("true"),
                    );
                    replay_count::count_in_background(store, scope, key.as_str().to_owned(), None);
                    return Ok(req.into_response(response));
                }
                Ok(Claim::InProgress { retry_after }) => {
                    span.record("outcome", "in_progress");
                    return refuse(req, Problem::in_progress(retry_after));
                }
                Ok(Claim::Mismatch) => {
                    span.record("outcome", "mismatch");
                    return refuse(req, mismatch_problem(config.mismatch));
                }
                Err(error) => return Ok(req.into_response(reply::respond(Err(error)))),
            }
        }
    };

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
            return Err(error);
        }
    };
    let Some(unit) = unit.lock().await.take() else {
        return Ok(response.map_into_boxed_body());
    };
    finish(unit, response).await
}

/// Stores the handler's answer with the key and commits, or, for a 5xx,
/// rolls everything back so that the retry runs again.
async fn finish<B>(
    unit: Unit,
    response: ServiceResponse<B>,
) -> Result<ServiceResponse<BoxBody>, Error>
where
    B: MessageBody + 'static,
{
    let status = response.status();
    if status.is_server_error() {
        unit.release().await;
        tracing::Span::current().record("outcome", "released");
        return Ok(response.map_into_boxed_body());
    }
    let (request, response) = response.into_parts();
    let (head, body) = response.into_parts();
    let body = match actix_web::body::to_bytes(body).await {
        Ok(body) => body,
        Err(_) => {
            unit.release().await;
            return Ok(ServiceResponse::new(
                request,
                Problem::processing_failed().to_response(),
            ));
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
        body: body.to_vec(),
        location: header(LOCATION),
    };
    match unit.finish(&stored).await {
        Ok(()) => {
            tracing::Span::current().record("outcome", "processed");
            Ok(ServiceResponse::new(
                request,
                head.set_body(BoxBody::new(body)),
            ))
        }
        // The handler's effects were rolled back: its answer must not be
        // given as if they had happened.
        Err(error) => Ok(ServiceResponse::new(
            request,
            reply::respond(Err::<_, EngineError>(error)),
        )),
    }
}

async fn read_limited(req: &mut ServiceRequest, limit: usize) -> Result<Bytes, Problem> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(Problem::payload_too_large(limit));
    }
    let mut payload = req.take_payload();
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|_| Problem::unreadable_body())?;
        if body.len() + chunk.len() > limit {
            return Err(Problem::payload_too_large(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
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
