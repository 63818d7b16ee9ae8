//! What `otlp-dump` does with a request: an OTLP `ExportTraceServiceRequest`
//! (protobuf, as OTLP/HTTP sends it) becomes one JSON object per span, with
//! the ids in hex and the attributes as a flat map, so that a trace can be
//! read, or filtered with `jq`, without a tracing backend.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use serde_json::{Map, Value as Json, json};

/// Decodes an export request's body; `None` when it is not one.
pub fn decode(body: &[u8]) -> Option<ExportTraceServiceRequest> {
    ExportTraceServiceRequest::decode(body).ok()
}

/// One JSON object per span of `request`, in the order received.
pub fn spans(request: &ExportTraceServiceRequest) -> Vec<Json> {
    let mut out = Vec::new();
    for resource_spans in &request.resource_spans {
        let resource = resource_spans
            .resource
            .as_ref()
            .map(|resource| attributes(&resource.attributes))
            .unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or(Json::Null);
        for scope_spans in &resource_spans.scope_spans {
            for span in &scope_spans.spans {
                let status = span.status.as_ref();
                let nanos = span
                    .end_time_unix_nano
                    .saturating_sub(span.start_time_unix_nano);
                out.push(json!({
                    "service": service,
                    "trace_id": hex::encode(&span.trace_id),
                    "span_id": hex::encode(&span.span_id),
                    "parent_span_id": hex::encode(&span.parent_span_id),
                    "name": span.name,
                    "start_unix_nano": span.start_time_unix_nano,
                    "duration_ms": nanos as f64 / 1e6,
                    // 0 unset, 1 ok, 2 error (OTLP's StatusCode).
                    "status": status.map_or(0, |s| s.code),
                    "status_message": status.map(|s| s.message.clone()).unwrap_or_default(),
                    "attributes": attributes(&span.attributes),
                }));
            }
        }
    }
    out
}

fn attributes(list: &[KeyValue]) -> Map<String, Json> {
    list.iter()
        .map(|kv| (kv.key.clone(), kv.value.as_ref().map_or(Json::Null, value)))
        .collect()
}

fn value(any: &AnyValue) -> Json {
    match &any.value {
        Some(Value::StringValue(text)) => json!(text),
        Some(Value::BoolValue(flag)) => json!(flag),
        Some(Value::IntValue(number)) => json!(number),
        Some(Value::DoubleValue(number)) => json!(number),
        Some(Value::BytesValue(bytes)) => json!(hex::encode(bytes)),
        Some(Value::ArrayValue(array)) => Json::Array(array.values.iter().map(value).collect()),
        Some(Value::KvlistValue(list)) => Json::Object(attributes(&list.values)),
        // An index into a string table of the profiles signal: traces
        // never send one, and there is no table here to resolve it.
        Some(Value::StringValueStrindex(index)) => json!({ "strindex": index }),
        None => Json::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

    fn text(key: &str, text: &str) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(text.to_owned())),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_span_becomes_one_json_object_with_hex_ids_and_flat_attributes() {
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![text("service.name", "idempotent-receiver")],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span {
                        trace_id: vec![0x4b; 16],
                        span_id: vec![0x01; 8],
                        name: "webhook".to_owned(),
                        start_time_unix_nano: 1_000_000,
                        end_time_unix_nano: 3_500_000,
                        attributes: vec![
                            text("webhook.outcome", "rejected"),
                            KeyValue {
                                key: "http.response.status_code".to_owned(),
                                value: Some(AnyValue {
                                    value: Some(Value::IntValue(401)),
                                }),
                                ..Default::default()
                            },
                        ],
                        status: Some(Status {
                            code: 2,
                            message: "invalid-signature".to_owned(),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let decoded = decode(&request.encode_to_vec()).expect("it decodes");
        let spans = spans(&decoded);
        assert_eq!(spans.len(), 1);
        let span = &spans[0];
        assert_eq!(span["service"], "idempotent-receiver");
        assert_eq!(span["trace_id"], "4b".repeat(16));
        assert_eq!(span["span_id"], "01".repeat(8));
        assert_eq!(span["parent_span_id"], "");
        assert_eq!(span["name"], "webhook");
        assert_eq!(span["duration_ms"], 2.5);
        assert_eq!(span["status"], 2);
        assert_eq!(span["status_message"], "invalid-signature");
        assert_eq!(span["attributes"]["webhook.outcome"], "rejected");
        assert_eq!(span["attributes"]["http.response.status_code"], 401);
    }

    #[test]
    fn what_is_not_an_export_request_is_refused() {
        assert!(decode(b"\xff\xff\xff not protobuf").is_none());
    }
}
