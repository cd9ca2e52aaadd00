//! Tiny OpenTelemetry collectors for the tracing tests: an OTLP/HTTP receiver (protobuf
//! `POST /v1/traces`) and an OTLP/gRPC one (`TraceService/Export`), both decoding
//! `ExportTraceServiceRequest` with `opentelemetry-proto` and keeping every span they get;
//! one that accepts connections and never answers; and one written on raw sockets
//! ([`raw_collector`]), plain or TLS, that records each request as it came off the wire and
//! answers as a test tells it to, hostile answers included.

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

/// One export request as a collector read it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Which connection it came on, counted from 0 in the order they were accepted.
    pub connection: usize,
    /// The request target as sent (`/v1/traces`, or a whole URL in absolute form).
    pub target: String,
    pub headers: http::HeaderMap,
}

/// The spans a receiver got, and a bell rung on each export.
#[derive(Clone, Default)]
pub struct Received {
    spans: Arc<Mutex<Vec<Span>>>,
    requests: Arc<Mutex<Vec<Seen>>>,
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

    /// The export requests so far, in order.
    pub fn requests(&self) -> Vec<Seen> {
        self.requests.lock().unwrap().clone()
    }

    fn saw(&self, seen: Seen) {
        self.requests.lock().unwrap().push(seen);
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
        let (metadata, _, request) = request.into_parts();
        self.0.saw(Seen {
            connection: 0,
            target: "/opentelemetry.proto.collector.trace.v1.TraceService/Export".to_owned(),
            headers: metadata.into_headers(),
        });
        self.0.take(request);
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

/// An OTLP/gRPC receiver over TLS on 127.0.0.1:0; its address is `https://ADDR`.
pub async fn grpc_receiver_tls(acceptor: tokio_rustls::TlsAcceptor) -> (String, Received) {
    let received = Received::default();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = TraceServiceServer::new(GrpcSink(received.clone()));
    // Handshakes one connection at a time: the tests make one.
    let incoming =
        futures::stream::unfold((listener, acceptor), |(listener, acceptor)| async move {
            let (socket, _) = listener.accept().await.ok()?;
            let tls = acceptor.accept(socket).await.map(TlsIo);
            Some((tls, (listener, acceptor)))
        });
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
    });
    (format!("https://{addr}"), received)
}

/// A server-side TLS stream as tonic's server takes connections.
struct TlsIo(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for TlsIo {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl tokio::io::AsyncRead for TlsIo {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsIo {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
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

/// How [`raw_collector`] answers each export it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `200` with an empty `ExportTraceServiceResponse`, the connection kept open.
    Normal,
    /// `200` with `Connection: close`, then the connection closed.
    Close,
    /// `200` announcing `Content-Length: 8 GiB`, then zeros until the exporter hangs up.
    Huge,
    /// `200` with a chunked body of zeros that never ends, until the exporter hangs up.
    Endless,
}

/// The most answer bytes a hostile collector writes on one connection: far past any bound
/// the exporter should keep, and short of filling the test machine's memory.
pub const HOSTILE_CAP: u64 = 256 << 20;

/// A collector on raw sockets: what it saw, and the answer bytes it wrote on each connection
/// that ended in a hostile answer (in the order those connections ended).
pub struct RawCollector {
    pub url: String,
    pub received: Received,
    pub accepted: Arc<std::sync::atomic::AtomicUsize>,
    pub written: tokio::sync::mpsc::Receiver<u64>,
    /// One message per TLS handshake that failed.
    pub refused: tokio::sync::mpsc::Receiver<()>,
}

/// A collector on 127.0.0.1:0 that answers `answer`; over TLS with `tls` (its URL is then
/// `https://`).
pub async fn raw_collector(answer: Answer, tls: Option<tokio_rustls::TlsAcceptor>) -> RawCollector {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Received::default();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (written_tx, written) = tokio::sync::mpsc::channel(64);
    let (refused_tx, refused) = tokio::sync::mpsc::channel(64);
    let (sink, count) = (received.clone(), accepted.clone());
    let scheme = if tls.is_some() { "https" } else { "http" };
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let connection = count.fetch_add(1, Ordering::SeqCst);
            let (sink, written_tx, tls) = (sink.clone(), written_tx.clone(), tls.clone());
            let refused_tx = refused_tx.clone();
            tokio::spawn(async move {
                let total = match tls {
                    None => serve_raw(socket, connection, answer, &sink).await,
                    Some(tls) => match tls.accept(socket).await {
                        Ok(stream) => serve_raw(stream, connection, answer, &sink).await,
                        Err(_) => {
                            let _ = refused_tx.send(()).await;
                            None
                        }
                    },
                };
                if let Some(total) = total {
                    let _ = written_tx.send(total).await;
                }
            });
        }
    });
    RawCollector {
        url: format!("{scheme}://{addr}/v1/traces"),
        received,
        accepted,
        written,
        refused,
    }
}

