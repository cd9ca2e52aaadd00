//! The request side of a batcher: admission, enqueueing, and the answer to await; or, for a
//! fast model with nothing queued and an instance free, the run itself.
//!
//! Handing a request to the actor and the answer back costs two task wake-ups and a move to
//! a blocking thread and back: tens to hundreds of microseconds on a busy machine, far more
//! than a small model takes to run. So [`BatcherHandle::submit`] runs such a request on the
//! caller's thread when nothing is waiting (there is nobody to batch with or to overtake), an
//! instance is free (taken from the same [`Instances`](super::instances::Instances) the actor
//! takes from, so that an instance still runs one thing at a time), and the version's runs
//! are expected to take at most [`Execution::inline_max`](super::Execution) (measured from
//! real runs; a model not yet measured, or measured slower, always goes through the queue,
//! so a slow model never blocks the async runtime's thread). Under load the instances are
//! busy or requests are queued, so requests queue and merge as before.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Span;

use super::channel::{release, Message, Reply};
use super::error::TooManyPieces;
use super::execute::{answer, panicked, Run};
use super::instances::RunPlace;
use super::policy::BatchPolicy;
use super::priority::Priority;
use super::request::Parts;
use super::runner::Runner;
use super::split;
use super::telemetry::inferences;
use super::{BatchError, BatcherError, ValidRequest};
use crate::backend::NamedTensor;
use crate::trace::span::BATCH_RUN;
use crate::trace::SpanDetail;

/// The request side of a model version's batcher. Dropping it (or calling
/// [`BatcherHandle::shutdown`]) closes the queue: the actor runs what is queued, then exits.
pub struct BatcherHandle {
    model: String,
    policy: BatchPolicy,
    sender: mpsc::Sender<Message>,
    /// Requests admitted and not yet cut into a batch or dropped. The handle counts a request
    /// in before sending it, the actor counts it out; see [`BatchPolicy::admits`].
    depth: Arc<AtomicUsize>,
    /// The backend and instances, shared with the actor.
    runner: Arc<Runner>,
    actor: JoinHandle<()>,
}

