use super::error::{ConfigError, Source};
use crate::client_keys::{IdempotencySettings, Mismatch};
use actix_web::http::header::HeaderName;
use serde::Deserialize;

/// `[idempotency]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdempotency {
    mismatch_status: Option<u16>,
    tenant_header: Option<String>,
    max_body_bytes: Option<usize>,
}

pub(super) fn parse(
    raw: &RawIdempotency,
    source: Source<'_>,
) -> Result<IdempotencySettings, ConfigError> {
    let defaults = IdempotencySettings::default();
    let mismatch = match raw.mismatch_status {
        None | Some(409) => Mismatch::Conflict,
        Some(422) => Mismatch::Unprocessable,
        Some(other) => {
            return Err(source.invalid(
                "idempotency.mismatch_status",
                format!("{other} is neither 409 nor 422"),
            ));
        }
    };
    let tenant_header = match &raw.tenant_header {
        Some(name) => Some(HeaderName::try_from(name.as_str()).map_err(|_| {
            source.invalid(
                "idempotency.tenant_header",
                format!("{name:?} is not a header name"),
            )
        })?),
        None => None,
    };
    Ok(IdempotencySettings {
        mismatch,
        tenant_header,
        max_body_bytes: raw.max_body_bytes.unwrap_or(defaults.max_body_bytes),
    })
}
