//! Who may use `/admin`: a bearer token for the API, the session cookie
//! (or a bearer token) for the page. Refusals carry no data.

use super::Admin;
use super::session;
use crate::problem::Problem;
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use actix_web::middleware::Next;
use actix_web::{Error, HttpRequest, HttpResponse, web};

/// The token of an `Authorization: Bearer <token>` header (the scheme is
/// case-insensitive, as RFC 9110 says).
pub fn bearer(request: &HttpRequest) -> Option<&str> {
    let value = request.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether the request carries one of the admin tokens as a bearer token.
pub fn has_token(admin: &Admin, request: &HttpRequest) -> bool {
    bearer(request).is_some_and(|token| admin.tokens.accepts(token.as_bytes()))
}

/// Whether the page may be shown: a live session cookie, or a bearer token.
pub fn has_session(admin: &Admin, request: &HttpRequest) -> bool {
    let now = chrono::Utc::now().timestamp();
    let cookie = request
        .cookie(session::COOKIE)
        .is_some_and(|cookie| session::verify(&admin.tokens, cookie.value(), now));
    cookie || has_token(admin, request)
}

/// 401 with `WWW-Authenticate: Bearer`, saying nothing about why.
pub fn unauthorized() -> HttpResponse {
    let mut response = Problem::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "Unauthorized",
        "this route requires an admin token: Authorization: Bearer <token>",
    )
    .to_response();
    response.headers_mut().insert(
        WWW_AUTHENTICATE,
        actix_web::http::header::HeaderValue::from_static("Bearer realm=\"admin\""),
    );
    response
}

/// Middleware of the API routes: nothing runs without a valid token.
pub async fn require_token(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let allowed = request
        .app_data::<web::Data<Admin>>()
        .is_some_and(|admin| has_token(admin, request.request()));
    if !allowed {
        return Ok(request.into_response(unauthorized()));
    }
    Ok(next.call(request).await?.map_into_boxed_body())
}