/// A request as [`BatcherHandle::submit`] runs it: whole, or as queued pieces to join.
enum Split {
    Whole(ValidRequest),
    Pieces {
        pending: Vec<Pending>,
        outputs: Vec<String>,
    },
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
        runner: Arc<Runner>,
        actor: JoinHandle<()>,
    ) -> Self {
        Self {
            model,
            policy,
            sender,
            depth,
            runner,
            actor,
        }
    }

    /// Queues `request` and returns its answer to await. Fails at once, without queueing,
    /// when the deadline has already passed, the queue is full (RESOURCE_EXHAUSTED) or the
    /// batcher has stopped (UNAVAILABLE). The current `tracing` span travels with it.
    pub fn enqueue(&self, request: ValidRequest) -> Result<Pending, BatcherError> {
        let now = Instant::now();
        self.check_deadline(&request, now)?;
        self.admit(1, request.priority())?;
        self.send(request, now)
    }

    /// Queues the pieces of one request, all or none: they are admitted together, so that a
    /// request too large for the room left neither takes part of it nor leaves pieces behind
    /// to withdraw. The pieces share the request's deadline and priority.
    fn enqueue_all(&self, pieces: Vec<ValidRequest>) -> Result<Vec<Pending>, BatcherError> {
        let now = Instant::now();
        let Some(first) = pieces.first() else {
            return Ok(Vec::new());
        };
        self.check_deadline(first, now)?;
        self.admit(pieces.len(), first.priority())?;
        let mut unsent = pieces.len();
        let mut pending = Vec::with_capacity(unsent);
        for piece in pieces {
            unsent -= 1;
            match self.send(piece, now) {
                Ok(answer) => pending.push(answer),
                Err(err) => {
                    // The pieces sent are withdrawn as `pending` drops; those never sent
                    // give their places back here.
                    release(&self.depth, unsent);
                    return Err(err);
                }
            }
        }
        Ok(pending)
    }

    fn check_deadline(&self, request: &ValidRequest, now: Instant) -> Result<(), BatcherError> {
        if request.deadline().is_some_and(|deadline| deadline <= now) {
            return Err(BatcherError::DeadlineExceeded {
                model: self.model.clone(),
            });
        }
        Ok(())
    }

    /// Counts `count` requests of `priority` into the queue, or refuses them all.
    fn admit(&self, count: usize, priority: Priority) -> Result<(), BatcherError> {
        self.depth
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
                self.policy
                    .admits_all(waiting, count, priority)
                    .then_some(waiting + count)
            })
            .map(|_| ())
            .map_err(|_| self.queue_full())
    }

    /// Hands an admitted request to the actor; a request it cannot take gives its place back.
    fn send(&self, request: ValidRequest, now: Instant) -> Result<Pending, BatcherError> {
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

    /// Runs `request` and waits for its outputs, in the order of `request.outputs()`: inline
    /// when the model is fast and idle (see the module's documentation), else through the
    /// queue as [`BatcherHandle::enqueue`] does.
    pub async fn submit(&self, request: ValidRequest) -> Result<Vec<NamedTensor>, BatcherError> {
        let request = match self.split(request)? {
            Split::Pieces { pending, outputs } => return split::join(pending, &outputs).await,
            Split::Whole(request) => request,
        };
        match self.inline_instance(&request) {
            Some(instance) => self.run_inline(instance, request),
            None => self.enqueue(request)?.await,
        }
    }

    /// `request` queued as pieces, when it has more rows than the version's `split_rows`
    /// and can be cut; else the request back, to run whole. A request that would make more
    /// pieces than [`BatchPolicy::max_pieces`] is refused (INVALID_ARGUMENT) before any is
    /// made.
    fn split(&self, request: ValidRequest) -> Result<Split, BatcherError> {
        let Some(limit) = self.policy.split_rows() else {
            return Ok(Split::Whole(request));
        };
        let rows = usize::try_from(request.inferences()).unwrap_or(usize::MAX);
        let count = split::piece_count(rows, limit);
        if count < 2 || !split::can_cut(&request, rows, count, self.runner.signatures()) {
            return Ok(Split::Whole(request));
        }
        let max_pieces = self.policy.max_pieces();
        if count > max_pieces {
            return Err(TooManyPieces {
                model: self.model.clone(),
                rows,
                split_rows: limit,
                pieces: count,
                max_pieces,
                max_rows: limit.saturating_mul(max_pieces),
            }
            .into());
        }
        let outputs = request.outputs().to_vec();
        let pieces = split::piece_rows(rows, limit);
        let pieces = match split::cut(request, &pieces, self.runner.signatures()) {
            Ok(pieces) => pieces,
            Err(whole) => return Ok(Split::Whole(*whole)),
        };
        // Every piece is queued before any is awaited, so that free instances take them at
        // once.
        let pending = self.enqueue_all(pieces)?;
        Ok(Split::Pieces { pending, outputs })
    }

    /// An instance for `request` to run on inline, if it may.
    fn inline_instance(&self, request: &ValidRequest) -> Option<usize> {
        let bound = self.runner.inline_max;
        // A request past its deadline, or for a stopped batcher, takes the queue's path to
        // its error.
        if bound.is_zero()
            || self.depth.load(Ordering::Acquire) > 0
            || self.sender.is_closed()
            || request
                .deadline()
                .is_some_and(|deadline| deadline <= Instant::now())
        {
            return None;
        }
        let rows = inferences(request.inputs());
        self.runner.instances.take_for_inline(rows, bound)
    }

    /// Runs `request` on this thread as `instance`, which [`Self::inline_instance`] took.
    fn run_inline(&self, instance: usize, request: ValidRequest) -> Reply {
        let Parts {
            signature,
            inputs,
            outputs,
            targets,
            trace,
            run_time,
            ..
        } = request.into_parts();
        let rows = inferences(&inputs);
        // Rows per request, for splitting outputs: one request, nothing to split.
        let split = [usize::try_from(rows).unwrap_or(usize::MAX)];
        self.runner.record_queue_wait(std::time::Duration::ZERO);
        self.runner.histograms.count_inline_run();
        let run = Run {
            signature,
            outputs: &outputs,
            targets: &targets,
            rows: &split,
            inferences: rows,
        };
        // A panicking runtime fails this request, as it fails a batch on a blocking thread,
        // and the instance comes back either way.
        let started = std::time::Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            self.runner
                .run(instance, RunPlace::Inline, run, vec![inputs])
        }));
        let ended = std::time::Instant::now();
        if let Some(trace) = &trace {
            let detail = SpanDetail::Batch { size: 1, instance };
            trace.record(BATCH_RUN, started, ended, detail);
        }
        if let Some(run_time) = &run_time {
            run_time.add(ended.saturating_duration_since(started));
        }
        self.runner
            .instances
            .give_back_from_outside(instance, &self.depth);
        match outcome {
            Ok(outcome) => answer(outcome),
            Err(payload) => {
                let err = panicked(payload);
                tracing::error!(model = %self.model, "{err}");
                Err(BatcherError::Batch(err))
            }
        }
    }

    /// Requests admitted and waiting for a batch (not counting the batch that runs).
    pub fn queue_depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// The batching policy this batcher applies (how many rows it merges, how long it queues).
    pub fn policy(&self) -> &BatchPolicy {
        &self.policy
    }

    /// Requests that ran on their caller's thread, without the queue.
    pub fn inline_runs(&self) -> u64 {
        self.runner.histograms.inline_runs()
    }

    /// How many batches of this version run at once.
    pub fn instances(&self) -> usize {
        self.runner.instance_count()
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
