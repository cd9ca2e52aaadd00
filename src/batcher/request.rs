//! [`ValidRequest`]: a request checked against its signature, the only thing a batcher takes.
//!
//! The checks live in the constructor, so a value of the type is the proof that they ran:
//! nothing downstream re-checks, and nothing can reach a batcher without them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Priority;
use crate::backend::{NamedTensor, OutputTarget, Signature};
use crate::error_kind::ErrorKind;
use crate::tensor::DataType;
use crate::trace::TraceHandle;

/// Why a decoded request does not fit the signature it calls.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    /// The caller picked a signature by an index the backend does not have: a server bug.
    #[error("the model has no signature number {0}")]
    UnknownSignature(usize),
    #[error("unknown input '{name}'; the signature's inputs are: {expected}")]
    UnknownInput { name: String, expected: String },
    #[error("missing input '{name}'; the signature's inputs are: {expected}")]
    MissingInput { name: String, expected: String },
    #[error("input '{0}' is given twice")]
    DuplicateInput(String),
    #[error("input '{name}' must have dtype {expected}, got {got}")]
    WrongDtype {
        name: String,
        expected: DataType,
        got: DataType,
    },
    #[error("input '{name}' has shape {shape:?}, the signature expects {expected} (-1: any size)")]
    WrongShape {
        name: String,
        shape: Vec<usize>,
        expected: String,
    },
    #[error(
        "unknown output '{name}' in the output filter; the signature's outputs are: {expected}"
    )]
    UnknownOutput { name: String, expected: String },
    #[error("output '{0}' is requested twice")]
    DuplicateOutput(String),
    #[error(
        "input '{input}' carries a batch of {batch}, more than the model's max_batch_size of {max}"
    )]
    BatchTooLarge {
        input: String,
        batch: usize,
        max: usize,
    },
    /// Output targets are given per requested output; a server bug otherwise.
    #[error("{targets} output targets for {outputs} requested outputs")]
    MisalignedTargets { targets: usize, outputs: usize },
}

impl RequestError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::UnknownSignature(_) | Self::MisalignedTargets { .. } => ErrorKind::Internal,
            _ => ErrorKind::InvalidArgument,
        }
    }
}

/// A request for one signature of one model version whose inputs and outputs have been
/// checked against that signature. Build it with [`ValidRequest::new`].
#[derive(Debug, Clone)]
pub struct ValidRequest {
    /// Index into the backend's signatures.
    signature: usize,
    inputs: Vec<NamedTensor>,
    /// The outputs to return, in this order: the resolved list, not an empty "all" filter,
    /// so that equal requests compare equal and can share a batch.
    outputs: Vec<String>,
    /// Where the caller wants each output written (aligned with `outputs`, or empty). A
    /// request with targets always runs alone.
    targets: Vec<OutputTarget>,
    /// When the client stops waiting. A request still queued at its deadline is answered
    /// DEADLINE_EXCEEDED instead of being run.
    deadline: Option<Instant>,
    /// High-priority requests may use the queue's reserve and run before default ones.
    priority: Priority,
    /// Where the batcher records the request's queue wait and batch run, if it is traced.
    trace: Option<TraceHandle>,
    /// Where the batcher adds the time of the request's run, if the caller counts it.
    run_time: Option<Arc<RunTime>>,
}

/// The parts of a [`ValidRequest`], for the batcher to take apart.
pub(super) struct Parts {
    pub signature: usize,
    pub inputs: Vec<NamedTensor>,
    pub outputs: Vec<String>,
    pub targets: Vec<OutputTarget>,
    pub deadline: Option<Instant>,
    pub priority: Priority,
    pub trace: Option<TraceHandle>,
    pub run_time: Option<Arc<RunTime>>,
}

/// The time a caller's requests spent running (their batches' runs, each counted whole for
/// every request in it), summed as they finish: an ensemble hands one to all its steps and
/// reports the sum as its own compute time, as Triton counts an ensemble's.
#[derive(Debug, Default)]
pub struct RunTime {
    nanos: AtomicU64,
}

impl RunTime {
    pub fn add(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
}

impl ValidRequest {
    /// Checks `inputs` and `output_filter` (empty: every output) against signature number
    /// `signature` of `signatures`: every input present once, none unknown, dtypes and shapes
    /// compatible; every requested output known and named once; `targets` one per requested
    /// output or none.
    pub fn new(
        signatures: &[Signature],
        signature: usize,
        inputs: Vec<NamedTensor>,
        output_filter: Vec<String>,
        targets: Vec<OutputTarget>,
    ) -> Result<Self, RequestError> {
        let sig = signatures
            .get(signature)
            .ok_or(RequestError::UnknownSignature(signature))?;
        check_inputs(sig, &inputs)?;
        if !targets.is_empty() && targets.len() != output_filter.len() {
            return Err(RequestError::MisalignedTargets {
                targets: targets.len(),
                outputs: output_filter.len(),
            });
        }
        let outputs = select_outputs(sig, output_filter)?;
        Ok(Self {
            signature,
            inputs,
            outputs,
            targets,
            deadline: None,
            priority: Priority::Default,
            trace: None,
            run_time: None,
        })
    }

    /// The same request, refused if an input's batch (first dimension) is larger than `max`,
    /// the model's `max_batch_size` (`Some(0)` or `None`: nothing to check).
    pub fn within_batch_limit(self, max: Option<usize>) -> Result<Self, RequestError> {
        let Some(max) = max.filter(|&max| max > 0) else {
            return Ok(self);
        };
        for (name, tensor) in &self.inputs {
            match tensor.shape().first() {
                Some(&batch) if batch > max => {
                    return Err(RequestError::BatchTooLarge {
                        input: name.clone(),
                        batch,
                        max,
                    })
                }
                _ => {}
            }
        }
        Ok(self)
    }

