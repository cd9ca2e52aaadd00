//! The actor: a thin async shell around [`BatchQueue`] that owns the model version's backend.
//!
//! One task per model version receives requests from a bounded channel, asks the queue what to
//! do, and runs at most one batch per instance at a time, each on a blocking thread (long
//! runs on their instance's own thread, see instance_threads.rs). Requests
//! that arrive while every instance is busy wait and form the next batch, which is when
//! batching pays. A long run's instance may take one more batch while it runs, one that
//! waiting could not grow (see rule 6 in policy.rs): it waits on the instance's thread and
//! starts the moment the run ends, where it would otherwise wait for this task to hear of the
//! end, cut it and hand it over. Instances are taken from [`Instances`](super::instances::Instances), which requests that run inline
//! (see handle.rs) share, so that an instance runs one thing at a time whoever started it.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{Id, JoinError, JoinSet};
use tokio::time::Instant;
use tracing::Span;

use super::alarm::Alarm;
use super::channel::{release, Message, Reply};
use super::error::{BatchError, BatcherError};
use super::execute::{answers, panicked, Outcome, Run};
use super::gather::{batch_key, BatchKey};
use super::instance_threads::{InstanceThreads, LONG_RUN};
use super::instances::RunPlace;
use super::policy::{BatchPolicy, Next, Queued, Room};
use super::queue::BatchQueue;
use super::request::{Parts, RunTime};
use super::runner::Runner;
use super::telemetry::inferences;
use crate::backend::{NamedTensor, OutputTarget};
use crate::trace::span::{BATCH_RUN, QUEUE_WAIT};
use crate::trace::{SpanDetail, TraceHandle};

/// A queued request, less what the policy keeps beside it.
struct Waiting {
    signature: usize,
    inputs: Vec<NamedTensor>,
    outputs: Vec<String>,
    targets: Vec<OutputTarget>,
    reply: oneshot::Sender<Reply>,
    span: Span,
    enqueued: Instant,
    trace: Option<TraceHandle>,
    run_time: Option<Arc<RunTime>>,
}

/// Who to answer once the running batch finishes.
struct Waiter {
    reply: oneshot::Sender<Reply>,
    span: Span,
    trace: Option<TraceHandle>,
    run_time: Option<Arc<RunTime>>,
}

/// A batch that runs, by the task that runs it.
struct InFlight {
    waiters: Vec<Waiter>,
    instance: usize,
    /// When the batch started, for the traced requests' batch-run spans.
    started: std::time::Instant,
    /// Whether it runs on its instance's own thread, which runs what it is sent in order.
    on_thread: bool,
}

/// The batches the actor runs now, at most one per instance.
#[derive(Default)]
struct Running {
    tasks: JoinSet<Outcome>,
    batches: HashMap<Id, InFlight>,
    threads: InstanceThreads,
}

impl Running {
    fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// The batch a finished task ran; the caller gives its instance back unless another
    /// batch waits to run on it ([`Running::uses`]).
    fn finished(&mut self, id: Id) -> Option<InFlight> {
        self.batches.remove(&id)
    }

    /// Whether a batch runs or waits to run on `instance`.
    fn uses(&self, instance: usize) -> bool {
        self.batches
            .values()
            .any(|batch| batch.instance == instance)
    }

    /// A busy instance that may take one more batch to run the moment its run ends: its one
    /// batch runs on the instance's own thread (which runs its jobs in order, so the two
    /// never run at once). Of several, the one whose run started first, as it should end
    /// first.
    fn behind(&self) -> Option<usize> {
        self.batches
            .values()
            .filter(|batch| {
                batch.on_thread
                    && self
                        .batches
                        .values()
                        .filter(|other| other.instance == batch.instance)
                        .count()
                        == 1
            })
            .min_by_key(|batch| batch.started)
            .map(|batch| batch.instance)
    }
}

enum Event {
    Received(Option<Message>),
    Finished(Result<(Id, Outcome), JoinError>),
    /// A request that ran inline gave its instance back.
    Freed,
    /// The queue delay the alarm was set for is over, as of this time.
    Wake(Instant),
    /// The server's drain began (`true`), or can no longer begin (`false`).
    Drain(bool),
}