/// Reads requests off `stream` and answers each; for a hostile answer, the body bytes it
/// wrote before the exporter hung up (or [`HOSTILE_CAP`]).
async fn serve_raw<S>(
    mut stream: S,
    connection: usize,
    answer: Answer,
    sink: &Received,
) -> Option<u64>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = Vec::new();
    loop {
        // The head, then the body its Content-Length announces.
        let head_end = loop {
            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
            assert!(buffer.len() < 1 << 20, "a request head over 1 MiB");
        };
        let head = String::from_utf8(buffer[..head_end].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap();
        let target = request_line
            .split(' ')
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let mut headers = http::HeaderMap::new();
        for line in lines.filter(|l| !l.is_empty()) {
            let (name, value) = line.split_once(':').unwrap();
            headers.append(
                http::HeaderName::from_bytes(name.trim().as_bytes()).unwrap(),
                http::HeaderValue::from_str(value.trim()).unwrap(),
            );
        }
        let length: usize = headers
            .get(http::header::CONTENT_LENGTH)
            .map(|v| v.to_str().unwrap().parse().unwrap())
            .unwrap_or(0);
        while buffer.len() < head_end + length {
            let mut chunk = [0u8; 65536];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Vec<u8> = buffer.drain(..head_end + length).skip(head_end).collect();
        sink.saw(Seen {
            connection,
            target,
            headers,
        });
        sink.take(ExportTraceServiceRequest::decode(body.as_slice()).unwrap());
        let zeros = vec![0u8; 65536];
        let (head, piece): (&[u8], Vec<u8>) = match answer {
            Answer::Normal => {
                let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n\
                             content-length: 0\r\n\r\n";
                if stream.write_all(head).await.is_err() {
                    return None;
                }
                continue;
            }
            Answer::Close => {
                let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n\
                             content-length: 0\r\nconnection: close\r\n\r\n";
                let _ = stream.write_all(head).await;
                let _ = stream.shutdown().await;
                return None;
            }
            Answer::Huge => (
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n\
                  content-length: 8589934592\r\n\r\n",
                zeros,
            ),
            Answer::Endless => {
                let mut piece = b"10000\r\n".to_vec();
                piece.extend_from_slice(&zeros);
                piece.extend_from_slice(b"\r\n");
                (
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n\
                      transfer-encoding: chunked\r\n\r\n",
                    piece,
                )
            }
        };
        if stream.write_all(head).await.is_err() {
            return Some(0);
        }
        let mut total = 0u64;
        while total < HOSTILE_CAP {
            if stream.write_all(&piece).await.is_err() {
                break;
            }
            total += piece.len() as u64;
        }
        return Some(total);
    }
}

/// A CA and a certificate it issued for 127.0.0.1: the acceptor for a TLS collector, and the
/// CA's PEM file (in a fresh folder under the system's temporary one) for the exporter.
/// The acceptor offers `alpn` (`h2` for a gRPC collector).
pub fn collector_tls(
    name: &str,
    alpn: &[&[u8]],
) -> (tokio_rustls::TlsAcceptor, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let dir = std::env::temp_dir().join(format!("tensorport-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    (tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca_file)
}
