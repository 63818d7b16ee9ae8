use crate::problem::Problem;
use crate::store::StoreError;
use actix_web::HttpResponse;
use actix_web::http::StatusCode;

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
    #[error(transparent)]
    Store(#[from] StoreError),
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
