//! Why the trace exporter could not start (at start-up, stopping it), and why one export
//! failed (its spans are dropped and counted, and the next export tries again).

use std::path::PathBuf;

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("trace collector URL '{url}' is not http(s)://HOST[:PORT][/PATH]: {why}")]
    Url { url: String, why: &'static str },
    #[error("trace collector URL '{url}': {source}")]
    Uri {
        url: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("trace collector {what} {}: {source}", path.display())]
    Pem {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("trace collector {what} {}: no certificate in the file", path.display())]
    NoCertificate { what: &'static str, path: PathBuf },
    #[error("trace collector CA file {}: {source}", path.display())]
    Certificate {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error(
        "no trusted roots for an https:// trace collector: the system has none; name a CA file \
         with OTEL_EXPORTER_OTLP_CERTIFICATE"
    )]
    NoRoots,
    #[error("TLS for the trace collector: {0}")]
    Tls(#[from] rustls::Error),
    #[error("trace collector gRPC endpoint: {0}")]
    Grpc(#[from] tonic::transport::Error),
}

/// Why one export failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("connecting to the collector: {0}")]
    Connect(#[source] std::io::Error),
    #[error("TLS handshake with the collector: {0}")]
    Handshake(#[source] std::io::Error),
    #[error("HTTP with the collector: {0}")]
    Http(#[from] hyper::Error),
    #[error("the export request could not be built: {0}")]
    Request(#[from] http::Error),
    #[error("the collector answered {0}")]
    Status(http::StatusCode),
    #[error("the collector answered over gRPC: {0}")]
    Grpc(#[from] tonic::Status),
    #[error("no answer within {0:?}")]
    Timeout(std::time::Duration),
}
