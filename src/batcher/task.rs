//! The actor: a thin async shell around [`BatchQueue`] that owns the model version's backend.
//!
//! One task per model version receives requests from a bounded channel, asks the queue what to
//! do, and runs at most one batch at a time on a blocking thread. Requests that arrive while a
//! batch runs wait and form the next one, which is when batching pays: the backend serialises
//! runs of one version anyway.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tracing::Span;

use super::gather::{batch_key, gather, scatter, BatchKey};
use super::handle::BatcherHandle;
use super::policy::{BatchPolicy, BatchQueue, Next, Queued};
use super::{BatchError, BatchRequest, BatchSettings};
use crate::backend::{Backend, BackendError, NamedTensor, OutputTarget};
use crate::error::Error;
use crate::metrics::{CopyStage, Metrics, ModelMetrics};
use crate::stats::ModelStats;

pub(super) type Reply = Result<Vec<NamedTensor>, Error>;

/// What crosses the channel: the request and everything needed to answer and trace it.
pub(super) struct Message {
    pub(super) request: BatchRequest,
    pub(super) reply: oneshot::Sender<Reply>,
    /// The caller's span, so that queueing and batching show up under its request.
    pub(super) span: Span,
    pub(super) enqueued: Instant,
}

/// A queued request, less what the policy keeps beside it.
struct Waiting {
    signature: usize,
    inputs: Vec<NamedTensor>,
    outputs: Vec<String>,
    targets: Vec<OutputTarget>,
    reply: oneshot::Sender<Reply>,
    span: Span,
    enqueued: Instant,
}

/// Who to answer once the running batch finishes.
struct Waiter {
    reply: oneshot::Sender<Reply>,
    span: Span,
}

/// Per-request outputs, in batch order, or why the whole batch failed.
type Outcome = Result<Vec<Vec<NamedTensor>>, Failure>;

enum Failure {
    Backend(BackendError),
    Batch(BatchError),
}

struct InFlight {
    task: JoinHandle<Outcome>,
    waiters: Vec<Waiter>,
}

enum Event {
    Received(Option<Message>),
    Finished(Result<Outcome, JoinError>),
    Wake,
}

/// Where the actor reports what it did: the version's statistics and the server's metrics.
#[derive(Clone, Default)]
pub struct Telemetry {
    pub stats: Arc<ModelStats>,
    pub metrics: Arc<Metrics>,
    /// The version the batcher serves, for the metrics' labels.
    pub version: u64,
}

/// The batching actor of one model version. Start it with [`Batcher::spawn`].
pub struct Batcher {
    model: String,
    backend: Arc<dyn Backend>,
    telemetry: Telemetry,
    histograms: ModelMetrics,
    receiver: mpsc::Receiver<Message>,
    queue: BatchQueue<BatchKey, Waiting>,
    /// Requests admitted and not yet cut into a batch or dropped; shared with the handle,
    /// which increments it on admission. The actor decrements it.
    depth: Arc<AtomicUsize>,
}

impl Batcher {
    /// Starts the actor for `model` on the current Tokio runtime (it must be called from
    /// within one) and returns the handle requests go through.
    pub fn spawn(
        model: impl Into<String>,
        backend: Arc<dyn Backend>,
        settings: &BatchSettings,
        telemetry: Telemetry,
    ) -> BatcherHandle {
        let model = model.into();
        let policy = BatchPolicy::new(settings);
        // Admission is counted in `depth`, which never exceeds `capacity`, and a
        // message in the channel is always counted: so the channel cannot fill up, and its
        // bound only backs the count up.
        let (sender, receiver) = mpsc::channel(policy.capacity());
        let depth = Arc::new(AtomicUsize::new(0));
        let histograms = telemetry.metrics.model(&model, telemetry.version);
        let batcher = Batcher {
            model: model.clone(),
            backend,
            telemetry,
            histograms,
            receiver,
            queue: BatchQueue::new(policy.clone()),
            depth: depth.clone(),
        };
        let actor = tokio::spawn(batcher.run());
        BatcherHandle::new(model, policy, sender, depth, actor)
    }

