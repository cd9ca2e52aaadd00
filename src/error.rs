//! The request-path error type and the one table that maps it onto both wire protocols.
//!
//! Every layer below has its own error enum (`tensor::DecodeError`, `backend::BackendError`,
//! ...); they meet here. [`Error::kind`] picks the [`ErrorKind`], and the kind alone decides
//! the HTTP status, the gRPC code and the stable `error_type` label used in metrics.

use crate::backend::{BackendError, Signature};
use crate::batcher::BatchError;
use crate::repository::ConfineError;
use crate::shm::ShmError;
use crate::tensor::DecodeError;

/// Everything that can fail while answering a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("model '{0}' not found")]
    ModelNotFound(String),
    #[error("version {version} of model '{model}' is not available")]
    VersionNotFound { model: String, version: u64 },
    #[error("model '{model}' has no available version{}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    NoAvailableVersion {
        model: String,
        reason: Option<String>,
    },
    #[error("model '{model}' has no signature '{signature}' (it has: {available})")]
    SignatureNotFound {
        model: String,
        signature: String,
        available: String,
    },
    #[error("unknown input '{name}'; the signature's inputs are: {expected}")]
    UnknownInput { name: String, expected: String },
    #[error("missing input '{name}'; the signature's inputs are: {expected}")]
    MissingInput { name: String, expected: String },
    #[error("{0}")]
    InvalidArgument(String),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// A model name or path the admin APIs refuse.
    #[error(transparent)]
    Confine(#[from] ConfineError),
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
}

/// The failure classes both protocols distinguish. One row each in [`ErrorKind::table`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    InvalidArgument,
    AlreadyExists,
    /// No credentials, or credentials the server does not know.
    Unauthenticated,
    PermissionDenied,
    Unavailable,
    ResourceExhausted,
    DeadlineExceeded,
    Unimplemented,
    Internal,
}

/// One row of the mapping table.
pub struct ErrorRow {
    pub http_status: u16,
    pub grpc_code: tonic::Code,
    /// Stable, lower-case label: part of the API and of metric label values.
    pub error_type: &'static str,
}

impl ErrorKind {
    /// Every kind, for reading the table backwards (from a status to its kind).
    pub const ALL: [ErrorKind; 10] = [
        Self::NotFound,
        Self::InvalidArgument,
        Self::AlreadyExists,
        Self::Unauthenticated,
        Self::PermissionDenied,
        Self::Unavailable,
        Self::ResourceExhausted,
        Self::DeadlineExceeded,
        Self::Unimplemented,
        Self::Internal,
    ];

    /// The single source of truth for status codes.
    pub const fn table(self) -> ErrorRow {
        use tonic::Code;
        let (http_status, grpc_code, error_type) = match self {
            Self::NotFound => (404, Code::NotFound, "not_found"),
            Self::InvalidArgument => (400, Code::InvalidArgument, "invalid_argument"),
            Self::AlreadyExists => (409, Code::AlreadyExists, "already_exists"),
            Self::Unauthenticated => (401, Code::Unauthenticated, "unauthenticated"),
            Self::PermissionDenied => (403, Code::PermissionDenied, "permission_denied"),
            Self::Unavailable => (503, Code::Unavailable, "unavailable"),
            Self::ResourceExhausted => (429, Code::ResourceExhausted, "resource_exhausted"),
            Self::DeadlineExceeded => (504, Code::DeadlineExceeded, "deadline_exceeded"),
            Self::Unimplemented => (501, Code::Unimplemented, "unimplemented"),
            Self::Internal => (500, Code::Internal, "internal"),
        };
        ErrorRow {
            http_status,
            grpc_code,
            error_type,
        }
    }
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::ModelNotFound(_)
            | Self::VersionNotFound { .. }
            | Self::NoAvailableVersion { .. } => ErrorKind::NotFound,
            // TF Serving treats a bad signature name as a bad request, not a missing servable.
            Self::SignatureNotFound { .. }
            | Self::UnknownInput { .. }
            | Self::MissingInput { .. }
            | Self::InvalidArgument(_)
            | Self::Decode(_) => ErrorKind::InvalidArgument,
            Self::Backend(err) => err.kind(),
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
            Self::Confine(ConfineError::OutsideRoots(_)) => ErrorKind::PermissionDenied,
            Self::Confine(_) => ErrorKind::InvalidArgument,
            Self::Unimplemented(_) => ErrorKind::Unimplemented,
            Self::Internal(_) | Self::Batch(_) => ErrorKind::Internal,
            Self::QueueFull { .. } => ErrorKind::ResourceExhausted,
            Self::DeadlineExceeded { .. } => ErrorKind::DeadlineExceeded,
            Self::BatcherStopped { .. } => ErrorKind::Unavailable,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
    }

    pub fn unknown_input(signature: &Signature, name: &str) -> Self {
        Self::UnknownInput {
            name: name.to_owned(),
            expected: signature.input_names(),
        }
    }

    pub fn missing_input(signature: &Signature, name: &str) -> Self {
        Self::MissingInput {
            name: name.to_owned(),
            expected: signature.input_names(),
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(err: Error) -> Self {
        tonic::Status::new(err.kind().table().grpc_code, err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_to_matching_http_and_grpc_codes() {
        let pairs = [
            (ErrorKind::NotFound, 404, tonic::Code::NotFound),
            (
                ErrorKind::InvalidArgument,
                400,
                tonic::Code::InvalidArgument,
            ),
            (
                ErrorKind::Unauthenticated,
                401,
                tonic::Code::Unauthenticated,
            ),
            (
                ErrorKind::PermissionDenied,
                403,
                tonic::Code::PermissionDenied,
            ),
            (ErrorKind::Unavailable, 503, tonic::Code::Unavailable),
            (
                ErrorKind::ResourceExhausted,
                429,
                tonic::Code::ResourceExhausted,
            ),
            (
                ErrorKind::DeadlineExceeded,
                504,
                tonic::Code::DeadlineExceeded,
            ),
            (ErrorKind::Unimplemented, 501, tonic::Code::Unimplemented),
            (ErrorKind::Internal, 500, tonic::Code::Internal),
        ];
        for (kind, http, grpc) in pairs {
            let row = kind.table();
            assert_eq!(row.http_status, http, "{kind:?}");
            assert_eq!(row.grpc_code, grpc, "{kind:?}");
        }
    }

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
        let status = tonic::Status::from(Error::ModelNotFound("nope".into()));
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert!(status.message().contains("nope"));
    }
}
