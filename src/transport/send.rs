//! An answer on its way out: its bytes charged to the request memory budget until they are
//! written, and, over HTTP/2, timed by its stream's clock (see [`super::stream`]).
//!
//! What hyper holds once it has taken a data frame differs with the protocol, and so does
//! the moment the frame's charge can be given back:
//!
//! - HTTP/2. hyper takes a frame, waits until the stream has room in the client's window,
//!   hands the frame to h2 (which keeps whatever does not fit the window) and asks for the
//!   next. So when it asks again, every byte handed before is within the client's window but
//!   the last frame's, of which all but one byte may still be waiting. Each data frame is
//!   therefore handed out in pieces of at most [`PIECE`] bytes ending with a piece of one
//!   byte: once hyper asks for more after that byte, the whole frame is on its way, and its
//!   charge is given back. A client that opens no window never gets asked past its first
//!   piece, so its answers stay charged, and its stream's clock runs, until the stream is
//!   reset. The pieces also make the clock's progress fine-grained: a client has to take
//!   [`PIECE`] bytes within the send timeout, not a whole answer.
//! - HTTP/1. hyper copies nothing and sends in order: a frame it has taken waits in its write
//!   buffer, which it flushes to the socket before the socket itself is flushed. The charge
//!   is kept until the body is done and then handed to the connection, which gives it back
//!   at the next flush (see [`super::watched`]). The socket refusing the bytes for the send
//!   timeout closes the connection ([`super::activity`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::activity::{Activity, Busy};
use super::stream::StreamClock;
use crate::overload::{MemoryBudget, MemoryCharge};

/// The largest piece of an answer handed to hyper at once over HTTP/2: four frames of h2's
/// default maximum size.
pub const PIECE: usize = 64 << 10;

/// How an answer's bytes travel, and so when they count as sent.
pub enum Delivery {
    Http1(Activity),
    /// `None` outside a stream task (only in tests).
    Http2(Option<Arc<StreamClock>>),
}

/// The answer's charge and its request's place among those in flight, settled when the
/// body is dropped, whichever way it ends.
struct Ledger {
    budget: MemoryBudget,
    delivery: Delivery,
    /// The data frame being handed out.
    charge: MemoryCharge,
    /// Over HTTP/1, frames handed out in full, not yet flushed.
    handed: MemoryCharge,
    _busy: Busy,
}

impl Drop for Ledger {
    fn drop(&mut self) {
        if let Delivery::Http1(activity) = &self.delivery {
            let mut held = std::mem::take(&mut self.handed);
            held.absorb(std::mem::take(&mut self.charge));
            activity.hold_until_flushed(held);
        }
        if let Delivery::Http2(Some(clock)) = &self.delivery {
            clock.resumed();
        }
    }
}

pin_project! {
    /// A response body that keeps its request counted as in flight, and its bytes charged,
    /// until it is sent.
    pub struct Sending<B> {
        #[pin]
        inner: B,
        // What is left of the inner body's current data frame.
        rest: Bytes,
        ledger: Ledger,
    }
}

impl<B> Sending<B> {
    pub fn new(inner: B, busy: Busy, budget: MemoryBudget, delivery: Delivery) -> Self {
        Self {
            inner,
            rest: Bytes::new(),
            ledger: Ledger {
                budget,
                delivery,
                charge: MemoryCharge::none(),
                handed: MemoryCharge::none(),
                _busy: busy,
            },
        }
    }
}

/// The next piece of `rest` to hand to h2: at most [`PIECE`] bytes, and never all but the
/// last byte, so that a frame always ends with a piece of one.
fn next_piece(rest: &mut Bytes) -> Bytes {
    let len = rest.len();
    let take = if len > PIECE {
        PIECE
    } else {
        len.saturating_sub(1).max(1).min(len)
    };
    rest.split_to(take)
}

