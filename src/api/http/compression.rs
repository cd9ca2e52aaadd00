//! gzip on the HTTP port. A request body sent with `Content-Encoding: gzip` is inflated before
//! any handler sees it, and the inflated size counts against `--max-request-bytes`, so a small
//! compressed body cannot expand past the limit (a gzip bomb is refused with 413 as soon as
//! the output passes it). A response is deflated when the client sends `Accept-Encoding: gzip`
//! and the body is large enough for compression to pay. Large bodies are inflated and
//! deflated on the blocking pool, so that one of them does not stall the requests that share
//! its runtime worker.

use std::convert::Infallible;
use std::io::Read;
use std::task::{Context, Poll};

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use futures::future::{BoxFuture, Either};
use tower::{Layer, Service};

use super::response::RestError;

/// Below this many bytes a gzip header and trailer cost more than they save.
const MIN_COMPRESSED_RESPONSE: usize = 1024;

/// Bodies past this size are inflated or deflated on the blocking pool: at tens of MB/s a
/// large body would otherwise hold a runtime worker, and every request queued behind it, for
/// milliseconds. Below it the hand-off costs more than the work.
const OFF_RUNTIME_BYTES: usize = 64 << 10;

/// Runs `work` on the blocking pool when `bytes` is large, in place otherwise; `None` when
/// the pool dropped it (the runtime is shutting down, or the work panicked).
async fn off_runtime_if_large<T: Send + 'static>(
    bytes: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if bytes < OFF_RUNTIME_BYTES {
        return Some(work());
    }
    tokio::task::spawn_blocking(work).await.ok()
}

/// The layer, applied around the whole HTTP router: `limit` is `--max-request-bytes`.
#[derive(Clone, Copy, Debug)]
pub struct GzipLayer {
    limit: usize,
}

impl GzipLayer {
    pub fn new(limit: usize) -> Self {
        Self { limit }
    }
}

impl<S> Layer<S> for GzipLayer {
    type Service = Gzip<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Gzip {
            inner,
            limit: self.limit,
        }
    }
}

/// The service [`GzipLayer`] makes.
#[derive(Clone, Debug)]
pub struct Gzip<S> {
    inner: S,
    limit: usize,
}

impl<S> Service<Request> for Gzip<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, BoxFuture<'static, Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let accepts_gzip = accepts_gzip(request.headers());
        // Most requests neither send nor accept gzip: they go straight through, with no
        // future of their own to allocate.
        if !accepts_gzip && !request.headers().contains_key(header::CONTENT_ENCODING) {
            return Either::Left(self.inner.call(request));
        }
        // The service that was made ready takes this request; a clone takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limit = self.limit;
        Either::Right(Box::pin(async move {
            let request = match inflate_request(request, limit).await {
                Ok(request) => request,
                Err(refusal) => return Ok(refusal.into_response()),
            };
            let response = inner.call(request).await?;
            Ok(if accepts_gzip {
                deflate_response(response).await
            } else {
                response
            })
        }))
    }
}

async fn inflate_request(request: Request, limit: usize) -> Result<Request, RestError> {
    let encoding = match request.headers().get(header::CONTENT_ENCODING) {
        None => return Ok(request),
        Some(value) => value
            .to_str()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase(),
    };
    match encoding.as_str() {
        "" | "identity" => return Ok(request),
        "gzip" | "x-gzip" => {}
        other => {
            return Err(RestError::with_status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Encoding '{other}' is not supported; send gzip or identity"),
            ))
        }
    }
    let (mut parts, body) = request.into_parts();
    let compressed = to_bytes(body, limit).await.map_err(|_| too_large(limit))?;
    let inflated = off_runtime_if_large(compressed.len(), move || inflate(&compressed, limit))
        .await
        .unwrap_or_else(|| {
            Err(RestError::with_status(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down; the request body was not inflated",
            ))
        })?;
    parts.headers.remove(header::CONTENT_ENCODING);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(inflated.len()));
    Ok(Request::from_parts(parts, Body::from(inflated)))
}

/// Inflates `compressed`, stopping as soon as the output passes `limit`.
fn inflate(compressed: &[u8], limit: usize) -> Result<Bytes, RestError> {
    let mut inflated = Vec::with_capacity(compressed.len().saturating_mul(4).min(limit));
    let reader = GzDecoder::new(compressed);
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_end(&mut inflated).map_err(|err| {
        RestError::with_status(
            StatusCode::BAD_REQUEST,
            format!("the gzip request body is corrupt: {err}"),
        )
    })?;
    if inflated.len() > limit {
        return Err(too_large(limit));
    }
    Ok(Bytes::from(inflated))
}

