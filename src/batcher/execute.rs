//! Running one batch on a blocking thread: gather, run, scatter, and what can fail there.

use std::time::{Duration, Instant};

use super::channel::Reply;
use super::gather::{gather, scatter};
use super::telemetry::Telemetry;
use super::{BatchError, BatcherError};
use crate::backend::{Backend, BackendError, NamedTensor, OutputTarget};
use crate::metrics::CopyStage;

/// Per-request outputs (or that request's own failure), in batch order, or why the whole batch
/// failed.
pub(super) type Outcome = Result<Vec<Result<Vec<NamedTensor>, Failure>>, Failure>;

pub(super) enum Failure {
    Backend(BackendError),
    Batch(BatchError),
}

impl Failure {
    /// One error per request of the failed batch; the errors are cheap to clone (shared
    /// messages), so each request gets its own copy.
    pub(super) fn to_error(&self) -> BatcherError {
        match self {
            Self::Batch(err) => BatcherError::Batch(err.clone()),
            Self::Backend(err) => BatcherError::Backend(err.clone()),
        }
    }
}

/// The answers to the `count` requests of a batch, in batch order.
pub(super) fn answers(outcome: Outcome, count: usize) -> Vec<Reply> {
    let failure = match outcome {
        Ok(outputs) if outputs.len() == count => {
            return outputs
                .into_iter()
                .map(|outputs| outputs.map_err(|failure| failure.to_error()))
                .collect();
        }
        Ok(_) => Failure::Batch(BatchError::NoAnswer),
        Err(failure) => failure,
    };
    (0..count).map(|_| Err(failure.to_error())).collect()
}

/// The answer to a request that ran alone.
pub(super) fn answer(outcome: Outcome) -> Reply {
    match outcome {
        Ok(mut outputs) if outputs.len() == 1 => outputs
            .pop()
            .unwrap_or(Err(Failure::Batch(BatchError::NoAnswer)))
            .map_err(|failure| failure.to_error()),
        Ok(_) => Err(BatcherError::Batch(BatchError::NoAnswer)),
        Err(failure) => Err(failure.to_error()),
    }
}

/// The error for a run whose runtime panicked with `payload`.
pub(super) fn panicked(payload: Box<dyn std::any::Any + Send>) -> BatchError {
    let message = payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    BatchError::BackendPanicked(message)
}

/// What one batch runs: its signature and outputs, and how its requests split.
pub(super) struct Run<'a> {
    pub(super) signature: usize,
    pub(super) outputs: &'a [String],
    /// Set only for a request that runs alone.
    pub(super) targets: &'a [OutputTarget],
    /// Rows per request as the policy counted them (for splitting outputs).
    pub(super) rows: &'a [usize],
    /// Rows along dimension 0 over all requests (for statistics).
    pub(super) inferences: u64,
}

/// Runs one batch: a lone request as it came (its tensors are passed on, not copied), a
/// merged one gathered, run and scattered. Times its three phases as Triton's statistics
/// split them: gathering the inputs, the runtime, and splitting the outputs (the first and
/// last are empty for a request that runs alone, and count as zero). `clock` holds when the batch started; each
/// phase ends where the next begins, so the clock is read once per phase, and once all are
/// done `clock` holds when the last ended (it is left behind when a phase fails).
pub(super) fn execute(
    backend: &dyn Backend,
    run: Run<'_>,
    mut requests: Vec<Vec<NamedTensor>>,
    telemetry: &Telemetry,
    clock: &mut Instant,
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
    // A merged batch keeps its requests (reference-counted tensors, not copies of their
    // bytes) so that, if the runtime fails it, each can run alone and fail alone.
    let mut alone = Vec::new();
    // A request that runs alone has no input or output phase to time: the clock is read
    // only around the runtime (two reads instead of four on the path of every small request).
    let lone = requests.len() == 1 && rows.len() == 1;
    let inputs = if requests.len() == 1 {
        requests.pop().unwrap_or_default()
    } else {
        alone.clone_from(&requests);
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
    let input_time = if lone { Duration::ZERO } else { lap(clock) };
    let merged = match backend.run_into(sig, inputs, outputs, targets) {
        Ok(merged) => merged,
        Err(err) if !alone.is_empty() => {
            tracing::debug!(error = %err, requests = alone.len(), "a merged batch failed; running its requests one by one");
            let answers = alone
                .into_iter()
                .map(|inputs| {
                    backend
                        .run_into(sig, inputs, outputs, &[])
                        .map_err(Failure::Backend)
                })
                .collect();
            lap(clock);
            return Ok(answers);
        }
        Err(err) => return Err(Failure::Backend(err)),
    };
    let infer_time = lap(clock);
    let split = if rows.len() == 1 {
        Ok(vec![Ok(merged)])
    } else {
        scatter(merged, rows)
            .map(|split| split.into_iter().map(Ok).collect())
            .map_err(Failure::Batch)
    };
    let output_time = if lone { Duration::ZERO } else { lap(clock) };
    stats.record_compute(inferences, input_time, infer_time, output_time);
    split
}

/// The time since `clock`, which moves on to now.
fn lap(clock: &mut Instant) -> Duration {
    let now = Instant::now();
    let took = now.saturating_duration_since(*clock);
    *clock = now;
    took
}
