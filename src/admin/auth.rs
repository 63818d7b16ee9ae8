//! Who may use `/admin`: a bearer token for the API, the session cookie
//! (or a bearer token) for the page. Every presented token goes through the
//! login limiter first. Refusals carry no data.

use super::Admin;
use super::error::AdminError;
use super::limiter::Limited;
use super::session;
use super::tokens::AdminToken;
use crate::bearer;
use crate::providers::mac::{self, Algorithm};
use crate::telemetry::metrics;
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{Error, HttpRequest, HttpResponse, web};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

/// What a presented credential came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Granted,
    /// Missing or wrong.
    Denied,
    /// Not looked at: too many wrong ones lately.
    Limited(Limited),
}

/// The address a client is limited by: the TCP peer. Behind a reverse proxy
/// that is the proxy, so every client shares one bucket; forwarded headers
/// are not trusted here, since any client can write them.
fn client_address(request: &HttpRequest) -> IpAddr {
    request
        .peer_addr()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |peer| peer.ip())
}

/// Checks `token` against the admin tokens, unless the limiter refuses the
/// attempt first; a right token gives its attempt back.
pub fn check_token(admin: &Admin, request: &HttpRequest, token: &str) -> Access {
    let address = client_address(request);
    if let Err(limited) = admin.limiter.admit(address, Instant::now()) {
        metrics::admin_login_limited(limited.scope.label());
        return Access::Limited(limited);
    }
    if admin.tokens.accepts(token.as_bytes()) {
        admin.limiter.refund(address);
        Access::Granted
    } else {
        Access::Denied
    }
}

/// The request's bearer token, checked as [`check_token`] does; no token is
/// `Denied` without counting as an attempt.
fn check_bearer(admin: &Admin, request: &HttpRequest) -> Access {
    match bearer::presented(request) {
        Some(token) => check_token(admin, request, token),
        None => Access::Denied,
    }
}

/// Whether the page may be shown: a live session cookie, or a bearer token.
/// A cookie is an HMAC, not a guessable secret, so it is not limited (an
/// expired one would otherwise count against its owner).
pub fn session_access(admin: &Admin, request: &HttpRequest) -> Access {
    let now = chrono::Utc::now().timestamp();
    let cookie = request
        .cookie(session::COOKIE)
        .is_some_and(|cookie| session::verify(&admin.tokens, cookie.value(), now));
    if cookie {
        return Access::Granted;
    }
    check_bearer(admin, request)
}

/// Who an admin action is recorded as: `admin:<name>` for a named token
/// (`admin_tokens = [{name = "ops", token = "..."}]`), else `admin:` and
/// eight hex digits of an HMAC-SHA256 of the token that allowed it (keyed
/// with a fixed context), so that the history tells tokens apart without
/// holding anything that helps to guess one. The bearer token, else the
/// session's (whose HMAC key says which token logged in). Called once
/// access was granted; `admin` alone if no token can be told (it cannot
/// happen then).
pub fn actor(admin: &Admin, request: &HttpRequest) -> String {
    let now = chrono::Utc::now().timestamp();
    let from_bearer =
        bearer::presented(request).and_then(|token| admin.tokens.matching(token.as_bytes()));
    let token = from_bearer.or_else(|| {
        request
            .cookie(session::COOKIE)
            .and_then(|cookie| session::holder(&admin.tokens, cookie.value(), now))
    });
    match token {
        Some(AdminToken {
            name: Some(name), ..
        }) => format!("admin:{name}"),
        Some(token) => format!("admin:{}", fingerprint(token.secret.expose())),
        None => "admin".to_owned(),
    }
}

/// Eight hex digits that name `token` without revealing it; an operator
/// finds theirs with `printf %s "$TOKEN" | openssl dgst -sha256 -hmac
/// 'idempotent-receiver admin actor' -r | cut -c1-8`.
pub fn fingerprint(token: &[u8]) -> String {
    let tag = mac::sign(Algorithm::Sha256, ACTOR_CONTEXT, &[token]);
    hex::encode(tag.get(..4).unwrap_or_default())
}

const ACTOR_CONTEXT: &[u8] = b"idempotent-receiver admin actor";

/// 401 with `WWW-Authenticate: Bearer`, saying nothing about why.
pub fn unauthorized() -> HttpResponse {
    bearer::unauthorized(
        "Bearer realm=\"admin\"",
        "this route requires an admin token: Authorization: Bearer <token>",
    )
}

/// Middleware of the API routes: nothing runs without a valid token.
pub async fn require_token(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let access = match request.app_data::<web::Data<Admin>>() {
        Some(admin) => check_bearer(admin, request.request()),
        None => Access::Denied,
    };
    match access {
        Access::Granted => Ok(next.call(request).await?.map_into_boxed_body()),
        Access::Denied => Ok(request.into_response(unauthorized())),
        Access::Limited(limited) => {
            Ok(request.into_response(AdminError::TooManyAttempts(limited).to_response()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fingerprint;

    #[test]
    fn a_fingerprint_is_eight_hex_digits_of_the_keyed_hash() {
        // python3 -c "import hmac,hashlib;print(hmac.new(b'idempotent-receiver admin actor',b'tok_0123456789abcdef',hashlib.sha256).hexdigest()[:8])"
        assert_eq!(fingerprint(b"tok_0123456789abcdef"), "b77cc7da");
    }
}
