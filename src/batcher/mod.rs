//! The dynamic batcher: one per loaded model version.
//!
//! ```text
//! BatcherHandle::enqueue ─try_send─> bounded channel ─> actor (task.rs)
//!                                                        │ BatchQueue (policy.rs): when to cut, what to drop
//!                                                        │ gather (gather.rs): merge inputs along dim 0
//!                                                        └ spawn_blocking: Backend::run, one batch in flight
//! reply <─ oneshot <─ scatter (gather.rs): split outputs by each request's rows
//! ```
//!
//! Callers validate a request against its signature first (`infer::check_inputs`) and resolve
//! its output list; the batcher trusts both and only checks what merging needs: that the
//! requests of one batch agree on everything but dimension 0, and that the outputs come back
//! with one row per input row.

mod gather;
mod handle;
mod policy;
mod priority;
mod settings;
mod task;
#[cfg(test)]
mod tests;

pub use gather::{batch_key, gather, scatter, BatchKey};
pub use handle::{BatcherHandle, Pending};
pub use policy::{BatchPolicy, BatchQueue, Next, Queued, Step};
pub use priority::Priority;
pub use settings::{BatchSettings, SettingsError, MAX_QUEUE_SIZE};
pub use task::{Batcher, Telemetry};

use tokio::time::Instant;

use crate::backend::{NamedTensor, OutputTarget};
use crate::tensor::DecodeError;

/// A request as the batcher takes it: validated against its signature by the caller.
#[derive(Debug, Clone)]
pub struct BatchRequest {
    /// Index into the backend's signatures.
    pub signature: usize,
    pub inputs: Vec<NamedTensor>,
    /// The outputs to return, in this order: the resolved list, not an empty "all" filter,
    /// so that equal requests compare equal and can share a batch.
    pub outputs: Vec<String>,
    /// When the client stops waiting. A request still queued at its deadline is answered
    /// DEADLINE_EXCEEDED instead of being run.
    pub deadline: Option<Instant>,
    /// Where the caller wants each output written (aligned with `outputs`; may be empty). A
    /// request with targets always runs alone.
    pub targets: Vec<OutputTarget>,
    /// High-priority requests may use the queue's reserve and run before default ones.
    pub priority: Priority,
}

/// Failures of merging, splitting or running a batch. All are server-side (INTERNAL): the
/// client sent nothing wrong, the model or its batching settings do not fit together.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BatchError {
    #[error(
        "output '{output}' has shape {shape:?} for a batch of {rows} rows; the model does not \
         keep dimension 0 as the batch dimension, so batching must be turned off for it"
    )]
    OutputNotBatched {
        output: String,
        shape: Vec<usize>,
        rows: usize,
    },
    #[error("the requests merged into one batch disagree on input '{input}'")]
    Incompatible { input: String },
    #[error("cannot build the merged tensor: {0}")]
    Tensor(#[from] DecodeError),
    #[error("the model has no signature number {0}")]
    UnknownSignature(usize),
    #[error("the backend panicked: {0}")]
    BackendPanicked(String),
    #[error("the batch was cancelled before it finished")]
    Cancelled,
    #[error("the batcher dropped the request without answering")]
    NoAnswer,
}
