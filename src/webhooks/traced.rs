//! The delivery's spans as OpenTelemetry sees them: the `webhook` span
//! continues the caller's trace and carries the delivery's attributes
//! (OpenTelemetry's names where they exist, `webhook.*` for the rest);
//! `verify` says why a request was refused. Every value taken from the
//! request is escaped and capped; no secret, header or payload is set.

// `ROUTE`: the route as OpenTelemetry's `http.route` names it, the
// pattern, never the path.
use super::{Answered, ROUTE};
use crate::providers::Rejection;
use crate::telemetry::traces::{self, KeyValue, capped};
use actix_web::HttpRequest;
use tracing::{Span, field};

/// The span of one request to `POST /webhooks/{endpoint}`, not yet entered:
/// a child of the caller's `traceparent` when it sent one.
pub(super) fn webhook_span(request: &HttpRequest, endpoint: &str) -> Span {
    // The endpoint segment is the caller's text, percent-decoded: a newline or
    // an ESC in it would forge or recolour log lines, so it is logged escaped
    // and capped like every other field taken from a request.
    let span = tracing::info_span!(
        "webhook",
        endpoint = %crate::log_text::escaped(endpoint),
        delivery_id = field::Empty,
        event_type = field::Empty,
        outcome = field::Empty,
        reason = field::Empty,
        duration_ms = field::Empty,
    );
    traces::continue_trace(&span, request.headers());
    traces::set_attributes(&span, || {
        vec![
            KeyValue::new("http.request.method", request.method().as_str().to_owned()),
            KeyValue::new("http.route", ROUTE),
            KeyValue::new("webhook.endpoint", capped(endpoint)),
        ]
    });
    span
}

/// The first delivery of the request: its id and event type.
pub(super) fn delivery(span: &Span, endpoint: &str, delivery_id: &str, event_type: Option<&str>) {
    traces::set_attributes(span, || {
        crate::engine::delivery_attributes(endpoint, delivery_id, event_type)
    });
}

/// The answer: its status and outcome, and for a refusal or a failure the
/// reason, with the span's status Error.
pub(super) fn answered(span: &Span, answered: &Answered) {
    let status = answered.response.status().as_u16();
    traces::set_attributes(span, || {
        let mut attributes = vec![
            KeyValue::new("http.response.status_code", i64::from(status)),
            KeyValue::new("webhook.outcome", answered.outcome),
        ];
        if let Some(reason) = &answered.reason {
            attributes.push(KeyValue::new("webhook.rejection", reason.clone()));
        }
        attributes
    });
    let failed = matches!(
        answered.outcome,
        "rejected" | "failed" | "unavailable" | "lease_lost" | "key_reused"
    );
    if failed {
        let description = match (&answered.reason, &answered.detail) {
            (Some(reason), Some(detail)) => format!("{reason}: {detail}"),
            (Some(reason), None) => reason.clone(),
            (None, Some(detail)) => detail.clone(),
            (None, None) => answered.outcome.to_owned(),
        };
        traces::set_error(span, &description);
    }
}

/// A refusal found while verifying, on the `verify` span.
pub(super) fn refused(span: &Span, rejection: &Rejection) {
    traces::set_error(span, &rejection.to_string());
}
