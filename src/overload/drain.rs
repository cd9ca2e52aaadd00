//! Keeps HTTP/1 connections usable after a refusal. A layer that refuses a request drops its
//! body unread; hyper then closes the connection, and a client under overload pays a new
//! connection for every refusal (a reconnect storm that overflows the listen backlog and adds
//! seconds of SYN retries to the requests that are admitted). So the body of an HTTP request
//! is wrapped: dropped unread, it is read to its end in the background, if it is small enough.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use http_body::{Body, Frame, SizeHint};

/// Bodies up to this size are drained; larger ones are not worth reading, and their
/// connection closes (the refusal says `Connection: close`).
pub const DRAIN_LIMIT: u64 = 1 << 20;
/// How long a client may take to send the rest of a refused body.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How a server's request body type is guarded; gRPC (HTTP/2) needs nothing, since dropping
/// one stream's body does not affect the connection.
pub trait RequestBody: Sized {
    /// The body, wrapped so that dropping it unread drains it.
    fn guard(self) -> Self;
    /// Whether the body is small enough to be drained.
    fn drainable(&self) -> bool;
}

impl RequestBody for axum::body::Body {
    fn guard(self) -> Self {
        Self::new(DrainOnDrop {
            inner: Some(self),
            ended: false,
        })
    }

    fn drainable(&self) -> bool {
        self.size_hint().upper().is_some_and(|n| n <= DRAIN_LIMIT)
    }
}

impl RequestBody for tonic::body::Body {
    fn guard(self) -> Self {
        self
    }

    fn drainable(&self) -> bool {
        true
    }
}

struct DrainOnDrop {
    inner: Option<axum::body::Body>,
    ended: bool,
}

impl Body for DrainOnDrop {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let Some(mut body) = self.inner.take() else {
            return;
        };
        if self.ended || body.is_end_stream() || !body.drainable() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let drain = async {
                while let Some(frame) =
                    std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
                {
                    if frame.is_err() {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain).await;
        });
    }
}