/// The batching actor of one model version. Start it with [`Batcher::spawn`] (start.rs).
pub struct Batcher {
    model: String,
    runner: Arc<Runner>,
    receiver: mpsc::Receiver<Message>,
    /// Turns `true` when the server's drain begins: the queue then stops waiting for company.
    flush: watch::Receiver<bool>,
    queue: BatchQueue<BatchKey, Waiting>,
    /// Requests admitted and not yet cut into a batch or dropped; shared with the handle,
    /// which increments it on admission. The actor decrements it.
    depth: Arc<AtomicUsize>,
}

impl Batcher {
    /// The actor of `model`, fed by `receiver`, counting its queue in `depth` (shared with the
    /// handle). It does nothing until [`Batcher::run`] is spawned; see start.rs.
    pub(super) fn new(
        model: String,
        runner: Arc<Runner>,
        receiver: mpsc::Receiver<Message>,
        flush: watch::Receiver<bool>,
        policy: BatchPolicy,
        depth: Arc<AtomicUsize>,
    ) -> Self {
        Self {
            model,
            runner,
            receiver,
            flush,
            queue: BatchQueue::new(policy),
            depth,
        }
    }

    /// Runs until the handle's sender is dropped and everything queued has been answered.
    pub(super) async fn run(mut self) {
        let runner = self.runner.clone();
        let instances = &runner.instances;
        let mut running = Running::default();
        let mut open = true;
        let mut alarm = Alarm::default();
        // When the alarm last rang: the delay it was set for is over from then on.
        let mut rang: Option<Instant> = None;
        // Until the drain begins (or cannot any more: the repository is gone).
        let mut before_drain = !*self.flush.borrow_and_update();
        if !before_drain {
            self.queue.close();
        }
        loop {
            let now = rang
                .take()
                .map_or_else(Instant::now, |at| at.max(Instant::now()));
            // Taken before the step, since the queue cuts a batch only when told an instance
            // is free, and a request running inline may take the last one at any time.
            let instance = instances.take();
            let behind = if instance.is_none() {
                running.behind()
            } else {
                None
            };
            let room = match (instance, behind) {
                (Some(_), _) => Room::Free,
                (None, Some(_)) => Room::Behind,
                (None, None) => Room::None,
            };
            let step = self
                .queue
                .step(now.into_std(), room, |waiting| waiting.reply.is_closed());
            self.release(step.expired.len() + step.abandoned.len());
            for waiting in step.expired {
                waiting
                    .span
                    .in_scope(|| tracing::debug!("deadline passed in the queue"));
                let _ = waiting.reply.send(Err(BatcherError::DeadlineExceeded {
                    model: self.model.clone(),
                }));
            }
            for waiting in step.abandoned {
                waiting
                    .span
                    .in_scope(|| tracing::debug!("client gone; not run"));
            }
            let wake = match (step.next, instance.or(behind)) {
                (Next::Run(batch), Some(target)) => {
                    self.start(&mut running, target, batch);
                    continue;
                }
                (next, _) => {
                    // Only a taken instance goes back; one that was only `behind` is running.
                    if let Some(instance) = instance {
                        instances.give_back(instance);
                    }
                    match next {
                        Next::WakeAt(at) => Some(Instant::from_std(at)),
                        Next::Idle => None,
                        // The queue never cuts when told no instance is free; should it,
                        // its requests are answered (NoAnswer, as their replies drop)
                        // rather than left counted as waiting.
                        Next::Run(batch) => {
                            self.release(batch.len());
                            continue;
                        }
                    }
                }
            };
            if !open && running.is_empty() && self.queue.is_empty() {
                break;
            }
            alarm.set(wake);
            let event = tokio::select! {
                message = self.receiver.recv(), if open => Event::Received(message),
                Some(joined) = running.tasks.join_next_with_id(), if !running.is_empty() => {
                    Event::Finished(joined)
                }
                () = instances.freed() => Event::Freed,
                at = alarm.rung(), if wake.is_some() => Event::Wake(at),
                changed = self.flush.changed(), if before_drain => Event::Drain(changed.is_ok()),
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
                    let id = match &joined {
                        Ok((id, _)) => *id,
                        Err(err) => err.id(),
                    };
                    if let Some(done) = running.finished(id) {
                        if !running.uses(done.instance) {
                            instances.give_back(done.instance);
                        }
                        self.finish(done, joined.map(|(_, outcome)| outcome));
                    }
                }
                Event::Wake(at) => rang = Some(at),
                Event::Drain(started) => {
                    before_drain = false;
                    // The flag only ever turns true; an error means it never will.
                    if started {
                        tracing::debug!(model = %self.model, "draining: queued requests run now");
                        self.queue.close();
                    }
                }
                Event::Freed => {}
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
        let Parts {
            signature,
            inputs,
            outputs,
            deadline,
            targets,
            priority,
            trace,
            run_time,
        } = request.into_parts();
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
                trace,
                run_time,
            },
        });
    }

    /// Hands `batch` to a blocking thread on `instance`, which the caller has taken (or
    /// which [`Running::behind`] named: the batch then waits on the instance's thread for the
    /// run ahead of it); its requests stop counting as queued. Their queue wait ends here, so
    /// a batch that waits behind a run counts that wait in its run's time.
    fn start(&self, running: &mut Running, instance: usize, batch: Vec<Queued<BatchKey, Waiting>>) {
        self.release(batch.len());
        let size = batch.len();
        let mut call = None;
        let mut requests = Vec::with_capacity(size);
        let mut rows = Vec::with_capacity(size);
        let mut waiters = Vec::with_capacity(size);
        let started = std::time::Instant::now();
        for queued in batch {
            let waiting = queued.item;
            if let Some(trace) = &waiting.trace {
                let detail = SpanDetail::None;
                trace.record(QUEUE_WAIT, waiting.enqueued.into_std(), started, detail);
            }
            let waited = waiting.enqueued.elapsed();
            self.runner.record_queue_wait(waited);
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
                trace: waiting.trace,
                run_time: waiting.run_time,
            });
        }
        let (signature, outputs, targets) = call.unwrap_or_default();
        let span = tracing::debug_span!("batch", model = %self.model, requests = size);
        for waiter in &waiters {
            span.follows_from(&waiter.span);
        }
        let inferences = requests.iter().map(|inputs| inferences(inputs)).sum();
        let runner = self.runner.clone();
        // Behind another batch, it must go to the same thread, whatever its length.
        let behind = running.uses(instance);
        let long = behind || self.runner.instances.runs_at_least(inferences, LONG_RUN);
        let run_on = running.threads.runner(instance, long);
        let on_thread = run_on.on_thread();
        let task = running.tasks.spawn_blocking(move || {
            run_on.run(move || {
                span.in_scope(|| {
                    let run = Run {
                        signature,
                        outputs: &outputs,
                        targets: &targets,
                        rows: &rows,
                        inferences,
                    };
                    runner.run(instance, RunPlace::Queued, run, requests)
                })
            })
        });
        let batch = InFlight {
            waiters,
            instance,
            started,
            on_thread,
        };
        running.batches.insert(task.id(), batch);
    }

    fn finish(&self, batch: InFlight, joined: Result<Outcome, JoinError>) {
        let InFlight {
            waiters,
            instance,
            started,
            ..
        } = batch;
        let count = waiters.len();
        let ended = std::time::Instant::now();
        for trace in waiters.iter().filter_map(|waiter| waiter.trace.as_ref()) {
            let detail = SpanDetail::Batch {
                size: count,
                instance,
            };
            trace.record(BATCH_RUN, started, ended, detail);
        }
        let took = ended.saturating_duration_since(started);
        for run_time in waiters.iter().filter_map(|waiter| waiter.run_time.as_ref()) {
            run_time.add(took);
        }
        let replies = match joined {
            Ok(outcome) => answers(outcome, count),
            Err(err) => {
                let err = join_failure(err);
                tracing::error!(model = %self.model, "{err}");
                (0..count)
                    .map(|_| Err(BatcherError::Batch(err.clone())))
                    .collect()
            }
        };
        for (waiter, reply) in waiters.into_iter().zip(replies) {
            let _ = waiter.reply.send(reply);
        }
    }

    fn release(&self, count: usize) {
        release(&self.depth, count);
    }
}

fn join_failure(err: JoinError) -> BatchError {
    if err.is_panic() {
        panicked(err.into_panic())
    } else {
        BatchError::Cancelled
    }
}
