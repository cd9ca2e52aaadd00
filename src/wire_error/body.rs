//! A REST request body as a whole: its JSON, its framing, and the small fields of the bodies
//! that carry no tensors (repository index, shared-memory registration).

use crate::error_kind::ErrorKind;

/// What is wrong with a REST body before any tensor is looked at.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BodyError {
    #[error("the request body must be a JSON object")]
    NotObject,
    #[error("the request body is not valid JSON: {0}")]
    NotJson(String),
    /// Valid JSON whose members have the wrong types for the envelope.
    #[error("the request body is malformed: {0}")]
    Malformed(String),
    #[error("Inference-Header-Content-Length must be a non-negative integer")]
    HeaderLengthInvalid,
    #[error("Inference-Header-Content-Length is {length} but the body has only {body} bytes")]
    HeaderLengthPastEnd { length: usize, body: usize },
    #[error(
        "the body has {0} bytes of binary tensor data that no input claims with binary_data_size"
    )]
    UnclaimedBinary(usize),
    /// `field` names the member, e.g. `"ready"`.
    #[error("\"{0}\" must be a boolean")]
    NotBoolean(&'static str),
    /// `what` says whose member it is ("register", "input 0", "requested output").
    #[error("{what}: \"{key}\" must be a string")]
    NotString { what: String, key: &'static str },
    #[error("{what}: \"{key}\" is missing")]
    Missing { what: String, key: &'static str },
    #[error("register: \"{0}\" must be a non-negative integer")]
    RegisterNotInteger(&'static str),
}

impl BodyError {
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}
