//! The dynamic batcher: one per loaded model version.
//!
//! ```text
//! BatcherHandle::enqueue ─try_send─> bounded channel ─> actor (task.rs)
//!                                                        │ BatchQueue (policy.rs): when to cut, what to drop
//!                                                        │ gather (gather.rs): merge inputs along dim 0
//!                                                        └ spawn_blocking (long runs: -> the instance's
//!                                                          own thread, instance_threads.rs): Backend::run
//! reply <─ oneshot <─ scatter (gather.rs): split outputs by each request's rows
//! ```
//!
//! A fast model's request that finds the queue empty and an instance free skips all of this
//! and runs on the caller's thread (handle.rs says when, instances.rs how "fast" is measured).
//!
//! A batcher takes only a [`ValidRequest`], whose constructor checks it against its signature
//! and resolves its output list; the batcher trusts both and only checks what merging needs:
//! that the requests of one batch agree on everything but dimension 0, and that the outputs
//! come back with one row per input row.

mod channel;
mod execute;
mod gather;
mod handle;
#[cfg(test)]
mod inline_tests;
mod instance_threads;
mod instances;
mod policy;
mod priority;
mod request;
mod runner;
mod settings;
mod task;
#[cfg(test)]
mod tests;

pub use gather::{batch_key, gather, scatter, BatchKey};
pub use handle::{BatcherHandle, Pending};
pub use policy::{BatchPolicy, BatchQueue, Next, Queued, Step};
pub use priority::Priority;
pub use request::{RequestError, ValidRequest};
pub use runner::Execution;
pub use settings::{BatchSettings, SettingsError, MAX_QUEUE_SIZE};
pub use task::{Batcher, Telemetry};

use crate::backend::BackendError;
use crate::error_kind::ErrorKind;
use crate::tensor::DecodeError;

/// Why a batcher answered a request without outputs. The batcher sits below the request-path
/// error type, which takes these over unchanged.
#[derive(Debug, thiserror::Error)]
pub enum BatcherError {
    /// The version's queue is at its limit; the client should retry later.
    #[error("the queue of model '{model}' is full; retry later")]
    QueueFull { model: String },
    /// The request's deadline passed while it waited for its turn.
    #[error("the deadline passed before model '{model}' could run the request")]
    DeadlineExceeded { model: String },
    /// The batcher has stopped (the version is being unloaded).
    #[error("model '{model}' is no longer accepting requests")]
    Stopped { model: String },
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl BatcherError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::QueueFull { .. } => ErrorKind::ResourceExhausted,
            Self::DeadlineExceeded { .. } => ErrorKind::DeadlineExceeded,
            Self::Stopped { .. } => ErrorKind::Unavailable,
            Self::Batch(_) => ErrorKind::Internal,
            Self::Backend(err) => err.kind(),
        }
    }
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
