//! What crosses a batcher's channel, shared by the request side (handle.rs) and the actor
//! (task.rs) so that neither imports the other's internals.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Span;

use super::{BatcherError, ValidRequest};
use crate::backend::NamedTensor;

/// The answer to one request: its outputs in the order it asked for them.
pub(super) type Reply = Result<Vec<NamedTensor>, BatcherError>;

/// The request and everything needed to answer and trace it.
pub(super) struct Message {
    pub(super) request: ValidRequest,
    pub(super) reply: oneshot::Sender<Reply>,
    /// The caller's span, so that queueing and batching show up under its request.
    pub(super) span: Span,
    pub(super) enqueued: Instant,
}

/// Counts `count` requests out of a queue depth the handle counted in.
pub(super) fn release(depth: &AtomicUsize, count: usize) {
    // Saturating, so that a miscount can never wrap around and refuse every request.
    let _ = depth.fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
        Some(waiting.saturating_sub(count))
    });
}
