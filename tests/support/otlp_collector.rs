//! A small OTLP/HTTP collector for tests: it takes `POST /v1/traces`
//! (protobuf), decodes each request with `opentelemetry-proto` and keeps
//! every span with its resource's `service.name`. It also plays a
//! downstream for the `forward` handler (`POST /downstream`), keeping the
//! `traceparent` each call carried. It serves on a thread and runtime of its
//! own until the test binary exits.

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// A span as received, with the service that sent it.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    pub service: String,
    pub span: Span,
}

impl ReceivedSpan {
    pub fn name(&self) -> &str {
        &self.span.name
    }

    pub fn trace_id(&self) -> String {
        hex::encode(&self.span.trace_id)
    }

    pub fn span_id(&self) -> String {
        hex::encode(&self.span.span_id)
    }

    /// Empty for a root span.
    pub fn parent_span_id(&self) -> String {
        hex::encode(&self.span.parent_span_id)
    }

    /// A string or integer attribute, as text.
    pub fn attribute(&self, key: &str) -> Option<String> {
        let value = self
            .span
            .attributes
            .iter()
            .find(|attribute| attribute.key == key)?
            .value
            .as_ref()?
            .value
            .as_ref()?;
        Some(match value {
            AnyValue::StringValue(text) => text.clone(),
            AnyValue::IntValue(number) => number.to_string(),
            AnyValue::BoolValue(flag) => flag.to_string(),
            other => format!("{other:?}"),
        })
    }

    /// The status code: 0 unset, 1 ok, 2 error.
    pub fn status_code(&self) -> i32 {
        self.span.status.as_ref().map_or(0, |status| status.code)
    }

    pub fn status_message(&self) -> String {
        self.span
            .status
            .as_ref()
            .map(|status| status.message.clone())
            .unwrap_or_default()
    }
}

#[derive(Default)]
struct State {
    spans: Mutex<Vec<ReceivedSpan>>,
    traceparents: Mutex<Vec<String>>,
    /// Told after every export and every downstream call.
    changed: Notify,
}

pub struct Collector {
    pub base_url: String,
    state: Arc<State>,
}

impl Collector {
    /// Listens on a free port of 127.0.0.1.
    pub fn start() -> Collector {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("an address").port();
        let state = Arc::new(State::default());
        let served = state.clone();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                HttpServer::new(move || {
                    App::new()
                        .app_data(web::Data::new(served.clone()))
                        .app_data(web::PayloadConfig::new(16 * 1024 * 1024))
                        .route("/v1/traces", web::post().to(export))
                        .route("/downstream", web::post().to(downstream))
                })
                .workers(1)
                .listen(listener)
                .expect("the collector listens")
                .run()
                .await
            })
        });
        Collector {
            base_url: format!("http://127.0.0.1:{port}"),
            state,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.state.spans.lock().expect("the spans").clone()
    }

    /// Every `traceparent` the downstream received (a call without one
    /// counts as an empty string).
    pub fn traceparents(&self) -> Vec<String> {
        self.state.traceparents.lock().expect("the calls").clone()
    }

    /// Waits for the next export or downstream call.
    pub async fn changed(&self) {
        self.state.changed.notified().await
    }
}

async fn export(state: web::Data<Arc<State>>, body: web::Bytes) -> HttpResponse {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return HttpResponse::BadRequest().finish();
    };
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|resource| &resource.attributes)
            .find(|attribute| attribute.key == "service.name")
            .and_then(
                |attribute| match attribute.value.as_ref()?.value.as_ref()? {
                    AnyValue::StringValue(name) => Some(name.clone()),
                    _ => None,
                },
            )
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.push(ReceivedSpan {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    state.spans.lock().expect("the spans").extend(received);
    state.changed.notify_waiters();
    // An empty ExportTraceServiceResponse: full success.
    HttpResponse::Ok()
        .content_type("application/x-protobuf")
        .body(Vec::new())
}

async fn downstream(state: web::Data<Arc<State>>, request: HttpRequest) -> HttpResponse {
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
        .to_owned();
    state
        .traceparents
        .lock()
        .expect("the calls")
        .push(traceparent);
    state.changed.notify_waiters();
    HttpResponse::Ok().json(serde_json::json!({ "ok": true }))
}
