//! The exporter: finished traces wait in a bounded queue and a background task sends them
//! in batches to the collector over OTLP/HTTP (protobuf, `http_export`) or OTLP/gRPC
//! (`grpc_export`), plain or over TLS. A full queue, a collector that refuses, fails or never
//! answers within the timeout: the spans are dropped and counted
//! (`tensorport_trace_spans_dropped_total`); a request never waits for any of it.

use std::sync::Arc;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use tokio::sync::mpsc;

use super::collector::Collector;
use super::config::{ExportSettings, OtlpProtocol, TraceConfig};
use super::context::IdSource;
use super::counters::TraceCounters;
pub use super::export_error::{ExportError, SendError};
use super::grpc_export::GrpcExporter;
use super::http_export::HttpExporter;
use super::otlp::export_request;
use super::record::FinishedTrace;
use super::settings::TraceSettings;

/// Samples requests and takes their finished traces to the exporter.
#[derive(Debug)]
pub struct Tracer {
    settings: Arc<TraceSettings>,
    ids: IdSource,
    queue: mpsc::Sender<FinishedTrace>,
    counters: TraceCounters,
}

impl Tracer {
    /// Starts the exporter task (on the current Tokio runtime) for `config`'s collector.
    pub fn start(
        config: &TraceConfig,
        settings: Arc<TraceSettings>,
        counters: TraceCounters,
    ) -> Result<Arc<Self>, ExportError> {
        let export = config.export.clone();
        let target = Target::parse(&export)?;
        let (queue, received) = mpsc::channel(export.max_queue.max(1));
        tokio::spawn(run(received, export, target, counters.clone()));
        Ok(Arc::new(Self {
            settings,
            ids: IdSource::default(),
            queue,
            counters,
        }))
    }

    pub fn settings(&self) -> &TraceSettings {
        &self.settings
    }

    pub fn ids(&self) -> &IdSource {
        &self.ids
    }

    /// Queues `trace` for export, or drops and counts it when the queue is full.
    pub fn submit(&self, trace: FinishedTrace) {
        let spans = trace.spans.len() as u64;
        if self.queue.try_send(trace).is_err() {
            self.counters.dropped.inc_by(spans);
        }
    }
}

/// Where the exporter sends.
enum Target {
    Http(HttpExporter),
    Grpc(GrpcExporter),
}

impl Target {
    fn parse(export: &ExportSettings) -> Result<Self, ExportError> {
        match export.protocol {
            OtlpProtocol::HttpProtobuf => {
                let collector = Collector::parse(&export.url, &export.tls, b"http/1.1")?;
                Ok(Self::Http(HttpExporter::new(
                    collector,
                    export.headers.clone(),
                )))
            }
            OtlpProtocol::Grpc => {
                let collector = Collector::parse(&export.url, &export.tls, b"h2")?;
                Ok(Self::Grpc(GrpcExporter::new(
                    collector,
                    export.headers.clone(),
                    export.timeout,
                )?))
            }
        }
    }

    async fn send(&mut self, body: ExportTraceServiceRequest) -> Result<(), SendError> {
        match self {
            Self::Http(http) => http.send(Bytes::from(body.encode_to_vec())).await,
            Self::Grpc(grpc) => grpc.send(body).await,
        }
    }
}

/// The exporter task: a batch goes out when it is full or `delay` after its first trace;
/// each export is bounded by the timeout, so a stuck collector only fills (and overflows)
/// the queue.
async fn run(
    mut received: mpsc::Receiver<FinishedTrace>,
    export: ExportSettings,
    mut target: Target,
    counters: TraceCounters,
) {
    let mut warned = false;
    while let Some(first) = received.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + export.delay;
        while batch.len() < export.max_batch {
            tokio::select! {
                next = received.recv() => match next {
                    Some(trace) => batch.push(trace),
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        let spans: u64 = batch.iter().map(|t| t.spans.len() as u64).sum();
        let request = export_request(&batch, &export.resource);
        drop(batch);
        // The whole export, connecting and reading the answer included.
        let sent = tokio::time::timeout(export.timeout, target.send(request))
            .await
            .unwrap_or(Err(SendError::Timeout(export.timeout)));
        match sent {
            Ok(()) => {
                counters.exported.inc_by(spans);
                warned = false;
            }
            Err(why) => {
                counters.dropped.inc_by(spans);
                if !warned {
                    tracing::warn!(url = %export.url, "trace export failed, spans dropped: {why}");
                    warned = true;
                }
            }
        }
    }
}
