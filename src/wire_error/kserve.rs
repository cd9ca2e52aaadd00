//! What is wrong with a KServe v2 infer request (either transport), beyond its tensors' own
//! decoding: the envelope, where each input's data comes from, the requested outputs, the
//! parameters, and the shared-memory windows they name.

use crate::error_kind::ErrorKind;

/// The infer request's envelope and its inputs and outputs as requested.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InferRequestError {
    #[error("\"id\" must be a string")]
    IdNotString,
    #[error("the request needs an \"inputs\" array")]
    NoInputs,
    #[error("\"outputs\" must be an array")]
    OutputsNotArray,
    /// `what` is "input N" before the input's name is known.
    #[error("{what} must be a JSON object")]
    InputNotObject { what: String },
    #[error("{what}: shape must hold integers")]
    ShapeNotIntegers { what: String },
    #[error("{what}: \"shape\" must be an array")]
    ShapeNotArray { what: String },
    #[error("{what}: binary_data_size is too large")]
    BinarySizeTooLarge { what: String },
    #[error("{what}: binary_data_size must be a non-negative integer")]
    BinarySizeNotInteger { what: String },
    #[error("{what}: binary_data_size {size} runs past the end of the body's binary data")]
    BinaryPastEnd { what: String, size: usize },
    #[error(
        "{what} must carry its data in exactly one way: \"data\", binary_data_size, or shared memory (it uses {sources})"
    )]
    SeveralDataSources { what: String, sources: usize },
    #[error("{what} carries no data: give \"data\", binary_data_size, or shared memory")]
    NoData { what: String },
    #[error("each requested output must be a JSON object")]
    OutputNotObject,
    #[error("output '{0}': binary_data must be a boolean")]
    BinaryDataNotBoolean(String),
    #[error("output '{0}': classification must be a positive integer (the number of classes)")]
    ClassificationCount(String),
    #[error("output '{output}': classification needs numeric scores, the output is {datatype}")]
    ClassificationNotNumeric {
        output: String,
        datatype: &'static str,
    },
    // gRPC: where each input's data comes from.
    #[error("input '{0}' gives both contents and a shared-memory region")]
    ContentsAndSharedMemory(String),
    #[error("input '{0}' gives typed contents while the request uses raw_input_contents")]
    TypedAndRawContents(String),
    #[error("raw_input_contents has {0} entries, fewer than the inputs not in shared memory")]
    TooFewRawContents(usize),
    #[error(
        "input '{0}' has no data: give contents, raw_input_contents or a shared-memory region"
    )]
    NoContents(String),
    #[error("raw_input_contents has {entries} entries but {used} inputs take raw data")]
    UnusedRawContents { entries: usize, used: usize },
    /// The inline data decoded to another shape than the input declares.
    #[error("shape {declared:?} does not match the data's shape {actual:?}")]
    ShapeMismatch {
        declared: Vec<usize>,
        actual: Vec<usize>,
    },
    /// Context for an error that belongs to one input.
    #[error("input '{input}': {source}")]
    InInput {
        input: String,
        #[source]
        source: Box<InferRequestError>,
    },
}

impl InferRequestError {
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }

    /// Names the input this error belongs to.
    pub fn in_input(self, input: &str) -> Self {
        Self::InInput {
            input: input.to_owned(),
            source: Box::new(self),
        }
    }
}

/// KServe parameters (request, input, output and load parameters), whichever transport
/// carried them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    /// `what` is "request", "input 'x'" or "output 'y'".
    #[error("{what} parameters must be a JSON object")]
    NotObject { what: String },
    #[error("parameter {0} is not a usable number")]
    UnusableNumber(String),
    #[error("parameter {0} must be a boolean, number or string")]
    WrongJsonType(String),
    #[error("parameter {key} must not be negative, got {value}")]
    Negative { key: String, value: i64 },
    /// `got` is the value as the server read it.
    #[error("parameter {key} must be an integer, got {got}")]
    NotInteger { key: String, got: String },
    #[error("parameter {key} must be a boolean, got {got}")]
    NotBoolean { key: String, got: String },
    #[error("parameter shared_memory_region must be a string, got {0}")]
    RegionNotString(String),
    #[error("shared-memory tensor in region '{0}' needs parameter shared_memory_byte_size")]
    NoByteSize(String),
    #[error(
        "model '{model}': load parameters {overrides} are not supported: models load only from the \
         model directory, so 'config' and 'file:' overrides cannot be applied"
    )]
    LoadOverrides { model: String, overrides: String },
    /// `got` is the value as the server read it.
    #[error("parameter sequence_id must be an integer or a string, got {0}")]
    SequenceIdType(String),
    /// A request of a sequence (KServe's sequence extension) to a model without a sequence
    /// batcher, which would run it as if it stood alone.
    #[error(
        "model '{model}' is not stateful: parameter '{parameter}' is only for models with a \
         sequence batcher (sequence_batching), and no state is kept between this model's requests"
    )]
    NotStateful {
        model: String,
        parameter: &'static str,
    },
}

impl ParamError {
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}

/// A shared-memory window that a request names and that cannot serve it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShmRequestError {
    #[error("shape {0:?} is too large")]
    ShapeTooLarge(Vec<usize>),
    #[error(
        "shared_memory_byte_size is {byte_size} but shape {shape:?} of {datatype} needs {needed} bytes"
    )]
    ByteSizeMismatch {
        byte_size: u64,
        shape: Vec<usize>,
        datatype: &'static str,
        needed: usize,
    },
    /// The region is not registered (or not visible to this peer): the request is wrong,
    /// not the server, so this is a bad request rather than NOT_FOUND.
    #[error("{0}")]
    UnknownRegion(String),
    /// `reason` is the registry's own words for why the window does not fit.
    #[error("output '{output}': {reason}")]
    OutputWindow { output: String, reason: String },
    #[error(
        "output '{output}' needs {needed} bytes but its shared_memory_byte_size is {byte_size}"
    )]
    OutputTooSmall {
        output: String,
        needed: u64,
        byte_size: u64,
    },
    /// Context for an error that belongs to one input.
    #[error("input '{input}': {source}")]
    InInput {
        input: String,
        #[source]
        source: Box<ShmRequestError>,
    },
}

impl ShmRequestError {
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_wraps_the_message_and_keeps_the_kind() {
        let err = InferRequestError::ShapeMismatch {
            declared: vec![2],
            actual: vec![3],
        }
        .in_input("x");
        assert_eq!(
            err.to_string(),
            "input 'x': shape [2] does not match the data's shape [3]"
        );
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        let err = crate::error::Error::from(ParamError::Negative {
            key: "priority".into(),
            value: -1,
        });
        assert_eq!(
            err.to_string(),
            "parameter priority must not be negative, got -1"
        );
        assert_eq!(err.kind().table().http_status, 400);
    }
}
