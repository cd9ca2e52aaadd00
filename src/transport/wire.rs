//! What the connection layer needs to know about the protocol a port speaks.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{header, HeaderValue, Response, StatusCode};
use tonic::transport::server::TcpConnectInfo;

use super::body::Received;

/// One port's protocol: how a received body is handed to the application, and how the
/// connection layer answers a request itself.
pub trait Wire: Send + Sync + 'static {
    /// The request body type the application takes.
    type RequestBody: Send + 'static;
    /// The response body type the application gives.
    type ResponseBody: http_body::Body<Data = bytes::Bytes, Error: Into<axum::BoxError>>
        + Send
        + 'static;
    /// Whether the port speaks HTTP/2 only (gRPC) rather than HTTP/1 and HTTP/2.
    const HTTP2_ONLY: bool;
    /// ALPN protocols offered in the TLS handshake, preferred first.
    const ALPN: &'static [&'static [u8]];

    fn request_body(body: Received) -> Self::RequestBody;

    /// Names the connection's ends in `extensions` the way this port's framework reads them
    /// (each insertion is an allocation per request, so only the one it reads).
    fn name_peer(extensions: &mut http::Extensions, local: Option<SocketAddr>, peer: SocketAddr);

    /// The memory `body`, sent with `parts`, will take once decoded (see [`footprint`]).
    ///
    /// [`footprint`]: super::footprint
    fn footprint(parts: &http::request::Parts, body: &[u8]) -> u64;

    /// The bytes to leave before a body sent with `parts` whose first frame is `first`, when
    /// its frames are joined (see `placement.rs`).
    fn body_lead(parts: &http::request::Parts, first: &[u8]) -> usize;

    /// Whether requests to `path` stream their body, which is then passed on as it arrives
    /// instead of being read in full first.
    fn streams(path: &str) -> bool;

    /// The answer when a body took longer than `timeout` to arrive.
    fn body_too_slow(timeout: Duration) -> Response<Self::ResponseBody>;

    /// The answer when a body announces `announced` bytes, more than `limit`.
    fn body_too_large(announced: u64, limit: usize) -> Response<Self::ResponseBody>;

    /// The answer when a body could not be read (the client broke the stream).
    fn body_unreadable() -> Response<Self::ResponseBody>;
}

/// The HTTP port (TF Serving REST, KServe HTTP, metrics and probes).
pub struct Http;

/// The gRPC port.
pub struct Grpc;

fn http_error(status: StatusCode, message: &str) -> Response<axum::body::Body> {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut response = Response::new(axum::body::Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // The rest of the body may still be on its way; the connection cannot be reused.
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn too_large_message(announced: u64, limit: usize) -> String {
    format!("the request body of {announced} bytes is over the limit of {limit} bytes")
}

fn slow_message(timeout: Duration) -> String {
    format!(
        "the request body did not arrive within {} ms",
        timeout.as_millis()
    )
}

impl Wire for Http {
    type RequestBody = Received;
    type ResponseBody = axum::body::Body;
    const HTTP2_ONLY: bool = false;
    const ALPN: &'static [&'static [u8]] = &[b"h2", b"http/1.1"];

    fn request_body(body: Received) -> Received {
        body
    }

    fn name_peer(extensions: &mut http::Extensions, _local: Option<SocketAddr>, peer: SocketAddr) {
        extensions.insert(ConnectInfo(peer));
    }

    fn footprint(parts: &http::request::Parts, body: &[u8]) -> u64 {
        super::footprint::http(&parts.headers, body)
    }

    fn body_lead(parts: &http::request::Parts, _first: &[u8]) -> usize {
        super::placement::http_lead(&parts.headers)
    }

    fn streams(_path: &str) -> bool {
        false
    }

    fn body_too_slow(timeout: Duration) -> Response<axum::body::Body> {
        http_error(StatusCode::REQUEST_TIMEOUT, &slow_message(timeout))
    }

    fn body_too_large(announced: u64, limit: usize) -> Response<axum::body::Body> {
        http_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &too_large_message(announced, limit),
        )
    }

    fn body_unreadable() -> Response<axum::body::Body> {
        http_error(
            StatusCode::BAD_REQUEST,
            "the request body could not be read to its end",
        )
    }
}

/// The one gRPC method whose request is a stream of messages.
const STREAMING_METHODS: &[&str] = &["/inference.GRPCInferenceService/ModelStreamInfer"];

impl Wire for Grpc {
    type RequestBody = tonic::body::Body;
    type ResponseBody = tonic::body::Body;
    const HTTP2_ONLY: bool = true;
    // gRPC clients insist on HTTP/2 being agreed in the handshake.
    const ALPN: &'static [&'static [u8]] = &[b"h2"];

    fn request_body(body: Received) -> tonic::body::Body {
        tonic::body::Body::new(body)
    }

    fn name_peer(extensions: &mut http::Extensions, local: Option<SocketAddr>, peer: SocketAddr) {
        extensions.insert(TcpConnectInfo {
            local_addr: local,
            remote_addr: Some(peer),
        });
    }

    fn footprint(parts: &http::request::Parts, body: &[u8]) -> u64 {
        super::footprint::grpc(parts.uri.path(), body)
    }

    fn body_lead(parts: &http::request::Parts, first: &[u8]) -> usize {
        super::placement::grpc_lead(parts.uri.path(), first)
    }

    fn streams(path: &str) -> bool {
        STREAMING_METHODS.contains(&path)
    }

    fn body_too_slow(timeout: Duration) -> Response<tonic::body::Body> {
        tonic::Status::deadline_exceeded(slow_message(timeout)).into_http()
    }

    fn body_too_large(announced: u64, limit: usize) -> Response<tonic::body::Body> {
        // The code tonic gives a message over its decoding limit.
        tonic::Status::out_of_range(too_large_message(announced, limit)).into_http()
    }

    fn body_unreadable() -> Response<tonic::body::Body> {
        tonic::Status::cancelled("the request message could not be read to its end").into_http()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_bodies_are_408_over_http_and_deadline_exceeded_over_grpc() {
        let http = Http::body_too_slow(Duration::from_millis(1500));
        assert_eq!(http.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(http.headers()[header::CONNECTION], "close");
        let grpc = Grpc::body_too_slow(Duration::from_secs(1));
        assert_eq!(grpc.headers()["grpc-status"], "4");
    }

    #[test]
    fn only_the_streaming_method_is_passed_on_unread() {
        assert!(Grpc::streams(
            "/inference.GRPCInferenceService/ModelStreamInfer"
        ));
        assert!(!Grpc::streams("/inference.GRPCInferenceService/ModelInfer"));
        assert!(!Http::streams("/v2/models/x/infer"));
    }
}
