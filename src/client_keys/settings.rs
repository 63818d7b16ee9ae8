use super::{DEFAULT_MAX_BODY, Mismatch};
use actix_web::http::header::HeaderName;

/// `[idempotency]`: how client routes treat `Idempotency-Key`.
#[derive(Debug, Clone)]
pub struct IdempotencySettings {
    /// 409 (default) or 422 (the IETF draft) for a key reused with another
    /// payload.
    pub mismatch: Mismatch,
    /// A header that names the tenant keys are scoped to, when the operator
    /// enables it (a gateway in front must set it from the authenticated
    /// caller).
    pub tenant_header: Option<HeaderName>,
    pub max_body_bytes: usize,
}

impl Default for IdempotencySettings {
    fn default() -> Self {
        IdempotencySettings {
            mismatch: Mismatch::default(),
            tenant_header: None,
            max_body_bytes: DEFAULT_MAX_BODY,
        }
    }
}
