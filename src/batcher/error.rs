//! Why a batcher answers without outputs: a leaf every other batcher file may import, so that
//! none of them reaches back into the module root for its errors.

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
    /// `split_rows` would cut the request into more pieces than one request may make.
    #[error(transparent)]
    TooManyPieces(#[from] TooManyPieces),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// A request with so many rows that `split_rows` would cut it into more pieces than one
/// request may queue (see [`super::BatchPolicy::max_pieces`]): each piece costs the queue a
/// place and a step, so the client is told to send fewer rows instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "model '{model}' runs at most split_rows = {split_rows} rows at a time: a request of \
     {rows} rows would be cut into {pieces} pieces, more than the {max_pieces} one request may \
     make; send at most {max_rows} rows per request"
)]
pub struct TooManyPieces {
    pub model: String,
    pub rows: usize,
    pub split_rows: usize,
    pub pieces: usize,
    pub max_pieces: usize,
    /// `split_rows` times `max_pieces`: the most rows a request may have.
    pub max_rows: usize,
}

impl BatcherError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::QueueFull { .. } => ErrorKind::ResourceExhausted,
            Self::DeadlineExceeded { .. } => ErrorKind::DeadlineExceeded,
            Self::Stopped { .. } => ErrorKind::Unavailable,
            Self::TooManyPieces(_) => ErrorKind::InvalidArgument,
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
    #[error(
        "the pieces of a split request came back with shapes of output '{output}' that \
         disagree past dimension 0, so they cannot be joined"
    )]
    PiecesDisagree { output: String },
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