    /// The same request, dropped unrun once `deadline` has passed.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    #[must_use]
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// The same request, its queue wait and batch run recorded in `trace`.
    #[must_use]
    pub fn with_trace(mut self, trace: Option<TraceHandle>) -> Self {
        self.trace = trace;
        self
    }

    pub fn trace(&self) -> Option<&TraceHandle> {
        self.trace.as_ref()
    }

    /// The same request, the time of its run added to `run_time`.
    #[must_use]
    pub fn with_run_time(mut self, run_time: Option<Arc<RunTime>>) -> Self {
        self.run_time = run_time;
        self
    }

    pub fn run_time(&self) -> Option<&Arc<RunTime>> {
        self.run_time.as_ref()
    }

    pub fn signature(&self) -> usize {
        self.signature
    }

    pub fn inputs(&self) -> &[NamedTensor] {
        &self.inputs
    }

    /// The outputs the answer holds, in its order.
    pub fn outputs(&self) -> &[String] {
        &self.outputs
    }

    /// Where the caller wants each output written (aligned with [`Self::outputs`], or empty).
    pub fn targets(&self) -> &[OutputTarget] {
        &self.targets
    }

    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// Inferences in Triton's sense: rows along dimension 0 (1 for a scalar input).
    pub fn inferences(&self) -> u64 {
        super::telemetry::inferences(&self.inputs)
    }

    /// The same request over `inputs`, copies of its own inputs (same names, dtypes, shapes
    /// and elements: the response cache's copy, which the run must read so that its answer
    /// belongs to the key), returning its outputs in buffers of the runtime's: an answer to
    /// be kept must not live in a client's shared memory, which the client may rewrite. The
    /// caller copies the outputs into their targets itself.
    #[must_use]
    pub fn over_copied_inputs(mut self, inputs: Vec<NamedTensor>) -> Self {
        self.inputs = inputs;
        self.targets = Vec::new();
        self
    }

    /// The inputs, for running the request directly on a backend (warmup replay).
    pub fn into_inputs(self) -> Vec<NamedTensor> {
        self.inputs
    }

    pub(super) fn into_parts(self) -> Parts {
        Parts {
            signature: self.signature,
            inputs: self.inputs,
            outputs: self.outputs,
            targets: self.targets,
            deadline: self.deadline,
            priority: self.priority,
            trace: self.trace,
            run_time: self.run_time,
        }
    }
}

fn check_inputs(sig: &Signature, inputs: &[NamedTensor]) -> Result<(), RequestError> {
    let mut seen = Seen::new(sig.inputs.len());
    for (name, tensor) in inputs {
        let Some((index, spec)) = sig
            .inputs
            .iter()
            .enumerate()
            .find(|(_, spec)| spec.name == *name)
        else {
            return Err(RequestError::UnknownInput {
                name: name.clone(),
                expected: sig.input_names(),
            });
        };
        if !seen.insert(index) {
            return Err(RequestError::DuplicateInput(name.clone()));
        }
        if tensor.dtype() != spec.dtype {
            return Err(RequestError::WrongDtype {
                name: name.clone(),
                expected: spec.dtype,
                got: tensor.dtype(),
            });
        }
        if !spec.accepts_shape(tensor.shape()) {
            return Err(RequestError::WrongShape {
                name: name.clone(),
                shape: tensor.shape().to_vec(),
                expected: spec.shape_text(),
            });
        }
    }
    if let Some((_, missing)) = sig
        .inputs
        .iter()
        .enumerate()
        .find(|(index, _)| !seen.contains(*index))
    {
        return Err(RequestError::MissingInput {
            name: missing.name.clone(),
            expected: sig.input_names(),
        });
    }
    Ok(())
}

fn select_outputs(sig: &Signature, filter: Vec<String>) -> Result<Vec<String>, RequestError> {
    if filter.is_empty() {
        return Ok(sig.outputs.iter().map(|spec| spec.name.clone()).collect());
    }
    let mut seen = Seen::new(sig.outputs.len());
    for name in &filter {
        let Some(index) = sig.outputs.iter().position(|spec| spec.name == *name) else {
            return Err(RequestError::UnknownOutput {
                name: name.clone(),
                expected: sig.output_names(),
            });
        };
        if !seen.insert(index) {
            return Err(RequestError::DuplicateOutput(name.clone()));
        }
    }
    Ok(filter)
}

/// Which of a signature's inputs (or outputs) a request named, by index: a bit mask for the
/// usual few, so that checking a request allocates nothing; a list past 64.
struct Seen {
    mask: u64,
    many: Vec<bool>,
}

impl Seen {
    fn new(count: usize) -> Self {
        Self {
            mask: 0,
            many: if count > 64 {
                vec![false; count]
            } else {
                Vec::new()
            },
        }
    }

    /// Marks `index` (below the count given to `new`); false when it was marked already.
    fn insert(&mut self, index: usize) -> bool {
        match self.many.get_mut(index) {
            Some(seen) => !std::mem::replace(seen, true),
            None => {
                let bit = 1u64.checked_shl(index as u32).unwrap_or(0);
                let fresh = self.mask & bit == 0;
                self.mask |= bit;
                fresh
            }
        }
    }

    fn contains(&self, index: usize) -> bool {
        match self.many.get(index) {
            Some(seen) => *seen,
            None => self.mask & 1u64.checked_shl(index as u32).unwrap_or(0) != 0,
        }
    }
}

#[cfg(test)]
mod tests;
