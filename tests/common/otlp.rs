//! Tiny OpenTelemetry collectors for the tracing tests: an OTLP/HTTP receiver (protobuf
//! `POST /v1/traces`) and an OTLP/gRPC one (`TraceService/Export`), both decoding
//! `ExportTraceServiceRequest` with `opentelemetry-proto` and keeping every span they get;
//! and one that accepts connections and never answers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// The spans a receiver got, and a bell rung on each export.
#[derive(Clone, Default)]
pub struct Received {
    spans: Arc<Mutex<Vec<Span>>>,
    /// `service.name` of each export's resource.
    services: Arc<Mutex<Vec<String>>>,
    bell: Arc<Notify>,
}

impl Received {
    fn take(&self, request: ExportTraceServiceRequest) {
        for resource in request.resource_spans {
            if let Some(resource) = &resource.resource {
                for kv in &resource.attributes {
                    if kv.key == "service.name" {
                        if let Some(AnyValue::StringValue(name)) =
                            kv.value.as_ref().and_then(|v| v.value.clone())
                        {
                            self.services.lock().unwrap().push(name);
                        }
                    }
                }
            }
            for scope in resource.scope_spans {
                self.spans.lock().unwrap().extend(scope.spans);
            }
        }
        self.bell.notify_waiters();
    }

    /// The spans of trace `trace_id`, once `done` holds for them (polled on each export,
    /// within a minute).
    pub async fn wait_for(&self, trace_id: &[u8], done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let notified = self.bell.notified();
            let spans: Vec<Span> = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|span| span.trace_id == trace_id)
                .cloned()
                .collect();
            if done(&spans) {
                return spans;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            assert!(
                !left.is_zero(),
                "no complete trace {trace_id:02x?}: {spans:#?}"
            );
            let _ = tokio::time::timeout(left.min(Duration::from_secs(1)), notified).await;
        }
    }

    pub fn services(&self) -> Vec<String> {
        self.services.lock().unwrap().clone()
    }
}

/// An attribute of `span` as text.
pub fn attribute(span: &Span, key: &str) -> Option<String> {
    let kv = span.attributes.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(n) => Some(n.to_string()),
        other => Some(format!("{other:?}")),
    }
}

/// Spans by id.
pub fn by_id(spans: &[Span]) -> HashMap<Vec<u8>, &Span> {
    spans.iter().map(|s| (s.span_id.clone(), s)).collect()
}

/// An OTLP/HTTP receiver on 127.0.0.1:0; its URL is `http://ADDR/v1/traces`.
pub async fn http_receiver() -> (String, Received) {
    let received = Received::default();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                match ExportTraceServiceRequest::decode(body) {
                    Ok(request) => {
                        sink.take(request);
                        let answer = ExportTraceServiceResponse::default().encode_to_vec();
                        (http::StatusCode::OK, answer)
                    }
                    Err(_) => (http::StatusCode::BAD_REQUEST, Vec::new()),
                }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/v1/traces"), received)
}

struct GrpcSink(Received);

#[tonic::async_trait]
impl TraceService for GrpcSink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.take(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An OTLP/gRPC receiver on 127.0.0.1:0; its address is `http://ADDR`.
pub async fn grpc_receiver() -> (String, Received) {
    let received = Received::default();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = TraceServiceServer::new(GrpcSink(received.clone()));
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
    });
    (format!("http://{addr}"), received)
}

/// A collector that accepts connections, reads nothing and never answers; its URL.
pub async fn silent_collector() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!("http://{addr}/v1/traces")
}
