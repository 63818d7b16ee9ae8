//! `application/problem+json` (RFC 9457) answers: the one place where errors
//! become HTTP. Every cause has its own `type`, documented in the README.

use crate::log_text::escaped;
use crate::providers::Rejection;
use actix_web::HttpResponse;
use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::{ALLOW, CONTENT_TYPE, RETRY_AFTER};
use actix_web::middleware::{ErrorHandlerResponse, ErrorHandlers};
use serde::Serialize;
use std::time::Duration;

pub const CONTENT_TYPE_PROBLEM: &str = "application/problem+json";
const TYPE_PREFIX: &str = "urn:idempotent-receiver:problem:";

#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: String,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    /// Which fields of a request failed validation, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    #[serde(skip)]
    pub retry_after: Option<Duration>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FieldError {
    pub field: &'static str,
    pub message: &'static str,
}

impl Problem {
    pub fn new(
        status: StatusCode,
        slug: &str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Problem {
        Problem {
            kind: format!("{TYPE_PREFIX}{slug}"),
            title,
            status: status.as_u16(),
            detail: detail.into(),
            errors: Vec::new(),
            retry_after: None,
        }
    }

    pub fn retry_after(mut self, delay: Duration) -> Problem {
        self.retry_after = Some(delay);
        self
    }

    /// The `type`'s suffix (`invalid-signature`): one of the fixed causes
    /// in this module, so it can label a metric.
    pub fn slug(&self) -> &str {
        self.kind.strip_prefix(TYPE_PREFIX).unwrap_or(&self.kind)
    }

    pub fn body(&self) -> Vec<u8> {
        // Serialising a struct of strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn unknown_endpoint(name: &str) -> Problem {
        Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-endpoint",
            "Unknown endpoint",
            // Escaped and capped: the name is whatever the caller sent.
            format!("no endpoint named {:?} is configured", escaped(name)),
        )
    }

    pub fn payload_too_large(limit: usize) -> Problem {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "Payload too large",
            format!("the body exceeds the limit of {limit} bytes"),
        )
    }

    /// A body that is not JSON, where JSON is expected. The parser's
    /// position is given, never the body's text.
    pub fn malformed_json(error: &serde_json::Error) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "malformed-body",
            "Malformed body",
            format!(
                "the body is not valid JSON (line {}, column {})",
                error.line(),
                error.column()
            ),
        )
    }

    /// A body sent as another content type than `expected`.
    pub fn unsupported_media_type(expected: &str) -> Problem {
        Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            format!("the body must be sent as content-type: {expected}"),
        )
    }

    pub fn unreadable_body() -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "unreadable-body",
            "Unreadable body",
            "the request body could not be read",
        )
    }

    pub fn key_reused() -> Problem {
        Problem::new(
            StatusCode::CONFLICT,
            "key-reused",
            "Key reused with a different payload",
            "this key was already used for a request with a different payload; nothing was run",
        )
    }

    pub fn in_progress(retry_after: Duration) -> Problem {
        Problem::new(
            StatusCode::CONFLICT,
            "in-progress",
            "Request in progress",
            "another request with this key is being processed; retry later",
        )
        .retry_after(retry_after)
    }

    pub fn processing_failed() -> Problem {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "processing-failed",
            "Processing failed",
            "the delivery could not be processed; nothing was kept, so a retry runs it again",
        )
    }

    pub fn unavailable() -> Problem {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage-unavailable",
            "Storage unavailable",
            "the database is unavailable; nothing was processed, retry later",
        )
        .retry_after(Duration::from_secs(5))
    }

    pub fn to_response(&self) -> HttpResponse {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = HttpResponse::build(status);
        response.insert_header((CONTENT_TYPE, CONTENT_TYPE_PROBLEM));
        if let Some(delay) = self.retry_after {
            response.insert_header((RETRY_AFTER, delay.as_secs().max(1).to_string()));
        }
        response.body(self.body())
    }
}

/// The one mapping of actix's own errors (its body, JSON, form, query and
/// path extractors) to problems; `None` for any other error, which is an
/// application's own answer.
pub fn framework_problem(error: &actix_web::Error) -> Option<Problem> {
    use actix_web::error::{
        JsonPayloadError, PathError, PayloadError, QueryPayloadError, UrlencodedError,
    };
    let payload = |error: &PayloadError| match error {
        PayloadError::Overflow => Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "Payload too large",
            "the body exceeds this route's limit",
        ),
        _ => Problem::unreadable_body(),
    };
    if let Some(error) = error.as_error::<JsonPayloadError>() {
        return Some(match error {
            JsonPayloadError::OverflowKnownLength { limit, .. }
            | JsonPayloadError::Overflow { limit } => Problem::payload_too_large(*limit),
            JsonPayloadError::ContentType => Problem::unsupported_media_type("application/json"),
            JsonPayloadError::Deserialize(error) => Problem::malformed_json(error),
            JsonPayloadError::Payload(error) => payload(error),
            // Serialising a response is the application's failure, not the
            // request's.
            _ => return None,
        });
    }
    if let Some(error) = error.as_error::<PayloadError>() {
        return Some(payload(error));
    }
    if let Some(error) = error.as_error::<UrlencodedError>() {
        return Some(match error {
            UrlencodedError::Overflow { limit, .. } => Problem::payload_too_large(*limit),
            UrlencodedError::ContentType => {
                Problem::unsupported_media_type("application/x-www-form-urlencoded")
            }
            _ => Problem::new(
                StatusCode::BAD_REQUEST,
                "malformed-body",
                "Malformed body",
                "the body is not a valid form",
            ),
        });
    }
    if error.as_error::<QueryPayloadError>().is_some() {
        return Some(Problem::new(
            StatusCode::BAD_REQUEST,
            "malformed-query",
            "Malformed query",
            "the query string is not valid for this route",
        ));
    }
    if error.as_error::<PathError>().is_some() {
        return Some(Problem::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "Not found",
            "no such resource",
        ));
    }
    None
}

