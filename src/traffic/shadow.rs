//! Shadow copies: a sampled request runs again on the model's `[traffic.shadow]` target once
//! its own answer has been handed to the transport; the copy's answer is compared with the
//! primary's, output by output, and discarded.
//!
//! The copy can never delay, fail or change the primary: it is offered to a bounded queue
//! with `try_send` after the primary's outputs are ready, and dropped (and counted) instead
//! of waiting when the queue is full, when the primary's or the target's queue has requests
//! waiting, when the server has no CPU to spare (more client requests in flight than it has
//! CPUs, or the process used more than three quarters of its CPUs over the last 50 ms: see
//! `headroom`), or when the server is near its limit on requests in flight. The CPU checks
//! are made again just before the copy runs, so that load that arrived while it waited turns
//! it away. What a copy holds is charged to the request memory budget and bounded in bytes
//! (see `held`): a copy that does not fit either is dropped too. One worker runs the
//! copies one at a time, each only after [`AnswerSent`] says the primary's answer (status,
//! headers and its encoded body) has left the stack. A copy never writes to the client's
//! shared memory, and a request with an input in shared memory is not copied at all: the
//! client may reuse its region as soon as it has its answer. When the primary was logged
//! (`[logging] shadow = true`), the copy's answer is logged beside it.

use std::sync::{Arc, OnceLock};

use tokio::sync::mpsc;

use super::headroom::Headroom;
use super::held::{copy_bytes, QueuedBytes, Ticket, SHADOW_QUEUE_BYTES};
use super::values::max_abs_difference;
use crate::backend::NamedTensor;
use crate::batcher::ValidRequest;
use crate::metrics::{Metrics, ShadowDropReason};
use crate::payload_log::ShadowLog;
use crate::repository::{LoadedModel, ModelRepository};
use crate::request::{AnswerSent, MemoryHold, MemoryPool};
use crate::version::VersionSelector;

/// Copies waiting for the worker; past this, copies are dropped.
pub const SHADOW_QUEUE: usize = 64;

/// A request sampled for a copy, decided before it runs.
pub struct ShadowCopy {
    pub target: VersionSelector,
    pub answer: AnswerSent,
    /// The request memory budget the copy is charged to (`None`: no budget).
    pub memory: Option<Arc<dyn MemoryPool>>,
}

/// What a queued copy has taken of the budget and of the queue's bytes, given back when the
/// copy is done (run, compared and dropped) or dropped unrun.
struct Held {
    _budget: Option<MemoryHold>,
    _queued: Ticket,
}

/// A copy ready to run once the primary's answer is out.
pub struct ShadowJob {
    model: Arc<str>,
    target: VersionSelector,
    signature: String,
    inputs: Vec<NamedTensor>,
    outputs: Vec<String>,
    primary: Vec<NamedTensor>,
    answer: AnswerSent,
    log: Option<ShadowLog>,
    memory: Option<Arc<dyn MemoryPool>>,
    /// Set once the copy is queued; dropped with the job.
    held: Option<Held>,
}

/// The inputs of a sampled request, kept (by reference: tensors share their bytes) while the
/// primary runs.
pub struct ShadowInputs {
    copy: ShadowCopy,
    signature: String,
    inputs: Vec<NamedTensor>,
    outputs: Vec<String>,
    log: Option<ShadowLog>,
}

impl ShadowInputs {
    pub fn of(copy: ShadowCopy, model: &LoadedModel, request: &ValidRequest) -> Self {
        let signature = model
            .backend
            .signatures()
            .get(request.signature())
            .map(|sig| sig.name.clone())
            .unwrap_or_default();
        Self {
            copy,
            signature,
            inputs: request.inputs().to_vec(),
            outputs: request.outputs().to_vec(),
            log: None,
        }
    }

    /// Logs the copy's answer through `log` (the primary's record was written).
    pub fn logged_by(mut self, log: Option<ShadowLog>) -> Self {
        self.log = log;
        self
    }

