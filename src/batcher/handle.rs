//! The request side of a batcher: admission, enqueueing, and the answer to await.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Span;

use super::channel::{release, Message, Reply};
use super::policy::BatchPolicy;
use super::{BatchError, BatcherError, ValidRequest};
use crate::backend::NamedTensor;

/// The request side of a model version's batcher. Dropping it (or calling
/// [`BatcherHandle::shutdown`]) closes the queue: the actor runs what is queued, then exits.
pub struct BatcherHandle {
    model: String,
    policy: BatchPolicy,
    sender: mpsc::Sender<Message>,
    /// Requests admitted and not yet cut into a batch or dropped. The handle counts a request
    /// in before sending it, the actor counts it out; see [`BatchPolicy::admits`].
    depth: Arc<AtomicUsize>,
    /// How many batches the actor runs at once.
    instances: usize,
    actor: JoinHandle<()>,
}

/// The answer to one enqueued request. Dropping it withdraws the request if it has not run.
pub struct Pending {
    receiver: oneshot::Receiver<Reply>,
}

impl Future for Pending {
    type Output = Reply;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reply> {
        Pin::new(&mut self.receiver)
            .poll(cx)
            .map(|received| received.unwrap_or(Err(BatcherError::Batch(BatchError::NoAnswer))))
    }
}

impl BatcherHandle {
    pub(super) fn new(
        model: String,
        policy: BatchPolicy,
        sender: mpsc::Sender<Message>,
        depth: Arc<AtomicUsize>,
        instances: usize,
        actor: JoinHandle<()>,
    ) -> Self {
        Self {
            model,
            policy,
            sender,
            depth,
            instances,
            actor,
        }
    }

    /// Queues `request` and returns its answer to await. Fails at once, without queueing,
    /// when the deadline has already passed, the queue is full (RESOURCE_EXHAUSTED) or the
    /// batcher has stopped (UNAVAILABLE). The current `tracing` span travels with it.
    pub fn enqueue(&self, request: ValidRequest) -> Result<Pending, BatcherError> {
        let now = Instant::now();
        if request.deadline().is_some_and(|deadline| deadline <= now) {
            return Err(BatcherError::DeadlineExceeded {
                model: self.model.clone(),
            });
        }
        let admitted = self
            .depth
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
                self.policy
                    .admits(waiting, request.priority())
                    .then_some(waiting + 1)
            });
        if admitted.is_err() {
            return Err(self.queue_full());
        }
        let (reply, receiver) = oneshot::channel();
        let message = Message {
            request,
            reply,
            span: Span::current(),
            enqueued: now,
        };
        match self.sender.try_send(message) {
            Ok(()) => Ok(Pending { receiver }),
            Err(err) => {
                release(&self.depth, 1);
                Err(match err {
                    mpsc::error::TrySendError::Full(_) => self.queue_full(),
                    mpsc::error::TrySendError::Closed(_) => BatcherError::Stopped {
                        model: self.model.clone(),
                    },
                })
            }
        }
    }

    /// Queues `request` and waits for its outputs, in the order of `request.outputs()`.
    pub async fn submit(&self, request: ValidRequest) -> Result<Vec<NamedTensor>, BatcherError> {
        self.enqueue(request)?.await
    }

    /// Requests admitted and waiting for a batch (not counting the batch that runs).
    pub fn queue_depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// The batching policy this batcher applies (how many rows it merges, how long it queues).
    pub fn policy(&self) -> &BatchPolicy {
        &self.policy
    }

    /// How many batches of this version run at once.
    pub fn instances(&self) -> usize {
        self.instances
    }

    /// Closes the queue and waits until everything queued has been answered.
    pub async fn shutdown(self) {
        let Self {
            model,
            sender,
            actor,
            ..
        } = self;
        drop(sender);
        if let Err(err) = actor.await {
            tracing::error!(model = %model, "the batcher task failed: {err}");
        }
    }

    fn queue_full(&self) -> BatcherError {
        BatcherError::QueueFull {
            model: self.model.clone(),
        }
    }
}
