//! Reading a request body in full before the request goes on, so that the time a client takes
//! to send it is spent holding only its connection.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

/// A request body as the application sees it: the frames already received, then (for a
/// streaming request, or one past the size limit) the rest as it arrives.
pub struct Received {
    frames: VecDeque<Frame<Bytes>>,
    /// Bytes of data in `frames`.
    buffered: u64,
    rest: Option<Incoming>,
}

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
#[error("the request body could not be read: {0}")]
pub struct ReadError(#[from] hyper::Error);

impl Received {
    /// Passes `body` on as it arrives.
    pub fn streaming(body: Incoming) -> Self {
        Self {
            frames: VecDeque::new(),
            buffered: 0,
            rest: Some(body),
        }
    }

    /// Reads `body` to its end, or until more than `limit` bytes have come: the application
    /// then reads the rest and refuses the request with its own error for an oversized body,
    /// as it would have without this read.
    pub async fn read(mut body: Incoming, limit: usize) -> Result<Self, ReadError> {
        let limit = u64::try_from(limit).unwrap_or(u64::MAX);
        let mut frames = VecDeque::new();
        let mut buffered: u64 = 0;
        while buffered <= limit {
            let next = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
            let Some(frame) = next else {
                return Ok(Self {
                    frames,
                    buffered,
                    rest: None,
                });
            };
            let frame = frame?;
            if let Some(data) = frame.data_ref() {
                buffered = buffered.saturating_add(u64::try_from(data.len()).unwrap_or(u64::MAX));
            }
            frames.push_back(frame);
        }
        Ok(Self {
            frames,
            buffered,
            rest: Some(body),
        })
    }
}

impl Body for Received {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(frame) = self.frames.pop_front() {
            if let Some(data) = frame.data_ref() {
                let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
                self.buffered = self.buffered.saturating_sub(len);
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty() && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.rest {
            // Exact once read in full, so that the layers that look at the size see it.
            None => SizeHint::with_exact(self.buffered),
            Some(rest) => {
                let more = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(self.buffered.saturating_add(more.lower()));
                if let Some(upper) = more.upper() {
                    hint.set_upper(self.buffered.saturating_add(upper));
                }
                hint
            }
        }
    }
}