fn too_large(limit: usize) -> RestError {
    RestError::with_status(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body, once inflated, is larger than the limit of {limit} bytes"),
    )
}

/// Whether `Accept-Encoding` lists gzip (or `*`) without `q=0`.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|item| {
            let mut fields = item.split(';').map(str::trim);
            let coding = fields.next().unwrap_or_default();
            let refused = fields.any(|f| {
                f.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

async fn deflate_response(response: Response) -> Response {
    if response.headers().contains_key(header::CONTENT_ENCODING) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // Responses here are buffered already (JSON, metrics text, binary tensor data).
    let Ok(plain) = to_bytes(body, usize::MAX).await else {
        return RestError::with_status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the response body could not be read for compression",
        )
        .into_response();
    };
    parts
        .headers
        .append(header::VARY, HeaderValue::from_static("accept-encoding"));
    if plain.len() < MIN_COMPRESSED_RESPONSE {
        return Response::from_parts(parts, Body::from(plain));
    }
    let input = plain.clone();
    let compressed = off_runtime_if_large(plain.len(), move || deflate(&input)).await;
    match compressed {
        Some(Ok(compressed)) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            parts
                .headers
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            Response::from_parts(parts, Body::from(compressed))
        }
        Some(Err(_)) | None => Response::from_parts(parts, Body::from(plain)),
    }
}

fn deflate(plain: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(plain.len() / 3), Compression::fast());
    std::io::Write::write_all(&mut encoder, plain)?;
    encoder.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip_bytes(plain: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        let _ = std::io::Write::write_all(&mut encoder, plain);
        encoder.finish().unwrap_or_default()
    }

    #[test]
    fn inflates_within_the_limit() {
        let body = gzip_bytes(b"{\"instances\": [1]}");
        assert_eq!(
            inflate(&body, 100).ok(),
            Some(Bytes::from_static(b"{\"instances\": [1]}"))
        );
    }

    #[test]
    fn a_bomb_stops_at_the_limit() {
        let bomb = gzip_bytes(&vec![0u8; 10 << 20]);
        assert!(bomb.len() < 20_000);
        let refusal = inflate(&bomb, 1 << 20)
            .err()
            .map(|e| e.into_response().status());
        assert_eq!(refusal, Some(StatusCode::PAYLOAD_TOO_LARGE));
    }

    #[test]
    fn corrupt_gzip_is_a_bad_request() {
        let refusal = inflate(b"\x1f\x8b\x08garbage", 100)
            .err()
            .map(|e| e.into_response().status());
        assert_eq!(refusal, Some(StatusCode::BAD_REQUEST));
    }

    #[tokio::test]
    async fn large_bodies_are_worked_on_off_the_runtime_threads() {
        let here = std::thread::current().id();
        let on = |bytes| off_runtime_if_large(bytes, || std::thread::current().id());
        assert_eq!(on(OFF_RUNTIME_BYTES - 1).await, Some(here));
        assert_ne!(on(OFF_RUNTIME_BYTES).await, Some(here));
        assert!(on(OFF_RUNTIME_BYTES).await.is_some());
    }

    #[tokio::test]
    async fn a_large_response_is_gzipped_whole() {
        let plain: Vec<u8> = (0..(1u32 << 20))
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let response = deflate_response(Response::new(Body::from(plain.clone()))).await;
        assert_eq!(response.headers()[header::CONTENT_ENCODING], "gzip");
        let compressed = to_bytes(response.into_body(), usize::MAX).await;
        let inflated = compressed.ok().and_then(|c| inflate(&c, usize::MAX).ok());
        assert_eq!(inflated.as_deref(), Some(plain.as_slice()));
    }

    #[test]
    fn accept_encoding_is_read_with_its_weights() {
        let accepts = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(value));
            accepts_gzip(&headers)
        };
        assert!(accepts("gzip"));
        assert!(accepts("br, GZIP;q=0.5"));
        assert!(accepts("*"));
        assert!(!accepts("gzip;q=0"));
        assert!(!accepts("br, deflate"));
    }
}