impl<B: Body<Data = Bytes>> Body for Sending<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let ledger = this.ledger;
        if let Delivery::Http2(Some(clock)) = &ledger.delivery {
            clock.resumed();
        }
        if this.rest.is_empty() {
            // The last frame is all handed out, and (over HTTP/2) all of it within the
            // client's window: see the module documentation.
            let done = std::mem::take(&mut ledger.charge);
            match &ledger.delivery {
                Delivery::Http1(_) => ledger.handed.absorb(done),
                Delivery::Http2(_) => drop(done),
            }
            let frame = match ready!(this.inner.poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                other => return Poll::Ready(other),
            };
            match frame.into_data() {
                Ok(data) if data.is_empty() => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Ok(data) => {
                    let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
                    ledger.charge = ledger.budget.charge_answer(len);
                    *this.rest = data;
                }
                // Trailers go out as they are; no window holds them back.
                Err(frame) => return Poll::Ready(Some(Ok(frame))),
            }
        }
        let piece = match &ledger.delivery {
            Delivery::Http1(_) => std::mem::take(this.rest),
            Delivery::Http2(clock) => {
                if let Some(clock) = clock {
                    clock.waiting();
                }
                next_piece(this.rest)
            }
        };
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = u64::try_from(self.rest.len()).unwrap_or(u64::MAX);
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::drain::Traffic;

    fn pieces(len: usize) -> Vec<usize> {
        let mut rest = Bytes::from(vec![0u8; len]);
        let mut out = Vec::new();
        while !rest.is_empty() {
            out.push(next_piece(&mut rest).len());
        }
        out
    }

    #[test]
    fn a_frame_goes_out_in_pieces_that_end_with_one_byte() {
        assert_eq!(pieces(1), [1]);
        assert_eq!(pieces(2), [1, 1]);
        assert_eq!(pieces(100), [99, 1]);
        assert_eq!(pieces(PIECE), [PIECE - 1, 1]);
        assert_eq!(pieces(PIECE + 1), [PIECE, 1]);
        assert_eq!(pieces(2 * PIECE + 10), [PIECE, PIECE, 9, 1]);
    }

    async fn frame(body: &mut Pin<Box<Sending<http_body_util::Full<Bytes>>>>) -> Option<usize> {
        std::future::poll_fn(|cx| body.as_mut().poll_frame(cx))
            .await
            .map(|frame| {
                frame
                    .ok()
                    .and_then(|f| f.into_data().ok())
                    .map_or(0, |d| d.len())
            })
    }

    #[tokio::test]
    async fn over_http2_an_answer_stays_charged_until_its_last_byte_was_asked_past() {
        let budget = MemoryBudget::new(1 << 30);
        let activity = Activity::new(Arc::new(Traffic::default()));
        let answer = http_body_util::Full::new(Bytes::from(vec![7u8; 100]));
        let mut body = Box::pin(Sending::new(
            answer,
            activity.begin(),
            budget.clone(),
            Delivery::Http2(None),
        ));
        assert_eq!(body.size_hint().exact(), Some(100));
        assert_eq!(frame(&mut body).await, Some(99));
        assert_eq!(budget.used(), 100);
        assert!(!body.is_end_stream());
        assert_eq!(frame(&mut body).await, Some(1));
        assert!(body.is_end_stream());
        assert_eq!(budget.used(), 100, "hyper has not asked past the last byte");
        assert_eq!(frame(&mut body).await, None);
        assert_eq!(budget.used(), 0);
        assert!(!activity.is_idle());
        drop(body);
        assert!(activity.is_idle());
    }

    #[tokio::test]
    async fn over_http1_an_answer_stays_charged_until_the_connection_flushes() {
        let budget = MemoryBudget::new(1 << 30);
        let activity = Activity::new(Arc::new(Traffic::default()));
        let answer = http_body_util::Full::new(Bytes::from(vec![7u8; 100]));
        let mut body = Box::pin(Sending::new(
            answer,
            activity.begin(),
            budget.clone(),
            Delivery::Http1(activity.clone()),
        ));
        assert_eq!(frame(&mut body).await, Some(100));
        assert!(body.is_end_stream());
        drop(body);
        assert_eq!(budget.used(), 100);
        activity.flushed();
        assert_eq!(budget.used(), 0);
    }
}
