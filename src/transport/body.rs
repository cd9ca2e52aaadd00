//! Reading a request body in full before the request goes on, so that the time a client takes
//! to send it is spent holding only its connection.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The memory all bodies being read before admission may take together. Reading them before
/// the concurrency limit means that limit no longer bounds them; this does. A body that
/// would go over waits, unread (flow control then slows its sender), until others are done
/// or its body-read timeout ends it.
#[derive(Clone)]
pub struct ReceiveBudget {
    /// One permit per KiB.
    kib: Arc<Semaphore>,
    total_kib: u32,
}

impl ReceiveBudget {
    /// `bytes` is raised, if need be, so that one body of `max_body_bytes` always fits.
    pub fn new(bytes: usize, max_body_bytes: usize) -> Self {
        let kib = bytes.max(max_body_bytes.saturating_add(1 << 20)) / 1024;
        let total_kib = u32::try_from(kib.min(Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        Self {
            kib: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
        }
    }

    /// Waits until `kib` KiB fit; the memory is given back when the permit is dropped.
    async fn take(&self, kib: u64) -> Option<OwnedSemaphorePermit> {
        let kib = u32::try_from(kib).unwrap_or(u32::MAX).min(self.total_kib);
        self.kib.clone().acquire_many_owned(kib).await.ok()
    }
}

/// The KiB a body holds once it has grown from `before` to `after` bytes, less those it held
/// already. A body is charged by its whole size so far, not frame by frame: rounding each
/// frame up to a KiB charged a body sent in one-byte chunks a thousand times its size, and
/// one of the largest allowed then never fitted.
fn kib_added(before: u64, after: u64) -> u64 {
    after.div_ceil(1024).saturating_sub(before.div_ceil(1024))
}

/// A request body as the application sees it: the frames already received, then (for a
/// streaming request, or one past the size limit) the rest as it arrives.
pub struct Received {
    frames: VecDeque<Frame<Bytes>>,
    /// Bytes of data in `frames`.
    buffered: u64,
    rest: Option<Incoming>,
    /// Its share of the [`ReceiveBudget`], held until the body is dropped.
    _held: Option<OwnedSemaphorePermit>,
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
            _held: None,
        }
    }

    /// Reads `body` to its end, or until more than `limit` bytes have come: the application
    /// then reads the rest and refuses the request with its own error for an oversized body,
    /// as it would have without this read. A body of several frames is joined `lead(first
    /// frame)` bytes into its buffer (see `placement.rs`).
    pub async fn read(
        mut body: Incoming,
        limit: usize,
        budget: &ReceiveBudget,
        lead: impl Fn(&[u8]) -> usize,
    ) -> Result<Self, ReadError> {
        let limit = u64::try_from(limit).unwrap_or(u64::MAX);
        let mut data = Gathered::default();
        let mut trailers = VecDeque::new();
        let mut buffered: u64 = 0;
        let mut held: Option<OwnedSemaphorePermit> = None;
        let mut rest = None;
        while buffered <= limit {
            let next = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
            let Some(frame) = next else {
                break;
            };
            match frame?.into_data() {
                Ok(chunk) => {
                    let before = buffered;
                    buffered =
                        buffered.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
                    let added = kib_added(before, buffered);
                    if added > 0 {
                        let share = budget.take(added).await;
                        match (&mut held, share) {
                            (Some(held), Some(share)) => held.merge(share),
                            (held, share) => *held = held.take().or(share),
                        }
                    }
                    data.push(chunk, &lead);
                }
                Err(other) => trailers.push_back(other),
            }
        }
        if buffered > limit {
            rest = Some(body);
        }
        let mut frames = trailers;
        if let Some(joined) = data.into_bytes() {
            frames.push_front(Frame::data(joined));
        }
        Ok(Self {
            frames,
            buffered,
            rest,
            _held: held,
        })
    }

    /// The whole body in one piece, once it has been read to its end.
    pub fn whole(&self) -> Option<&[u8]> {
        if self.rest.is_some() {
            return None;
        }
        let mut data = self.frames.iter().filter_map(Frame::data_ref);
        match (data.next(), data.next()) {
            (None, _) => Some(&[]),
            (Some(only), None) => Some(only),
            (Some(_), Some(_)) => None,
        }
    }
}

/// The data of a body as it is read, in one piece so that it can be scanned before it is
/// decoded (the decoders would join the frames anyway: axum's body collection and tonic's
/// message buffer both copy frames into one buffer, and both take a single frame as it is).
/// A body that came in one frame keeps it; from the second frame on, each is copied into one
/// buffer as it arrives and released at once, so the body is never held twice and hyper
/// reuses its read buffer instead of allocating a fresh one per frame. The joined body starts
/// `lead` bytes into its buffer, so that the tensor bytes inside it can land aligned.
#[derive(Default)]
enum Gathered {
    #[default]
    Nothing,
    One(Bytes),
    Joined {
        buffer: Vec<u8>,
        lead: usize,
    },
}