    async fn run(mut self) {
        let mut in_flight: Option<InFlight> = None;
        let mut open = true;
        loop {
            let now = Instant::now();
            let step = self
                .queue
                .step(now.into_std(), in_flight.is_none(), |waiting| {
                    waiting.reply.is_closed()
                });
            self.release(step.expired.len() + step.abandoned.len());
            for waiting in step.expired {
                waiting
                    .span
                    .in_scope(|| tracing::debug!("deadline passed in the queue"));
                let _ = waiting.reply.send(Err(Error::DeadlineExceeded {
                    model: self.model.clone(),
                }));
            }
            for waiting in step.abandoned {
                waiting
                    .span
                    .in_scope(|| tracing::debug!("client gone; not run"));
            }
            let wake = match step.next {
                Next::Run(batch) => {
                    in_flight = Some(self.start(batch));
                    continue;
                }
                Next::WakeAt(at) => Some(Instant::from_std(at)),
                Next::Idle => None,
            };
            if !open && in_flight.is_none() && self.queue.is_empty() {
                break;
            }
            let event = tokio::select! {
                message = self.receiver.recv(), if open => Event::Received(message),
                joined = join(&mut in_flight), if in_flight.is_some() => Event::Finished(joined),
                () = tokio::time::sleep_until(wake.unwrap_or(now)), if wake.is_some() => Event::Wake,
                else => break,
            };
            match event {
                Event::Received(Some(message)) => {
                    self.accept(message);
                    // Take everything already waiting, so that one step sees all of it: with
                    // a short delay this is what lets simultaneous requests merge.
                    while let Ok(message) = self.receiver.try_recv() {
                        self.accept(message);
                    }
                }
                Event::Received(None) => {
                    open = false;
                    self.queue.close();
                }
                Event::Finished(joined) => {
                    if let Some(done) = in_flight.take() {
                        self.finish(done.waiters, joined);
                    }
                }
                Event::Wake => {}
            }
        }
        tracing::debug!(model = %self.model, "batcher stopped");
    }

    fn accept(&mut self, message: Message) {
        let Message {
            request,
            reply,
            span,
            enqueued,
        } = message;
        let BatchRequest {
            signature,
            inputs,
            outputs,
            deadline,
            targets,
            priority,
        } = request;
        // A request that wants outputs written into its own memory runs alone.
        let mergeable = targets.iter().all(Option::is_none);
        let (key, rows) = if mergeable && self.queue.policy().batching_enabled() {
            match batch_key(signature, &inputs, &outputs) {
                Some((key, rows)) => (Some(key), rows),
                None => (None, 0),
            }
        } else {
            (None, 0)
        };
        self.queue.push(Queued {
            key,
            rows,
            enqueued: enqueued.into_std(),
            deadline: deadline.map(Instant::into_std),
            priority,
            item: Waiting {
                signature,
                inputs,
                outputs,
                targets,
                reply,
                span,
                enqueued,
            },
        });
    }

    /// Hands `batch` to a blocking thread; its requests stop counting as queued.
    fn start(&self, batch: Vec<Queued<BatchKey, Waiting>>) -> InFlight {
        self.release(batch.len());
        let size = batch.len();
        let mut call = None;
        let mut requests = Vec::with_capacity(size);
        let mut rows = Vec::with_capacity(size);
        let mut waiters = Vec::with_capacity(size);
        for queued in batch {
            let waiting = queued.item;
            let waited = waiting.enqueued.elapsed();
            self.telemetry.stats.queue.record(waited);
            self.histograms.observe_queue_wait(waited);
            let queued_us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
            waiting
                .span
                .in_scope(|| tracing::debug!(queued_us, batch = size, "batched"));
            // Entries of one batch share a key, hence a signature and an output list.
            call.get_or_insert((waiting.signature, waiting.outputs, waiting.targets));
            requests.push(waiting.inputs);
            rows.push(queued.rows);
            waiters.push(Waiter {
                reply: waiting.reply,
                span: waiting.span,
            });
        }
        let (signature, outputs, targets) = call.unwrap_or_default();
        let span = tracing::debug_span!("batch", model = %self.model, requests = size);
        for waiter in &waiters {
            span.follows_from(&waiter.span);
        }
        // Inferences in Triton's sense: rows along dimension 0 (1 for a scalar input), counted
        // whether or not the requests were merged.
        let inferences = requests
            .iter()
            .map(|inputs| {
                inputs
                    .first()
                    .and_then(|(_, t)| t.shape().first().copied())
                    .unwrap_or(1) as u64
            })
            .sum();
        let backend = self.backend.clone();
        let telemetry = self.telemetry.clone();
        let histograms = self.histograms.clone();
        let task = tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let outcome = span.in_scope(|| {
                let run = Run {
                    signature,
                    outputs: &outputs,
                    targets: &targets,
                    rows: &rows,
                    inferences,
                };
                execute(backend.as_ref(), run, requests, &telemetry)
            });
            if outcome.is_ok() {
                telemetry.stats.record_execution(inferences);
                histograms.observe_execution(started.elapsed(), inferences);
            }
            outcome
        });
        InFlight { task, waiters }
    }

    fn finish(&self, waiters: Vec<Waiter>, joined: Result<Outcome, JoinError>) {
        let failure = match joined {
            Ok(Ok(outputs)) if outputs.len() == waiters.len() => {
                for (waiter, outputs) in waiters.into_iter().zip(outputs) {
                    let _ = waiter.reply.send(Ok(outputs));
                }
                return;
            }
            Ok(Ok(_)) => Failure::Batch(BatchError::NoAnswer),
            Ok(Err(failure)) => failure,
            Err(err) => {
                let err = join_failure(err);
                tracing::error!(model = %self.model, "{err}");
                Failure::Batch(err)
            }
        };
        for waiter in waiters {
            let _ = waiter.reply.send(Err(failure.to_error()));
        }
    }

    fn release(&self, count: usize) {
        release(&self.depth, count);
    }
}

