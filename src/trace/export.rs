//! The exporter: finished traces wait in a bounded queue and a background task sends them
//! in batches to the collector over OTLP/HTTP (protobuf) or OTLP/gRPC. A full queue, a
//! collector that refuses, fails or never answers within the timeout: the spans are dropped
//! and counted (`tensorport_trace_spans_dropped_total`); a request never waits for any of it.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;
use tokio::sync::mpsc;

use super::config::{ExportSettings, OtlpProtocol, TraceConfig};
use super::context::IdSource;
use super::counters::TraceCounters;
use super::otlp::export_request;
use super::record::FinishedTrace;
use super::settings::TraceSettings;

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("trace collector URL '{url}' is not http://HOST:PORT/PATH: {why}")]
    Url { url: String, why: String },
}

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
    Http { authority: String, uri: http::Uri },
    Grpc(TraceServiceClient<tonic::transport::Channel>),
}

impl Target {
    fn parse(export: &ExportSettings) -> Result<Self, ExportError> {
        let fail = |why: String| ExportError::Url {
            url: export.url.clone(),
            why,
        };
        let uri: http::Uri = export.url.parse().map_err(|e| fail(format!("{e}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(fail(
                "only http:// collectors are supported (run a local collector or agent for TLS)"
                    .into(),
            ));
        }
        let authority = uri
            .authority()
            .ok_or_else(|| fail("no host".into()))?
            .to_string();
        match export.protocol {
            OtlpProtocol::HttpProtobuf => Ok(Self::Http { authority, uri }),
            OtlpProtocol::Grpc => {
                let channel = tonic::transport::Channel::from_shared(format!("http://{authority}"))
                    .map_err(|e| fail(e.to_string()))?
                    .connect_timeout(export.timeout)
                    .timeout(export.timeout)
                    .connect_lazy();
                Ok(Self::Grpc(TraceServiceClient::new(channel)))
            }
        }
    }

    async fn send(
        &mut self,
        body: opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
    ) -> Result<(), String> {
        match self {
            Self::Http { authority, uri } => {
                let stream = tokio::net::TcpStream::connect(authority.as_str())
                    .await
                    .map_err(|e| e.to_string())?;
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(|e| e.to_string())?;
                let driver = tokio::spawn(connection);
                let request = http::Request::post(uri.clone())
                    .header(http::header::HOST, authority.as_str())
                    .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                    .body(Full::new(Bytes::from(body.encode_to_vec())))
                    .map_err(|e| e.to_string())?;
                let answer = sender
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string());
                let outcome = match answer {
                    Ok(answer) if answer.status().is_success() => {
                        let _ = answer.into_body().collect().await;
                        Ok(())
                    }
                    Ok(answer) => Err(format!("collector answered {}", answer.status())),
                    Err(err) => Err(err),
                };
                driver.abort();
                outcome
            }
            Self::Grpc(client) => client
                .export(body)
                .await
                .map(|_| ())
                .map_err(|status| status.to_string()),
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
        let sent = tokio::time::timeout(export.timeout, target.send(request)).await;
        match sent {
            Ok(Ok(())) => {
                counters.exported.inc_by(spans);
                warned = false;
            }
            failed => {
                counters.dropped.inc_by(spans);
                if !warned {
                    let why = match failed {
                        Ok(Err(why)) => why,
                        _ => format!("no answer within {:?}", export.timeout),
                    };
                    tracing::warn!(url = %export.url, "trace export failed, spans dropped: {why}");
                    warned = true;
                }
            }
        }
    }
}
