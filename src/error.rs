//! The request-path error type, and how it becomes a gRPC status.
//!
//! Every layer below has its own error enum (`tensor::DecodeError`, `backend::BackendError`,
//! ...); they meet here. [`Error::kind`] picks the [`ErrorKind`], and the kind alone decides
//! the HTTP status, the gRPC code and the stable `error_type` label used in metrics (the table
//! is [`ErrorKind::table`], in `error_kind`).

use crate::backend::BackendError;
use crate::batcher::{BatchError, BatcherError, RequestError, TooManyPieces};
use crate::log_settings::LogSettingsError;
use crate::pipeline::PipelineError;
use crate::repository::{ConfineError, RepositoryError, ResidencyError};
use crate::request::MemoryRefused;
use crate::shm::ShmError;
use crate::tensor::DecodeError;
use crate::trace::TraceSettingsError;
use crate::version::VersionError;
use crate::wire_error::{
    BodyError, InferRequestError, ParamError, PredictBodyError, ShmRequestError,
    TfServingRequestError,
};

pub use crate::error_kind::ErrorKind;

/// Everything that can fail while answering a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidArgument(String),
    #[error(transparent)]
    Version(#[from] VersionError),
    #[error(transparent)]
    PredictBody(#[from] PredictBodyError),
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error(transparent)]
    InferRequest(#[from] InferRequestError),
    #[error(transparent)]
    Param(#[from] ParamError),
    #[error(transparent)]
    ShmRequest(#[from] ShmRequestError),
    #[error(transparent)]
    TfServingRequest(#[from] TfServingRequestError),
    /// The decoded request does not fit its signature.
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Shm(#[from] ShmError),
    #[error(transparent)]
    LogSettings(#[from] LogSettingsError),
    #[error(transparent)]
    TraceSettings(#[from] TraceSettingsError),
    #[error("{0}")]
    Unimplemented(String),
    #[error("{0}")]
    Internal(String),
    /// The model's batch queue is at its limit; the client should retry later.
    #[error("the queue of model '{model}' is full; retry later")]
    QueueFull { model: String },
    /// The request's deadline passed while it waited for its turn.
    #[error("the deadline passed before model '{model}' could run the request")]
    DeadlineExceeded { model: String },
    /// The model version's batcher has stopped (the version is being unloaded).
    #[error("model '{model}' is no longer accepting requests")]
    BatcherStopped { model: String },
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// `split_rows` would cut the request into more pieces than one request may make.
    #[error(transparent)]
    TooManyPieces(#[from] TooManyPieces),
    /// An input's decoded form would take more than is left of the request memory budget.
    #[error("input '{input}' would take {source}")]
    InputMemory {
        input: String,
        #[source]
        source: MemoryRefused,
    },
    /// What an output is made into after the run (the classes a KServe request asks for)
    /// would take more than is left of the request memory budget.
    #[error("output '{output}': the classes asked for would take {source}")]
    OutputMemory {
        output: String,
        #[source]
        source: MemoryRefused,
    },
    /// A model, version or signature the repository does not have, a name or path the model
    /// roots refuse, a version that could not be made resident, a model list or version label
    /// that does not hold together.
    #[error(transparent)]
    Repository(#[from] RepositoryError),
    /// A step of an ensemble failed: the step named, its own error kept (and its kind).
    #[error("ensemble '{ensemble}' step {number} (model '{model}'): {source}")]
    EnsembleStep {
        ensemble: String,
        number: usize,
        model: String,
        #[source]
        source: Box<Error>,
    },
    /// A step answered without a tensor the ensemble reads: its model's signature changed
    /// since the ensemble was checked, and the ensemble must be reloaded.
    #[error("ensemble '{ensemble}': {message}; reload the ensemble to check it again")]
    EnsembleStale { ensemble: String, message: String },
}

impl Error {
    /// An ensemble's failure in the request path's terms.
    pub fn from_pipeline(ensemble: &str, err: PipelineError<Error>) -> Self {
        match err {
            PipelineError::Step {
                number,
                model,
                error,
            } => Self::EnsembleStep {
                ensemble: ensemble.to_owned(),
                number,
                model,
                source: Box::new(error),
            },
            stale @ PipelineError::MissingOutput { .. } => Self::EnsembleStale {
                ensemble: ensemble.to_owned(),
                message: stale.to_string(),
            },
        }
    }
}

/// The repository's parts convert on their own, so that `?` works where a repository call
/// fails with only one of them.
impl From<ConfineError> for Error {
    fn from(err: ConfineError) -> Self {
        Self::Repository(err.into())
    }
}

impl From<ResidencyError> for Error {
    fn from(err: ResidencyError) -> Self {
        Self::Repository(err.into())
    }
}

/// The batcher's failures keep their own variants here, so that a match on the request-path
/// error sees every overload, deadline and drain refusal by name.
impl From<BatcherError> for Error {
    fn from(err: BatcherError) -> Self {
        match err {
            BatcherError::QueueFull { model } => Self::QueueFull { model },
            BatcherError::DeadlineExceeded { model } => Self::DeadlineExceeded { model },
            BatcherError::Stopped { model } => Self::BatcherStopped { model },
            BatcherError::TooManyPieces(err) => Self::TooManyPieces(err),
            BatcherError::Batch(err) => Self::Batch(err),
            BatcherError::Backend(err) => Self::Backend(err),
        }
    }
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            // TF Serving treats a bad signature name as a bad request, not a missing servable.
            Self::InvalidArgument(_) | Self::Decode(_) => ErrorKind::InvalidArgument,
            Self::Backend(err) => err.kind(),
            Self::Request(err) => err.kind(),
            Self::Version(_) | Self::TooManyPieces(_) => ErrorKind::InvalidArgument,
            Self::PredictBody(err) => err.kind(),
            Self::Body(err) => err.kind(),
            Self::InferRequest(err) => err.kind(),
            Self::Param(err) => err.kind(),
            Self::ShmRequest(err) => err.kind(),
            Self::TfServingRequest(err) => err.kind(),
            Self::Shm(err) => match err {
                ShmError::AlreadyExists(_) => ErrorKind::AlreadyExists,
                ShmError::NotFound(_) => ErrorKind::NotFound,
                ShmError::Disabled | ShmError::RemotePeer(_) => ErrorKind::PermissionDenied,
                ShmError::TooManyRegions(_)
                | ShmError::TooManyBytes { .. }
                | ShmError::NoDescriptors { .. }
                | ShmError::TooManyMapped(_) => ErrorKind::ResourceExhausted,
                ShmError::Guard(_) | ShmError::Descriptors(_) => ErrorKind::Internal,
                _ => ErrorKind::InvalidArgument,
            },
            Self::Repository(err) => err.kind(),
            Self::LogSettings(err) => err.kind(),
            Self::TraceSettings(err) => err.kind(),
            Self::Unimplemented(_) => ErrorKind::Unimplemented,
            Self::Internal(_) | Self::Batch(_) => ErrorKind::Internal,
            Self::QueueFull { .. } | Self::InputMemory { .. } | Self::OutputMemory { .. } => {
                ErrorKind::ResourceExhausted
            }
            Self::DeadlineExceeded { .. } => ErrorKind::DeadlineExceeded,
            Self::BatcherStopped { .. } => ErrorKind::Unavailable,
            Self::EnsembleStep { source, .. } => source.kind(),
            Self::EnsembleStale { .. } => ErrorKind::Internal,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
    }
}

/// Both gRPC services answer a failed call with the kind's code and the error's message.
impl From<Error> for tonic::Status {
    fn from(err: Error) -> Self {
        tonic::Status::new(err.kind().table().grpc_code, err.to_string())
    }
}

/// The repository's answers reach the gRPC services directly (model status, load, unload).
impl From<RepositoryError> for tonic::Status {
    fn from(err: RepositoryError) -> Self {
        Error::from(err).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batcher_failures_map_to_overload_deadline_and_unavailable() {
        let model = || "m".to_owned();
        let cases = [
            (
                Error::QueueFull { model: model() },
                429,
                "resource_exhausted",
            ),
            (
                Error::DeadlineExceeded { model: model() },
                504,
                "deadline_exceeded",
            ),
            (Error::BatcherStopped { model: model() }, 503, "unavailable"),
            (
                Error::Batch(BatchError::BackendPanicked("boom".into())),
                500,
                "internal",
            ),
        ];
        for (err, http, error_type) in cases {
            let row = err.kind().table();
            assert_eq!(row.http_status, http, "{err}");
            assert_eq!(row.error_type, error_type, "{err}");
        }
    }

    #[test]
    fn status_carries_the_message() {
        let status =
            tonic::Status::from(Error::from(RepositoryError::ModelNotFound("nope".into())));
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert!(status.message().contains("nope"));
    }
}
