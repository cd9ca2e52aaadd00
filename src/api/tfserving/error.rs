//! What fails in the TF Serving layer, one enum per concern: feeding `tf.Example`s to a
//! signature ([`ExampleError`]), answering a Classify, Regress or MultiInference
//! ([`TaskError`]), and reading a REST `:classify` / `:regress` body ([`ExampleBodyError`]).
//!
//! Each is a mistake in what the client sent or asked the model for, so each becomes a bad
//! request ([`Error::InvalidArgument`]) in its own words. They sit at the bottom of this layer
//! (`crate::error` below it may not import the API), and a message's words live in one
//! `#[error]` each, so that the adapters build typed values instead of formatting messages.

use std::fmt;

use super::methods::{CLASSIFY_METHOD, REGRESS_METHOD};
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

/// Why a Classify, Regress or MultiInference cannot be answered: the tasks a request asks
/// for, or a signature or its outputs that do not fit the operation.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("signature '{signature}' cannot classify: it has no output named \"classes\" or \"scores\" (its outputs are: {outputs})")]
    CannotClassify { signature: String, outputs: String },
    #[error("outputs \"scores\" ({scores} per example) and \"classes\" ({classes} per example) disagree on the number of classes")]
    ClassCountsDisagree { scores: usize, classes: usize },
    #[error("output \"classes\" has shape {shape:?}; for {rows} examples it must be [{rows}] or [{rows}, k]")]
    LabelShape { shape: Vec<usize>, rows: usize },
    #[error("output \"classes\" has dtype {0}; labels must be strings or integers")]
    LabelDtype(DataType),
    #[error("signature '{signature}' cannot regress: it has {count} outputs and none is named \"outputs\" or \"scores\" (its outputs are: {outputs})")]
    CannotRegress {
        signature: String,
        count: usize,
        outputs: String,
    },
    #[error("the model returned no output to regress on")]
    NoRegressionOutput,
    #[error(
        "output '{output}' holds {per_row} values per example; a regression needs exactly one"
    )]
    NotOneValue { output: String, per_row: usize },
    #[error("output '{output}' has shape {shape:?}; for {rows} examples it must be [{rows}] or [{rows}, k]")]
    RowShape {
        output: String,
        shape: Vec<usize>,
        rows: usize,
    },
    #[error("output '{output}' has dtype {dtype}; scores and regression values must be float32 or float64")]
    ValueDtype { output: String, dtype: DataType },
    #[error("the request has no tasks")]
    NoTasks,
    #[error("a task has no model_spec")]
    NoTaskSpec,
    #[error("every task must name the same model; got '{first}' and '{other}'")]
    DifferentModels { first: String, other: String },
    #[error("signature '{signature}' is asked for {method} by more than one task")]
    RepeatedTask { signature: String, method: String },
    #[error(
        "task method_name '{0}' is not supported; use \"{classify}\" or \"{regress}\"",
        classify = CLASSIFY_METHOD,
        regress = REGRESS_METHOD
    )]
    UnsupportedMethod(String),
}

impl From<TaskError> for Error {
    fn from(err: TaskError) -> Self {
        Error::invalid(err.to_string())
    }
}

/// What is wrong with a REST `:classify` / `:regress` body, beyond its examples' own rules.
#[derive(Debug, thiserror::Error)]
pub enum ExampleBodyError {
    #[error("the request body is not valid JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("the request body must be a JSON object")]
    NotObject,
    #[error("\"signature_name\" must be a string")]
    SignatureNameNotString,
    #[error("\"context\" must be a JSON object of features")]
    ContextNotObject,
    #[error("example {0} must be a JSON object of features")]
    ExampleNotObject(usize),
    #[error("\"examples\" must be a JSON array")]
    ExamplesNotArray,
    #[error("the request has no \"examples\"")]
    NoExamples,
    #[error("feature '{name}' of {owner}: {source}")]
    Feature {
        name: String,
        owner: FeatureOwner,
        #[source]
        source: FeatureValueError,
    },
    #[error(transparent)]
    Examples(#[from] ExampleError),
}

impl From<ExampleBodyError> for Error {
    fn from(err: ExampleBodyError) -> Self {
        Error::invalid(err.to_string())
    }
}

/// Where a REST body's feature sits: in the shared context or in one example.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureOwner {
    Context,
    Example(usize),
}

impl fmt::Display for FeatureOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Context => f.write_str("context"),
            Self::Example(i) => write!(f, "example {i}"),
        }
    }
}

/// Why a feature's JSON value makes no feature list.
#[derive(Debug, thiserror::Error)]
pub enum FeatureValueError {
    #[error("an empty list has no kind; give at least one value")]
    EmptyList,
    #[error("a list mixes numbers with other values")]
    MixedNumbers,
    #[error("a list mixes strings with other values")]
    MixedStrings,
    #[error("a bytes value is a string or {{\"b64\": \"...\"}}")]
    NotBytes,
    #[error("invalid base64 in \"b64\": {0}")]
    Base64(#[source] base64::DecodeError),
    #[error("values must be numbers, strings or {{\"b64\": ...}} objects")]
    NotFeatureValue,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clients and tests read these words; they are the ones the adapters used to format.
    #[test]
    fn messages_keep_their_words() {
        let cases: [(Box<dyn std::error::Error>, &str); 7] = [
            (
                Box::new(TaskError::UnsupportedMethod("m".into())),
                "task method_name 'm' is not supported; use \"tensorflow/serving/classify\" or \"tensorflow/serving/regress\"",
            ),
            (
                Box::new(TaskError::RowShape {
                    output: "y".into(),
                    shape: vec![2, 3, 4],
                    rows: 2,
                }),
                "output 'y' has shape [2, 3, 4]; for 2 examples it must be [2] or [2, k]",
            ),
            (
                Box::new(TaskError::LabelDtype(DataType::F32)),
                "output \"classes\" has dtype float32; labels must be strings or integers",
            ),
            (
                Box::new(TaskError::DifferentModels {
                    first: "a".into(),
                    other: "b".into(),
                }),
                "every task must name the same model; got 'a' and 'b'",
            ),
            (
                Box::new(ExampleBodyError::Feature {
                    name: "x".into(),
                    owner: FeatureOwner::Example(3),
                    source: FeatureValueError::NotBytes,
                }),
                "feature 'x' of example 3: a bytes value is a string or {\"b64\": \"...\"}",
            ),
            (
                Box::new(ExampleBodyError::Feature {
                    name: "c".into(),
                    owner: FeatureOwner::Context,
                    source: FeatureValueError::NotFeatureValue,
                }),
                "feature 'c' of context: values must be numbers, strings or {\"b64\": ...} objects",
            ),
            (
                Box::new(ExampleBodyError::ExampleNotObject(1)),
                "example 1 must be a JSON object of features",
            ),
        ];
        for (err, message) in cases {
            assert_eq!(err.to_string(), message);
        }
    }

    #[test]
    fn every_concern_is_a_bad_request() {
        let errors = [
            Error::from(TaskError::NoTasks),
            Error::from(ExampleBodyError::NoExamples),
            Error::from(ExampleError::NoExamples),
        ];
        for err in errors {
            assert_eq!(
                err.kind(),
                crate::error_kind::ErrorKind::InvalidArgument,
                "{err}"
            );
        }
    }
}
