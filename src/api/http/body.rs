//! A request body as one `Bytes`, for the handlers that read one.
//!
//! The transport has read a body of the allowed size whole before the application sees it
//! (one frame), and the gzip layer hands on an inflated body as one frame too, so the usual
//! case is a single frame taken as it is. axum's `Bytes` extractor would gather even that one
//! frame into a list first, and its size limit needs a request extension per request; here
//! the limit is the body's own ([`Capped`], put around each request's body where the HTTP
//! application receives it, see `crate::server::rest_app`).

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::BoxError;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use pin_project_lite::pin_project;

use super::response::RestError;

pin_project! {
    /// A body that fails with [`TooLarge`] once more than `limit` bytes of data have come.
    /// Its size hint is its inner body's: the layers that read the hint (draining a refused
    /// request's body) see the body as it is, not as the cap would cut it.
    pub struct Capped<B> {
        #[pin]
        inner: B,
        remaining: u64,
    }
}

impl<B> Capped<B> {
    pub fn new(inner: B, limit: usize) -> Self {
        Self {
            inner,
            remaining: u64::try_from(limit).unwrap_or(u64::MAX),
        }
    }
}

/// A body past `--max-request-bytes`.
#[derive(Debug, thiserror::Error)]
#[error("the request body is larger than the server accepts (--max-request-bytes)")]
pub struct TooLarge;

impl<B> HttpBody for Capped<B>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let frame = match ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(err)) => return Poll::Ready(Some(Err(err.into()))),
            None => return Poll::Ready(None),
        };
        if let Some(data) = frame.data_ref() {
            let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
            match this.remaining.checked_sub(len) {
                Some(left) => *this.remaining = left,
                None => return Poll::Ready(Some(Err(TooLarge.into()))),
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The whole request body.
pub struct Payload(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Payload {
    type Rejection = RestError;

    async fn from_request(request: Request, _: &S) -> Result<Self, RestError> {
        read_payload(request.into_body()).await.map(Self)
    }
}

/// Reads `body` to its end: a body of one frame is returned as it is, one of several joined.
pub async fn read_payload(mut body: Body) -> Result<Bytes, RestError> {
    let mut first = Bytes::new();
    let mut joined: Option<Vec<u8>> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(unreadable)?;
        let Ok(data) = frame.into_data() else {
            continue; // Trailers carry nothing a handler reads.
        };
        if data.is_empty() {
            continue;
        }
        match &mut joined {
            Some(joined) => joined.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => {
                let mut both = Vec::with_capacity(first.len() + data.len());
                both.extend_from_slice(&first);
                both.extend_from_slice(&data);
                joined = Some(both);
            }
        }
    }
    Ok(joined.map_or(first, Bytes::from))
}

/// The answer to a body that could not be read to its end: too large, or broken off.
fn unreadable(err: axum::Error) -> RestError {
    // The cap's error arrives wrapped once per body layer around it (the drain guard's, then
    // axum's own).
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(error) = cause {
        if let Some(too_large) = error.downcast_ref::<TooLarge>() {
            return RestError::with_status(StatusCode::PAYLOAD_TOO_LARGE, too_large.to_string());
        }
        cause = error.source();
    }
    RestError::with_status(
        StatusCode::BAD_REQUEST,
        format!("the request body could not be read: {err}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;

    fn chunked(chunks: &[&'static [u8]]) -> Body {
        let frames = chunks
            .iter()
            .map(|chunk| Ok::<_, std::io::Error>(Bytes::from_static(chunk)));
        Body::from_stream(stream::iter(frames.collect::<Vec<_>>()))
    }

    #[tokio::test]
    async fn one_frame_is_taken_as_it_is() {
        let body = Bytes::from_static(b"{\"inputs\":[]}");
        let read = read_payload(Body::from(body.clone())).await.ok();
        assert_eq!(read.as_ref().map(|b| b.as_ptr()), Some(body.as_ptr()));
    }

    #[tokio::test]
    async fn frames_are_joined_in_order() {
        let read = read_payload(chunked(&[b"ab", b"", b"cd", b"e"])).await.ok();
        assert_eq!(read, Some(Bytes::from_static(b"abcde")));
    }

    #[tokio::test]
    async fn a_body_at_its_limit_is_read() {
        let body = Body::new(Capped::new(chunked(&[b"abc", b"d"]), 4));
        let read = read_payload(body).await.ok();
        assert_eq!(read, Some(Bytes::from_static(b"abcd")));
    }

    #[tokio::test]
    async fn an_empty_body_reads_as_empty() {
        let read = read_payload(Body::empty()).await.ok();
        assert_eq!(read, Some(Bytes::new()));
    }

    #[tokio::test]
    async fn a_body_past_its_limit_is_413() {
        // Wrapped as the drain guard wraps it.
        let capped = Body::new(Capped::new(chunked(&[b"abc", b"def"]), 4));
        let body = Body::new(capped.map_err(axum::Error::new));
        let refused = read_payload(body).await.expect_err("refused");
        let response = axum::response::IntoResponse::into_response(refused);
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
}