    /// The job, with the primary's answer to compare against.
    pub fn with_answer(self, model: &Arc<str>, primary: &[NamedTensor]) -> ShadowJob {
        ShadowJob {
            model: model.clone(),
            target: self.copy.target,
            signature: self.signature,
            inputs: self.inputs,
            outputs: self.outputs,
            primary: primary.to_vec(),
            answer: self.copy.answer,
            log: self.log,
            memory: self.copy.memory,
            held: None,
        }
    }
}

impl ShadowJob {
    /// What the copy holds at its peak (see `held`).
    pub fn bytes(&self) -> u64 {
        copy_bytes(&self.inputs, &self.primary)
    }
}

/// The queue and its worker, started with the first copy.
pub struct ShadowDispatcher {
    repository: Arc<ModelRepository>,
    metrics: Arc<Metrics>,
    queue: OnceLock<mpsc::Sender<ShadowJob>>,
    capacity: usize,
    /// Bytes of the copies queued or running.
    queued_bytes: QueuedBytes,
    /// `--max-concurrent-requests` (0: none): copies stop at 90% of it.
    concurrency_limit: usize,
    /// The CPUs the server may use: copies run only while client requests in flight are no
    /// more than this.
    cpus: usize,
}

impl ShadowDispatcher {
    pub fn new(repository: Arc<ModelRepository>, metrics: Arc<Metrics>) -> Self {
        Self {
            repository,
            metrics,
            queue: OnceLock::new(),
            capacity: SHADOW_QUEUE,
            queued_bytes: QueuedBytes::new(SHADOW_QUEUE_BYTES),
            concurrency_limit: 0,
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
        }
    }

    pub fn with_cpus(mut self, cpus: usize) -> Self {
        self.cpus = cpus.max(1);
        self
    }

    pub fn with_concurrency_limit(mut self, limit: usize) -> Self {
        self.concurrency_limit = limit;
        self
    }

    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// Bounds the bytes of the copies queued or running (default [`SHADOW_QUEUE_BYTES`]).
    pub fn with_queue_bytes(mut self, bytes: u64) -> Self {
        self.queued_bytes = QueuedBytes::new(bytes);
        self
    }

    /// Keeps the copies to half of a request memory budget of `total` bytes (0: none), so
    /// that clients always have the other half whatever the copies hold.
    pub fn with_memory_budget(self, total: u64) -> Self {
        match total {
            0 => self,
            total => self.with_queue_bytes(SHADOW_QUEUE_BYTES.min(total / 2)),
        }
    }

    /// Counts a copy not made for `reason`.
    pub fn dropped(&self, model: &Arc<str>, reason: ShadowDropReason) {
        self.metrics.traffic().record_shadow_dropped(model, reason);
    }

    /// Queues `job` unless the server is busy or it does not fit; never waits.
    pub fn offer(&self, mut job: ShadowJob, primary: &LoadedModel) {
        if self.near_limit() {
            return self.dropped(&job.model, ShadowDropReason::NearLimit);
        }
        if primary.batcher.queue_depth() > 0 || cpus_taken(&self.metrics, self.cpus) {
            return self.dropped(&job.model, ShadowDropReason::Busy);
        }
        match self.hold(&job) {
            Ok(held) => job.held = Some(held),
            Err(reason) => return self.dropped(&job.model, reason),
        }
        let queue = self.queue.get_or_init(|| self.start());
        if let Err(refused) = queue.try_send(job) {
            let job = match refused {
                mpsc::error::TrySendError::Full(job) | mpsc::error::TrySendError::Closed(job) => {
                    job
                }
            };
            self.dropped(&job.model, ShadowDropReason::QueueFull);
        }
    }

