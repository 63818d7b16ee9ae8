//! Turns what the engine decided into an HTTP answer. Shared by every face.

use crate::engine::{EngineError, Outcome};
use crate::log_text::escaped;
use crate::problem::Problem;
use crate::store::StoredResponse;
use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, LOCATION};
use std::time::Duration;

/// Set on every answer that comes from the store rather than from running the
/// operation, as payment APIs do.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// A short name of an outcome, for logs and spans.
pub fn outcome_name(result: &Result<Outcome, EngineError>) -> &'static str {
    match result {
        Ok(Outcome::Processed(_)) => "processed",
        Ok(Outcome::Replayed(_)) => "replayed",
        Ok(Outcome::InProgress { .. }) => "in_progress",
        Ok(Outcome::Mismatch) => "key_reused",
        Err(EngineError::Store(e)) if e.is_transient() => "unavailable",
        Err(EngineError::LeaseLost) => "lease_lost",
        Err(_) => "failed",
    }
}

pub fn respond(result: Result<Outcome, EngineError>) -> HttpResponse {
    match result {
        Ok(Outcome::Processed(stored)) => stored_response(&stored),
        Ok(Outcome::Replayed(stored)) => {
            let mut response = stored_response(&stored);
            response.headers_mut().insert(
                actix_web::http::header::HeaderName::from_static("idempotent-replayed"),
                actix_web::http::header::HeaderValue::from_static("true"),
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
/// and body.
pub fn stored_response(stored: &StoredResponse) -> HttpResponse {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    response.insert_header((CONTENT_TYPE, stored.content_type.as_str()));
    if let Some(location) = &stored.location {
        response.insert_header((LOCATION, location.as_str()));
    }
    response.body(stored.body.clone())
}
