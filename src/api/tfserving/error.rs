//! What fails in the TF Serving layer, one enum per concern: feeding `tf.Example`s to a
//! signature ([`ExampleError`]).
//!
//! Each is a mistake in what the client sent or asked the model for, so each becomes a bad
//! request ([`Error::InvalidArgument`]) in its own words. They sit at the bottom of this layer
//! (`crate::error` below it may not import the API), and a message's words live in one
//! `#[error]` each, so that the adapters build typed values instead of formatting messages.

use crate::error::Error;
use crate::tensor::{DataType, DecodeError};

/// Why examples cannot feed a signature.
#[derive(Debug, thiserror::Error)]
pub enum ExampleError {
    #[error(transparent)]
    Tensor(#[from] DecodeError),
    #[error(
        "the request has no input; send input.example_list or input.example_list_with_context"
    )]
    NoInput,
    #[error("the request holds no examples; send at least one")]
    NoExamples,
    #[error("example {example} has no feature '{feature}', which feeds the signature's input of that name (inputs: {expected})")]
    MissingFeature {
        example: usize,
        feature: String,
        expected: String,
    },
    #[error("feature '{feature}' of example {example} holds no value list")]
    EmptyFeature { example: usize, feature: String },
    #[error("feature '{feature}' of example {example} is a {got}, but input '{feature}' is {dtype}; {rule}")]
    WrongKind {
        example: usize,
        feature: String,
        got: &'static str,
        dtype: DataType,
        rule: &'static str,
    },
    #[error("input '{name}' has dtype {dtype}, which no tf.Example feature can feed ({rule})")]
    UnfeedableDtype {
        name: String,
        dtype: DataType,
        rule: &'static str,
    },
    #[error("feature '{feature}' holds {first} values in example 0 but {got} in example {example}; every example must give an input the same number of values")]
    RaggedFeature {
        feature: String,
        first: usize,
        example: usize,
        got: usize,
    },
    #[error("feature '{feature}' holds {count} values per example, but input '{feature}' has shape {shape} (one value per example)")]
    NotScalar {
        feature: String,
        count: usize,
        shape: String,
    },
    #[error("feature '{feature}' value {value} is out of range for input '{feature}' ({dtype})")]
    OutOfRange {
        feature: String,
        value: i64,
        dtype: DataType,
    },
    #[error("signature '{signature}' declares {method}, so it must take serialized tf.Examples as its one string input; its inputs are: {inputs}")]
    NotAnExampleSignature {
        signature: String,
        method: String,
        inputs: String,
    },
    #[error("input '{feature}' would need {bytes} bytes for {examples} examples, over the limit of {limit}")]
    TooLarge {
        feature: String,
        examples: usize,
        bytes: usize,
        limit: usize,
    },
}

impl From<ExampleError> for Error {
    fn from(err: ExampleError) -> Self {
        Error::invalid(err.to_string())
    }
}
