//! What the engine's spans tell OpenTelemetry (see `telemetry::traces`):
//! the delivery a `process` span is for, what its `claim` found, and
//! whether it failed.

use super::{Claim, EngineError, Outcome};
use crate::telemetry::traces::{self, KeyValue, capped};
use tracing::Span;

/// A delivery's endpoint, id and event type as attributes. The id and the
/// event type come from the request: escaped and capped.
pub fn delivery_attributes(
    endpoint: &str,
    delivery_id: &str,
    event_type: Option<&str>,
) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("webhook.endpoint", endpoint.to_owned()),
        KeyValue::new("webhook.delivery_id", capped(delivery_id)),
    ];
    if let Some(event_type) = event_type {
        attributes.push(KeyValue::new("webhook.event_type", capped(event_type)));
    }
    attributes
}

/// What a claim found: `fresh` (this attempt runs the handlers),
/// `replayed`, `in_progress` or `key_reused`.
pub(super) fn claimed(span: &Span, claim: &Result<Claim, EngineError>) {
    let found = match claim {
        Ok(Outcome::Fresh(_)) => "fresh",
        Ok(Outcome::Replayed(_)) => "replayed",
        Ok(Outcome::InProgress { .. }) => "in_progress",
        Ok(Outcome::Mismatch) => "key_reused",
        Err(error) => {
            traces::set_error(span, &error.to_string());
            return;
        }
    };
    traces::set_attributes(span, || vec![KeyValue::new("webhook.claim", found)]);
}

/// A delivery that ended in an error: the span's status is Error.
pub(super) fn finished(span: &Span, result: &Result<Outcome, EngineError>) {
    if let Err(error) = result {
        traces::set_error(span, &error.to_string());
    }
}
