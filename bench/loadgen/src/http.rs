//! HTTP/1.1 requests with prebuilt bodies over a pool of keep-alive connections (one per
//! request in flight). Replies are read to the end, so the connection can be reused, and
//! dropped frame by frame rather than collected.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The KServe binary extension's header: how many leading body bytes are JSON.
pub const HEADER_LENGTH: &str = "inference-header-content-length";

pub fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .build(connector)
}

pub fn uri(target: &str, path: &str) -> Result<Uri, String> {
    format!("http://{target}{path}")
        .parse()
        .map_err(|err| format!("bad URL for {target}{path}: {err}"))
}

/// POSTs `body` as JSON and returns the status and the whole reply (for setup calls).
pub async fn post_json(
    client: &HttpClient,
    uri: Uri,
    body: Bytes,
) -> Result<(StatusCode, Bytes), String> {
    let request = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .map_err(|err| err.to_string())?;
    let reply = client
        .request(request)
        .await
        .map_err(|err| err.to_string())?;
    let status = reply.status();
    let bytes = reply
        .into_body()
        .collect()
        .await
        .map_err(|err| err.to_string())?
        .to_bytes();
    Ok((status, bytes))
}

/// Sends one of a fixed set of bodies to one URL.
#[derive(Clone)]
pub struct HttpSender {
    client: HttpClient,
    method: Method,
    uri: Uri,
    content_type: HeaderValue,
    /// The binary extension's JSON header length, when the body uses it.
    header_length: Option<HeaderValue>,
    bodies: Arc<[Bytes]>,
}

impl HttpSender {
    pub fn new(
        client: HttpClient,
        uri: Uri,
        bodies: Vec<Bytes>,
        header_length: Option<usize>,
    ) -> Self {
        let content_type = if header_length.is_some() {
            "application/octet-stream"
        } else {
            "application/json"
        };
        Self {
            client,
            method: Method::POST,
            uri,
            content_type: HeaderValue::from_static(content_type),
            header_length: header_length.map(HeaderValue::from),
            bodies: bodies.into(),
        }
    }

    /// GETs `uri` with no body.
    pub fn get(client: HttpClient, uri: Uri) -> Self {
        Self {
            method: Method::GET,
            ..Self::new(client, uri, vec![Bytes::new()], None)
        }
    }

    /// One request with the body of `slot`; an error is named by its HTTP status.
    pub async fn send(&self, slot: usize) -> Result<(), String> {
        let body = self.bodies[slot % self.bodies.len()].clone();
        let mut request = Request::builder()
            .method(self.method.clone())
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, self.content_type.clone());
        if let Some(length) = &self.header_length {
            request = request.header(HEADER_LENGTH, length.clone());
        }
        let request = request
            .body(Full::new(body))
            .map_err(|_| "client:request".to_owned())?;
        let reply = self
            .client
            .request(request)
            .await
            .map_err(|_| "transport".to_owned())?;
        let status = reply.status();
        let mut body = reply.into_body();
        while let Some(frame) = body.frame().await {
            frame.map_err(|_| "transport".to_owned())?;
        }
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("http:{}", status.as_u16()))
        }
    }
}
