//! Finished traces as an OTLP `ExportTraceServiceRequest`, the message both OTLP/HTTP
//! (protobuf body) and OTLP/gRPC carry.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, ResourceSpans, ScopeSpans, Span};

use super::record::{FinishedTrace, SpanDetail, REQUEST};

fn text(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
    }
}

fn int(key: &str, value: u64) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(
                i64::try_from(value).unwrap_or(i64::MAX),
            )),
        }),
    }
}

/// The resource attributes: `service.name` (tensorport unless the operator names it) and the
/// operator's others.
fn resource(attributes: &[(String, String)]) -> Resource {
    let mut kvs: Vec<KeyValue> = attributes
        .iter()
        .map(|(k, v)| text(k, v.as_str()))
        .collect();
    if !attributes.iter().any(|(k, _)| k == "service.name") {
        kvs.push(text("service.name", "tensorport"));
    }
    Resource {
        attributes: kvs,
        ..Default::default()
    }
}

/// One request with the spans of `traces`.
pub fn export_request(
    traces: &[FinishedTrace],
    attributes: &[(String, String)],
) -> ExportTraceServiceRequest {
    let mut spans = Vec::new();
    for trace in traces {
        let id = &trace.identity;
        for record in &trace.spans {
            let root = record.name == REQUEST;
            let mut attributes = Vec::with_capacity(4);
            match &record.detail {
                SpanDetail::Step { model } => attributes.push(text("model_name", model.as_ref())),
                _ => {
                    attributes.push(text("model_name", id.model.as_ref()));
                    attributes.push(int("model_version", id.version));
                }
            }
            if let SpanDetail::Batch { size, instance } = record.detail {
                attributes.push(int("batch_size", size as u64));
                attributes.push(int("instance", instance as u64));
            }
            if root {
                attributes.push(text("protocol", id.protocol));
            }
            let parent = if record.parent == [0; 8] {
                Vec::new()
            } else {
                record.parent.to_vec()
            };
            spans.push(Span {
                trace_id: id.trace_id.to_vec(),
                span_id: record.id.to_vec(),
                trace_state: if root {
                    id.tracestate.clone()
                } else {
                    String::new()
                },
                parent_span_id: parent,
                name: record.name.to_owned(),
                kind: if root {
                    SpanKind::Server
                } else {
                    SpanKind::Internal
                } as i32,
                start_time_unix_nano: record.start_unix_ns,
                end_time_unix_nano: record.end_unix_ns.max(record.start_unix_ns),
                attributes,
                ..Default::default()
            });
        }
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource(attributes)),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "tensorport".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
