//! The one error type of the client.

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The channel could not be set up (bad endpoint, nothing listening).
    #[error("cannot connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    /// The server answered with an error status; its code says which kind
    /// (NOT_FOUND, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...).
    #[error("the server refused the call: {}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    /// A tensor's declared type and shape do not match its data.
    #[error("invalid tensor: {0}")]
    Tensor(String),
    /// The server sent something this client cannot decode.
    #[error("unexpected response: {0}")]
    Response(String),
    /// A shared-memory region could not be created or was used out of bounds.
    #[error("shared memory: {0}")]
    SharedMemory(String),
}

impl ClientError {
    /// The gRPC status code, when the server refused the call.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            Self::Status(status) => Some(status.code()),
            _ => None,
        }
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;
