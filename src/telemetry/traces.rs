//! OpenTelemetry traces, when `otlp_endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`)
//! is set: the delivery spans ([`DELIVERY_SPANS`]) go from the tracing
//! subscriber, through tracing-opentelemetry, to a batch processor that
//! sends them over OTLP/HTTP with protobuf. Unset, none of this is built and,
//! at the default log level, the delivery's inner spans (at debug) are not
//! even created.
//!
//! A caller's W3C `traceparent` is continued ([`continue_trace`]), and the
//! `forward` handler passes the current span's on ([`traceparent_headers`]).
//! Attributes never hold a secret or a payload; request-derived text is
//! escaped and capped as in the log (`log_text`).

mod http_client;

use crate::log_text::escaped;
use actix_web::http::header::HeaderMap;
pub use opentelemetry::KeyValue;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Status, TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The service name when `OTEL_SERVICE_NAME` is unset.
pub const DEFAULT_SERVICE_NAME: &str = "idempotent-receiver";

/// The spans exported, by name: a delivery and its steps, and a queued
/// delivery's run on a worker (`job`). Nothing else
/// (the `request` span of every route, the client libraries' spans, log
/// events) reaches the exporter: a health probe or a metrics scrape is not a
/// trace, and the exporter's own HTTP calls must not trace themselves.
pub const DELIVERY_SPANS: &[&str] = &[
    "webhook", "verify", "process", "claim", "handler", "complete", "job",
];

/// Set once an exporter is running, so that attributes are built only when
/// something will read them.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Where spans go and under which service name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSettings {
    /// The full OTLP/HTTP traces URL (`.../v1/traces`).
    pub endpoint: String,
    pub service_name: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("the OTLP exporter's HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// Without the exporter's own message: it repeats the endpoint, whose
    /// userinfo may hold a password.
    #[error("the OTLP exporter cannot be built for this endpoint")]
    Exporter,
    #[error("the spans could not be sent: {0}")]
    Export(#[source] opentelemetry_sdk::error::OTelSdkError),
}

/// A running exporter: a tracer provider with its batch processor.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Traces {
    /// Builds the exporter; its HTTP calls run on `runtime`, which must
    /// outlive it (the process's runtime in `serve`).
    pub fn start(
        settings: &TraceSettings,
        runtime: tokio::runtime::Handle,
    ) -> Result<Traces, TraceError> {
        let client = http_client::SpawnedReqwest::new(runtime).map_err(TraceError::Client)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(settings.endpoint.clone())
            .build()
            .map_err(|_| TraceError::Exporter)?;
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_batch_exporter(exporter)
            .build();
        let tracer = provider.tracer(env!("CARGO_PKG_NAME"));
        EXPORTING.store(true, Ordering::Relaxed);
        Ok(Traces { provider, tracer })
    }

    /// The subscriber layer that turns the delivery spans into OpenTelemetry
    /// spans, whatever the log's level: its filter is its own.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            // Where in our source a span was opened, and on which thread,
            // says nothing to whoever reads the trace.
            .with_location(false)
            .with_threads(false)
            .with_level(false)
            .with_target(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.is_span()
                    && meta.target().starts_with(env!("CARGO_CRATE_NAME"))
                    && DELIVERY_SPANS.contains(&meta.name())
            }))
    }

    /// Sends every finished span now.
    pub fn flush(&self) -> Result<(), TraceError> {
        self.provider.force_flush().map_err(TraceError::Export)
    }

    /// Sends what is left and stops the processor. It waits for the last
    /// export, so call it off the runtime's workers (`spawn_blocking`).
    pub fn shutdown(&self) -> Result<(), TraceError> {
        EXPORTING.store(false, Ordering::Relaxed);
        self.provider.shutdown().map_err(TraceError::Export)
    }
}

/// Whether spans are exported in this process.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Makes `span` (not yet entered) a child of the trace that the caller's
/// `traceparent` (and `tracestate`) names; a missing or malformed one
/// leaves it a root.
pub fn continue_trace(span: &Span, headers: &HeaderMap) {
    if !exporting() {
        return;
    }
    let remote = TraceContextPropagator::new().extract(&ActixHeaders(headers));
    if remote.span().span_context().is_valid() {
        // Only fails when the span is disabled or already started: then
        // there is nothing to continue.
        let _ = span.set_parent(remote);
    }
}

/// The current span's `traceparent` (and `tracestate`), for a request that
/// leaves the receiver; empty when nothing is exported.
pub fn traceparent_headers() -> Vec<(String, String)> {
    if !exporting() {
        return Vec::new();
    }
    let context = Span::current().context();
    let mut headers = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut headers);
    headers.into_iter().collect()
}

/// Sets attributes on `span`'s OpenTelemetry span; `attributes` runs only
/// when spans are exported.
pub fn set_attributes(span: &Span, attributes: impl FnOnce() -> Vec<KeyValue>) {
    if !exporting() {
        return;
    }
    for attribute in attributes() {
        span.set_attribute(attribute.key, attribute.value);
    }
}

/// Marks `span` failed, with `description` (escaped and capped).
pub fn set_error(span: &Span, description: &str) {
    if exporting() {
        span.set_status(Status::error(escaped(description).to_string()));
    }
}

/// Request-derived text as an attribute value: escaped and capped.
pub fn capped(text: &str) -> String {
    escaped(text).to_string()
}

/// actix's header map as the propagator reads it.
struct ActixHeaders<'a>(&'a HeaderMap);

impl Extractor for ActixHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|name| name.as_str()).collect()
    }
}
