//! OTLP/gRPC export: `TraceService/Export` over one HTTP/2 channel to the collector, dialled
//! through [`Collector::connect`] so that an `https://` collector gets the same TLS as
//! OTLP/HTTP, with the operator's headers as metadata. The answer is bounded by tonic's
//! decoding limit, set to [`MAX_ANSWER_BYTES`].

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;

use super::collector::Collector;
use super::env::OtlpHeaders;
use super::export_error::{ExportError, SendError};
use super::http_export::MAX_ANSWER_BYTES;

pub struct GrpcExporter {
    client: TraceServiceClient<Channel>,
    headers: OtlpHeaders,
}

impl GrpcExporter {
    pub fn new(
        collector: Collector,
        headers: OtlpHeaders,
        timeout: std::time::Duration,
    ) -> Result<Self, ExportError> {
        let endpoint = tonic::transport::Endpoint::from_shared(collector.origin())?
            .connect_timeout(timeout)
            .timeout(timeout);
        let channel = endpoint.connect_with_connector_lazy(tower::service_fn(move |_| {
            let collector = collector.clone();
            async move { collector.connect().await.map(hyper_util::rt::TokioIo::new) }
        }));
        Ok(Self {
            client: TraceServiceClient::new(channel).max_decoding_message_size(MAX_ANSWER_BYTES),
            headers,
        })
    }

    pub async fn send(&mut self, body: ExportTraceServiceRequest) -> Result<(), SendError> {
        let request = tonic::Request::from_parts(
            MetadataMap::from_headers(self.headers.map().clone()),
            tonic::Extensions::default(),
            body,
        );
        self.client.export(request).await?;
        Ok(())
    }
}