/// Runs one batch: a lone request as it came (its tensors are passed on, not copied), a
/// merged one gathered, run and scattered.
/// Runs one batch, timing its three phases as Triton's statistics split them: gathering the
/// inputs, the runtime, and splitting the outputs (the first and last are empty for a request
/// that runs alone).
/// What one batch runs: its signature and outputs, and how its requests split.
struct Run<'a> {
    signature: usize,
    outputs: &'a [String],
    /// Set only for a request that runs alone.
    targets: &'a [OutputTarget],
    /// Rows per request as the policy counted them (for splitting outputs).
    rows: &'a [usize],
    /// Rows along dimension 0 over all requests (for statistics).
    inferences: u64,
}

fn execute(
    backend: &dyn Backend,
    run: Run<'_>,
    mut requests: Vec<Vec<NamedTensor>>,
    telemetry: &Telemetry,
) -> Outcome {
    let Run {
        signature,
        outputs,
        targets,
        rows,
        inferences,
    } = run;
    let stats = &telemetry.stats;
    let sig = backend
        .signatures()
        .get(signature)
        .ok_or(Failure::Batch(BatchError::UnknownSignature(signature)))?;
    let phase = std::time::Instant::now();
    let inputs = if requests.len() == 1 {
        requests.pop().unwrap_or_default()
    } else {
        let inputs = gather(requests).map_err(Failure::Batch)?;
        let gathered = inputs
            .iter()
            .filter_map(|(_, tensor)| tensor.bytes().map(|b| b.len()))
            .sum();
        telemetry
            .metrics
            .record_copy(CopyStage::BatchGather, gathered);
        inputs
    };
    let input_time = phase.elapsed();

    let phase = std::time::Instant::now();
    let merged = backend
        .run_into(sig, inputs, outputs, targets)
        .map_err(Failure::Backend)?;
    let infer_time = phase.elapsed();

    let phase = std::time::Instant::now();
    let split = if rows.len() == 1 {
        Ok(vec![merged])
    } else {
        scatter(merged, rows).map_err(Failure::Batch)
    };
    stats.record_compute(inferences, input_time, infer_time, phase.elapsed());
    split
}

async fn join(slot: &mut Option<InFlight>) -> Result<Outcome, JoinError> {
    match slot {
        Some(in_flight) => (&mut in_flight.task).await,
        None => std::future::pending().await,
    }
}

fn join_failure(err: JoinError) -> BatchError {
    if !err.is_panic() {
        return BatchError::Cancelled;
    }
    let payload = err.into_panic();
    let message = payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    BatchError::BackendPanicked(message)
}

impl Failure {
    /// One error per request of the failed batch; the errors carry only strings, so each
    /// request gets its own copy.
    fn to_error(&self) -> Error {
        match self {
            Self::Batch(err) => Error::Batch(err.clone()),
            Self::Backend(err) => Error::Backend(match err {
                BackendError::Library(message) => BackendError::Library(message.clone()),
                BackendError::Load { path, message } => BackendError::Load {
                    path: path.clone(),
                    message: message.clone(),
                },
                BackendError::InvalidInput(message) => BackendError::InvalidInput(message.clone()),
                BackendError::Runtime(message) => BackendError::Runtime(message.clone()),
            }),
        }
    }
}

pub(super) fn release(depth: &AtomicUsize, count: usize) {
    // Saturating, so that a miscount can never wrap around and refuse every request.
    let _ = depth.fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
        Some(waiting.saturating_sub(count))
    });
}