/// Whether `response` refuses the request itself (a body too large, not
/// JSON, of another content type; see [`framework_problem`]). Such an
/// answer says nothing about the operation, so the `Idempotency-Key`
/// middleware stores nothing and the key stays free for the corrected
/// request.
pub fn refuses_request<B>(response: &HttpResponse<B>) -> bool {
    response
        .error()
        .is_some_and(|error| framework_problem(error).is_some())
}

/// Renders the framework's own error answers (extractor errors, the
/// router's 404 and 405) as problem+json; wrap the whole `App` with it,
/// inside [`crate::telemetry::request_id::RequestIds`]. An answer a handler
/// built itself (it has a content type) is left as it is.
pub fn framework_errors<B: MessageBody + 'static>() -> ErrorHandlers<B> {
    ErrorHandlers::new().default_handler(render_framework_error)
}

fn render_framework_error<B>(
    response: ServiceResponse<B>,
) -> actix_web::Result<ErrorHandlerResponse<B>> {
    let problem = match response.response().error() {
        Some(error) => framework_problem(error),
        None if !response.headers().contains_key(CONTENT_TYPE) => match response.status() {
            StatusCode::NOT_FOUND => Some(Problem::new(
                StatusCode::NOT_FOUND,
                "not-found",
                "Not found",
                "no route matches this path",
            )),
            StatusCode::METHOD_NOT_ALLOWED => Some(Problem::method_not_allowed()),
            _ => None,
        },
        None => None,
    };
    let Some(problem) = problem else {
        return Ok(ErrorHandlerResponse::Response(
            response.map_into_left_body(),
        ));
    };
    let (request, original) = response.into_parts();
    let mut rendered = problem.to_response();
    if let Some(allow) = original.headers().get(ALLOW) {
        rendered.headers_mut().insert(ALLOW, allow.clone());
    }
    Ok(ErrorHandlerResponse::Response(
        ServiceResponse::new(request, rendered).map_into_right_body(),
    ))
}

impl Problem {
    /// A route that does not take the request's method.
    pub fn method_not_allowed() -> Problem {
        Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            "this route does not take this method",
        )
    }
}

impl From<&Rejection> for Problem {
    fn from(rejection: &Rejection) -> Problem {
        let detail = rejection.to_string();
        match rejection {
            Rejection::MissingHeader(_) => Problem::new(
                StatusCode::BAD_REQUEST,
                "missing-header",
                "Missing header",
                detail,
            ),
            Rejection::MissingField(_) => Problem::new(
                StatusCode::BAD_REQUEST,
                "missing-field",
                "Missing signed field",
                detail,
            ),
            Rejection::MalformedField { .. } => Problem::new(
                StatusCode::BAD_REQUEST,
                "malformed-field",
                "Malformed signed field",
                detail,
            ),
            Rejection::MalformedHeader { .. } => Problem::new(
                StatusCode::BAD_REQUEST,
                "malformed-header",
                "Malformed header",
                detail,
            ),
            Rejection::InvalidSignature => Problem::new(
                StatusCode::UNAUTHORIZED,
                "invalid-signature",
                "Invalid signature",
                detail,
            ),
            Rejection::StaleTimestamp { .. } => Problem::new(
                StatusCode::UNAUTHORIZED,
                "stale-timestamp",
                "Timestamp outside tolerance",
                detail,
            ),
            Rejection::MalformedBody => Problem::new(
                StatusCode::BAD_REQUEST,
                "malformed-body",
                "Malformed body",
                detail,
            ),
            Rejection::MissingKey(_) => Problem::new(
                StatusCode::BAD_REQUEST,
                "missing-key",
                "Missing delivery id",
                detail,
            ),
            Rejection::InvalidKey(_) => Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid-key",
                "Invalid delivery id",
                detail,
            ),
            Rejection::UntrustedCertificate(_) => Problem::new(
                StatusCode::UNAUTHORIZED,
                "untrusted-certificate",
                "Untrusted signing certificate",
                detail,
            ),
            Rejection::CertificateUnavailable => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "certificate-unavailable",
                "Signing certificate unavailable",
                detail,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actix_extractor_errors_map_to_problems_and_an_apps_own_errors_do_not() {
        use actix_web::error::{ErrorBadRequest, JsonPayloadError};
        let wrong_type = actix_web::Error::from(JsonPayloadError::ContentType);
        let problem = framework_problem(&wrong_type).expect("an extractor error");
        assert_eq!(
            (problem.status, problem.slug()),
            (415, "unsupported-media-type")
        );
        let too_large = actix_web::Error::from(JsonPayloadError::Overflow { limit: 10 });
        assert_eq!(framework_problem(&too_large).map(|p| p.status), Some(413));
        assert!(framework_problem(&ErrorBadRequest("the app's own")).is_none());
        let refused = HttpResponse::from_error(wrong_type);
        assert!(refuses_request(&refused));
        assert!(!refuses_request(&HttpResponse::BadRequest().finish()));
    }

    #[test]
    fn a_problems_slug_is_its_type_without_the_prefix() {
        assert_eq!(Problem::key_reused().slug(), "key-reused");
        let rejection = Problem::from(&Rejection::InvalidSignature);
        assert_eq!(rejection.slug(), "invalid-signature");
        assert_eq!(rejection.kind, format!("{TYPE_PREFIX}invalid-signature"));
    }
}
