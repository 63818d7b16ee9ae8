//! Turns what the engine decided into an HTTP answer. Shared by every face.

use crate::engine::{EngineError, Outcome};
use crate::log_text::escaped;
use crate::problem::Problem;
use crate::store::StoredResponse;
use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, HeaderName, HeaderValue, LOCATION};
use std::time::Duration;

/// Set on every answer that comes from the store rather than from running the
/// operation, as payment APIs do.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// A short name of an outcome, for logs and spans.
pub fn outcome_name(result: &Result<Outcome, EngineError>) -> &'static str {
    match result {
        Ok(Outcome::Fresh(_)) => "processed",
        Ok(Outcome::Replayed(_)) => "replayed",
        Ok(Outcome::InProgress { .. }) => "in_progress",
        Ok(Outcome::Mismatch) => "key_reused",
        Err(EngineError::Store(e)) if e.is_transient() => "unavailable",
        Err(EngineError::LeaseLost) => "lease_lost",
        Err(_) => "failed",
    }
}

/// The one renderer of a stored answer: every face answers through it, so a
/// replay is byte for byte what the first request got.
pub fn respond(result: Result<Outcome, EngineError>) -> HttpResponse {
    match result {
        Ok(Outcome::Fresh(stored)) => stored_response(stored),
        Ok(Outcome::Replayed(stored)) => {
            let mut response = stored_response(stored);
            response.headers_mut().insert(
                HeaderName::from_static("idempotent-replayed"),
                HeaderValue::from_static("true"),
            );
            response
        }
        Ok(Outcome::InProgress { retry_after }) => Problem::in_progress(retry_after).to_response(),
        Ok(Outcome::Mismatch) => Problem::key_reused().to_response(),
        Err(EngineError::Store(error)) if error.is_transient() => {
            tracing::warn!(%error, "database unavailable");
            Problem::unavailable().to_response()
        }
        Err(EngineError::LeaseLost) => {
            tracing::warn!("lease lost before completion; effects rolled back");
            Problem::in_progress(Duration::from_secs(1)).to_response()
        }
        Err(error) => {
            // A handler's error may quote the event or a downstream answer.
            let error = error.to_string();
            tracing::error!(error = %escaped(&error), "processing failed; the key was released");
            Problem::processing_failed().to_response()
        }
    }
}

/// A stored answer, as it was first given: status, content type, `Location`
/// and body (shared with the store's copy, not copied).
fn stored_response(stored: StoredResponse) -> HttpResponse {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    // The receiver's own answers share one static header value; any other
    // content type is parsed (and copied) as before.
    const JSON: &str = "application/json";
    if stored.content_type == JSON {
        response.insert_header((CONTENT_TYPE, HeaderValue::from_static(JSON)));
    } else {
        response.insert_header((CONTENT_TYPE, stored.content_type.as_str()));
    }
    if let Some(location) = &stored.location {
        response.insert_header((LOCATION, location.as_str()));
    }
    response.body(stored.body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody;

    #[test]
    fn a_replay_hands_the_stored_bytes_to_the_body_without_copying_them() {
        let body = bytes::Bytes::from(vec![b'x'; 4096]);
        let stored = StoredResponse {
            status: 201,
            content_type: "application/json".into(),
            body: body.clone(),
            location: Some("/payments/pay_1".into()),
        };
        let response = respond(Ok(Outcome::Replayed(stored)));
        assert_eq!(response.status(), 201);
        let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok());
        assert_eq!(header(REPLAYED_HEADER), Some("true"));
        assert_eq!(header(LOCATION.as_str()), Some("/payments/pay_1"));
        let sent = response
            .into_body()
            .try_into_bytes()
            .unwrap_or_else(|_| panic!("the body is the stored bytes"));
        assert_eq!(sent.as_ptr(), body.as_ptr(), "the same bytes, not a copy");
    }
}
