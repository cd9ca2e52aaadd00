//! OTLP/HTTP export: each batch is a protobuf `POST` to the collector's path, in origin form
//! with a `Host` header, over one kept-alive HTTP/1.1 connection that is dialled again when
//! the collector closes it.
//!
//! The collector's answer is a peer's input: its head is bounded by the connection's buffer,
//! and at most [`MAX_ANSWER_BYTES`] of its body are read, then dropped. A longer body, announced
//! or streamed, ends the connection instead of being read on; the status alone says whether
//! the spans were taken.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, USER_AGENT};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;

use super::collector::Collector;
use super::env::OtlpHeaders;
use super::export_error::SendError;

/// The most of an answer's body read. A collector answers an `ExportTraceServiceResponse`
/// (empty, or a count of rejected spans and a message) or a short error text.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The most header lines an answer may have.
const MAX_ANSWER_HEADERS: usize = 64;

const AGENT: &str = concat!("tensorport/", env!("CARGO_PKG_VERSION"));

/// One HTTP/1.1 connection; its driver task ends with it.
struct Connection {
    sender: http1::SendRequest<Full<Bytes>>,
    driver: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// The exporter's side of an OTLP/HTTP collector.
pub struct HttpExporter {
    collector: Collector,
    headers: OtlpHeaders,
    /// The idle kept-alive connection. Taken out for each export and put back only once the
    /// answer was read whole: an export cut short (a timeout, an error, an answer too long)
    /// leaves none, and the next export dials again.
    idle: Option<Connection>,
}

impl HttpExporter {
    pub fn new(collector: Collector, headers: OtlpHeaders) -> Self {
        Self {
            collector,
            headers,
            idle: None,
        }
    }

    /// Sends one encoded `ExportTraceServiceRequest`.
    pub async fn send(&mut self, body: Bytes) -> Result<(), SendError> {
        let (connection, answer) = self.exchange(body).await?;
        let (head, body) = answer.into_parts();
        if read_bounded(body).await && !connection.sender.is_closed() {
            self.idle = Some(connection);
        }
        if head.status.is_success() {
            Ok(())
        } else {
            Err(SendError::Status(head.status))
        }
    }

    /// Sends the request on the idle connection, or on a new one when there is none or the
    /// idle one turns out closed before the request was written (a collector may close an idle
    /// connection at any time; a request it never saw is safe to send again).
    async fn exchange(
        &mut self,
        body: Bytes,
    ) -> Result<(Connection, http::Response<Incoming>), SendError> {
        if let Some(mut idle) = self.idle.take() {
            if idle.sender.ready().await.is_ok() {
                match idle
                    .sender
                    .try_send_request(self.request(body.clone())?)
                    .await
                {
                    Ok(answer) => return Ok((idle, answer)),
                    Err(mut failed) => {
                        if failed.take_message().is_none() {
                            return Err(failed.into_error().into());
                        }
                    }
                }
            }
        }
        let mut fresh = self.dial().await?;
        let answer = fresh.sender.send_request(self.request(body)?).await?;
        Ok((fresh, answer))
    }

    async fn dial(&self) -> Result<Connection, SendError> {
        let stream = self.collector.connect().await?;
        let (sender, connection) = http1::Builder::new()
            // Bounds the answer's head and each read of its body.
            .max_buf_size(MAX_ANSWER_BYTES)
            .max_headers(MAX_ANSWER_HEADERS)
            .handshake(TokioIo::new(stream))
            .await?;
        let driver = tokio::spawn(async move {
            // Its errors reach the exporter through the request in flight.
            let _ = connection.await;
        });
        Ok(Connection { sender, driver })
    }

    fn request(&self, body: Bytes) -> Result<http::Request<Full<Bytes>>, SendError> {
        let mut request = http::Request::post(http::Uri::from(self.collector.path().clone()))
            .header(HOST, self.collector.authority())
            .header(CONTENT_TYPE, "application/x-protobuf")
            .header(USER_AGENT, AGENT)
            .body(Full::new(body))?;
        // The operator's come last, so that their User-Agent replaces ours; `env` refuses
        // those that would change the host, framing or content type.
        request.headers_mut().extend(self.headers.map().clone());
        Ok(request)
    }
}

/// Reads and drops an answer's body when it is at most [`MAX_ANSWER_BYTES`]: `true` then,
/// when the connection can carry the next export. `false` as soon as it is known to be longer
/// (from its `Content-Length`, or as it arrives) or breaks off.
async fn read_bounded(mut body: Incoming) -> bool {
    if body.size_hint().lower() > MAX_ANSWER_BYTES as u64 {
        return false;
    }
    let mut read = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return false;
        };
        if let Some(data) = frame.data_ref() {
            read += data.len();
            if read > MAX_ANSWER_BYTES {
                return false;
            }
        }
    }
    true
}
