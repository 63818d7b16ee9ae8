use super::limiter::{Limited, Scope};
use super::origin::CrossSite;
use crate::maintenance::RepublishError;
use crate::problem::Problem;
use crate::store::StoreError;
use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use std::time::Duration;

/// Why an admin request is refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A query parameter is malformed; names the parameter.
    #[error("`{parameter}`: {message}")]
    BadParameter {
        parameter: &'static str,
        message: String,
    },
    #[error("no delivery {delivery_id:?} for endpoint {endpoint:?}")]
    NotFound {
        endpoint: String,
        delivery_id: String,
    },
    #[error("no queue job {delivery_id:?} for endpoint {endpoint:?}")]
    NoJob {
        endpoint: String,
        delivery_id: String,
    },
    /// A queue action that does not apply to the job's state (retrying a
    /// running job, cancelling a done one).
    #[error("{0}")]
    Conflict(String),
    #[error("no endpoint named {0:?} is configured")]
    UnknownEndpoint(String),
    /// A republish of one delivery that was skipped; says why.
    #[error("{0}")]
    NotRepublishable(String),
    /// A reprocessing that did not replace the answer; says why.
    #[error("{0}")]
    NotReprocessed(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Too many wrong credentials: this one was not even looked at.
    #[error("{}", too_many(.0.scope))]
    TooManyAttempts(Limited),
    /// A form posted from another site.
    #[error("cross-site request refused: {0}")]
    CrossSite(#[from] CrossSite),
}

impl From<RepublishError> for AdminError {
    fn from(error: RepublishError) -> AdminError {
        match error {
            RepublishError::UnknownEndpoint(endpoint) => AdminError::UnknownEndpoint(endpoint),
            RepublishError::NotFound {
                endpoint,
                delivery_id,
            } => AdminError::NotFound {
                endpoint,
                delivery_id,
            },
            error @ RepublishError::UnknownPublisher { .. } => {
                AdminError::bad("publisher", error.to_string())
            }
            RepublishError::Store(error) => AdminError::Store(error),
        }
    }
}

fn too_many(scope: Scope) -> &'static str {
    match scope {
        Scope::Address => {
            "too many wrong admin credentials from this address; retry after Retry-After seconds"
        }
        Scope::Global => {
            "too many wrong admin credentials from all addresses; retry after Retry-After seconds"
        }
    }
}

/// Whole seconds, rounded up: a client that waits exactly `Retry-After`
/// must find the next attempt there.
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

impl AdminError {
    pub fn bad(parameter: &'static str, message: impl Into<String>) -> AdminError {
        AdminError::BadParameter {
            parameter,
            message: message.into(),
        }
    }

    pub fn to_problem(&self) -> Problem {
        match self {
            AdminError::BadParameter { .. } => Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid-parameter",
                "Invalid parameter",
                self.to_string(),
            ),
            AdminError::NotFound { .. } => Problem::new(
                StatusCode::NOT_FOUND,
                "unknown-delivery",
                "Unknown delivery",
                self.to_string(),
            ),
            AdminError::NoJob { .. } => Problem::new(
                StatusCode::NOT_FOUND,
                "unknown-job",
                "Unknown queue job",
                self.to_string(),
            ),
            AdminError::Conflict(_) => Problem::new(
                StatusCode::CONFLICT,
                "queue-job-state",
                "Not in a state this action applies to",
                self.to_string(),
            ),
            AdminError::UnknownEndpoint(_) => Problem::new(
                StatusCode::NOT_FOUND,
                "unknown-endpoint",
                "Unknown endpoint",
                self.to_string(),
            ),
            AdminError::NotRepublishable(_) => Problem::new(
                StatusCode::CONFLICT,
                "not-republishable",
                "The delivery cannot be republished",
                self.to_string(),
            ),
            AdminError::NotReprocessed(_) => Problem::new(
                StatusCode::CONFLICT,
                "not-reprocessed",
                "The delivery was not reprocessed",
                self.to_string(),
            ),
            AdminError::TooManyAttempts(limited) => Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too-many-attempts",
                "Too many failed attempts",
                self.to_string(),
            )
            .retry_after(Duration::from_secs(retry_after_secs(limited.retry_after))),
            AdminError::CrossSite(_) => Problem::new(
                StatusCode::FORBIDDEN,
                "cross-site-request",
                "Cross-site request refused",
                self.to_string(),
            ),
            AdminError::Store(error) => {
                tracing::warn!(%error, "admin query failed");
                if error.is_transient() {
                    Problem::unavailable()
                } else {
                    Problem::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "admin-query-failed",
                        "Query failed",
                        "the query failed; see the server's log",
                    )
                }
            }
        }
    }

    pub fn to_response(&self) -> HttpResponse {
        self.to_problem().to_response()
    }
}
