//! The failure classes both protocols distinguish. This sits at the bottom of the crate, so
//! that every layer's error enum can name its kind without importing the layers above; how a
//! kind is spelled on the wire is the protocols' business (`api::status`).

/// The failure classes both protocols distinguish. One row each in the table of `api::status`.
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