    /// Takes what `job` will hold from the queue's bytes, then from the request memory
    /// budget; why not when either has no room.
    fn hold(&self, job: &ShadowJob) -> Result<Held, ShadowDropReason> {
        let bytes = job.bytes();
        let queued = self
            .queued_bytes
            .take(bytes)
            .ok_or(ShadowDropReason::QueueFull)?;
        let budget = match &job.memory {
            Some(pool) => Some(pool.hold(bytes).map_err(|_| ShadowDropReason::Memory)?),
            None => None,
        };
        Ok(Held {
            _budget: budget,
            _queued: queued,
        })
    }

    fn near_limit(&self) -> bool {
        if self.concurrency_limit == 0 {
            return false;
        }
        let in_flight = usize::try_from(self.metrics.in_flight().get()).unwrap_or(0);
        in_flight.saturating_mul(10) >= self.concurrency_limit.saturating_mul(9)
    }

    fn start(&self) -> mpsc::Sender<ShadowJob> {
        let (sender, receiver) = mpsc::channel(self.capacity);
        tokio::spawn(work(
            receiver,
            self.repository.clone(),
            self.metrics.clone(),
            self.cpus,
        ));
        sender
    }
}

/// Whether client requests in flight outnumber `cpus`. The count may still hold the copy's
/// own primary while its answer leaves, hence "outnumber" rather than "equal".
fn cpus_taken(metrics: &Metrics, cpus: usize) -> bool {
    usize::try_from(metrics.in_flight().get()).unwrap_or(0) > cpus
}

/// The worker: one copy at a time, each after its primary's answer. Ends when the dispatcher
/// (the server's inference service) is dropped.
async fn work(
    mut jobs: mpsc::Receiver<ShadowJob>,
    repository: Arc<ModelRepository>,
    metrics: Arc<Metrics>,
    cpus: usize,
) {
    let mut headroom = Headroom::new(cpus);
    while let Some(mut job) = jobs.recv().await {
        let answer = std::mem::replace(&mut job.answer, AnswerSent::now());
        answer.wait().await;
        if cpus_taken(&metrics, cpus) || headroom.busy() {
            metrics
                .traffic()
                .record_shadow_dropped(&job.model, ShadowDropReason::Busy);
            continue;
        }
        run_copy(&repository, &metrics, job).await;
    }
}

async fn run_copy(repository: &ModelRepository, metrics: &Metrics, job: ShadowJob) {
    let traffic = metrics.traffic();
    let Ok(target) = repository.snapshot().resolve(&job.model, &job.target) else {
        return traffic.record_shadow_dropped(&job.model, ShadowDropReason::TargetUnavailable);
    };
    if target.batcher.queue_depth() > 0 {
        return traffic.record_shadow_dropped(&job.model, ShadowDropReason::Busy);
    }
    // The inputs are shared by reference count: keeping them for the log copies no bytes.
    let logged_inputs = job.log.as_ref().map(|_| job.inputs.clone());
    let request = target
        .signature(&job.signature)
        .ok()
        .and_then(|(signature, _)| {
            ValidRequest::new(
                target.backend.signatures(),
                signature,
                job.inputs,
                job.outputs,
                Vec::new(),
            )
            .ok()
        })
        .and_then(|request| {
            request
                .within_batch_limit(target.backend.max_batch_size())
                .ok()
        });
    traffic.record_shadow_sent(&job.model);
    let Some(request) = request else {
        return traffic.record_shadow_failed(&job.model);
    };
    let Ok(outputs) = target.batcher.submit(request).await else {
        return traffic.record_shadow_failed(&job.model);
    };
    let mut compared = true;
    for (name, primary) in &job.primary {
        let copy = outputs.iter().find(|(n, _)| n == name);
        match copy.and_then(|(_, copy)| max_abs_difference(primary, copy)) {
            Some(difference) => traffic.observe_shadow_difference(&job.model, name, difference),
            None => compared = false,
        }
    }
    if !compared {
        traffic.record_shadow_failed(&job.model);
    }
    if let (Some(log), Some(inputs)) = (job.log, logged_inputs) {
        log.write(&job.model, target.version, inputs, outputs);
    }
}