impl Gathered {
    fn push(&mut self, chunk: Bytes, lead: impl Fn(&[u8]) -> usize) {
        *self = match std::mem::take(self) {
            Gathered::Nothing => Gathered::One(chunk),
            Gathered::One(first) => {
                let lead = lead(&first);
                // Sized by what has arrived, never by what the client announced.
                let mut buffer = Vec::with_capacity(
                    lead.saturating_add(first.len()).saturating_add(chunk.len()),
                );
                buffer.resize(lead, 0);
                buffer.extend_from_slice(&first);
                buffer.extend_from_slice(&chunk);
                Gathered::Joined { buffer, lead }
            }
            Gathered::Joined { mut buffer, lead } => {
                buffer.extend_from_slice(&chunk);
                Gathered::Joined { buffer, lead }
            }
        };
    }

    fn into_bytes(self) -> Option<Bytes> {
        match self {
            Gathered::Nothing => None,
            Gathered::One(only) => Some(only),
            Gathered::Joined { buffer, lead } => Some(Bytes::from(buffer).slice(lead..)),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn gathered_with(chunks: &[&'static [u8]], lead: impl Fn(&[u8]) -> usize) -> Option<Bytes> {
        let mut data = Gathered::default();
        for chunk in chunks {
            data.push(Bytes::from_static(chunk), &lead);
        }
        data.into_bytes()
    }

    fn gathered(chunks: &[&'static [u8]]) -> Option<Bytes> {
        gathered_with(chunks, |_| 0)
    }

    #[test]
    fn a_joined_body_starts_where_its_lead_says_and_loses_nothing() {
        for lead in 0..16 {
            let joined = gathered_with(&[b"abc", b"defg", b"h"], |first| {
                assert_eq!(first, b"abc", "the lead is chosen from the first frame");
                lead
            })
            .unwrap();
            assert_eq!(&joined[..], b"abcdefgh");
            // The buffer's start is 16-aligned; the body starts `lead` bytes into it.
            assert_eq!(joined.as_ptr() as usize % 16, lead % 16);
        }
        // One frame is never copied, so it keeps its place.
        let only: &'static [u8] = b"abc";
        let kept = gathered_with(&[only], |_| 5).unwrap();
        assert_eq!(kept.as_ptr(), only.as_ptr());
    }

    #[test]
    fn frames_are_joined_in_order_and_a_single_frame_is_kept_as_it_came() {
        assert_eq!(gathered(&[]), None);
        let only: &'static [u8] = b"{\"inputs\": []}";
        let kept = gathered(&[only]).unwrap();
        assert_eq!(kept.as_ptr(), only.as_ptr(), "one frame is not copied");
        assert_eq!(
            gathered(&[b"{\"in", b"", b"puts\": ", b"[]}"]).as_deref(),
            Some(&b"{\"inputs\": []}"[..])
        );
    }

    #[tokio::test]
    async fn a_body_that_would_go_over_the_budget_waits_until_another_is_done() {
        // Room for one 1 MiB body and 1 MiB more.
        let budget = ReceiveBudget::new(0, 1 << 20);
        let first = budget.take(1024).await;
        let second = budget.take(1024).await;
        assert!(first.is_some() && second.is_some());
        let waiting = budget.take(1);
        tokio::pin!(waiting);
        assert!(futures::poll!(&mut waiting).is_pending());
        drop(first);
        assert!(waiting.await.is_some());
    }

    #[test]
    fn a_body_is_charged_by_its_size_not_by_its_frames() {
        // One byte at a time, 4 KiB costs 4 KiB.
        let charged: u64 = (0..4096).map(|len| kib_added(len, len + 1)).sum();
        assert_eq!(charged, 4);
        assert_eq!(kib_added(0, 1), 1);
        assert_eq!(kib_added(1, 1024), 0);
        assert_eq!(kib_added(1024, 1025), 1);
        assert_eq!(kib_added(0, 0), 0);
        assert_eq!(kib_added(u64::MAX - 1, u64::MAX), 0);
    }

    #[tokio::test]
    async fn one_largest_body_always_fits_and_no_frame_waits_forever() {
        let budget = ReceiveBudget::new(1024, 64 << 20);
        assert!(budget.total_kib as usize >= (64 << 20) / 1024);
        // A frame larger than the whole budget takes all of it rather than never fitting.
        assert!(budget.take(u64::MAX).await.is_some());
    }
}
