//! Mistakes in what a client sent, grouped by concern, one enum each. They sit below the
//! request-path [`crate::error::Error`], which takes them over as bad requests, so that the
//! protocol adapters above build typed values instead of formatting messages.

mod body;
mod kserve;
mod model_spec;

pub use body::BodyError;
pub use kserve::{InferRequestError, ParamError, ShmRequestError};
pub use model_spec::TfServingRequestError;

use crate::error_kind::ErrorKind;

/// What is wrong with a TF Serving REST `:predict` body, beyond its tensors' own decoding.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PredictBodyError {
    #[error("the request body is not valid JSON: {0}")]
    NotJson(String),
    #[error("the request body must be a JSON object")]
    NotObject,
    #[error("\"signature_name\" must be a string")]
    SignatureNameNotString,
    #[error("the request has both \"instances\" and \"inputs\"; use one of them")]
    BothLayouts,
    #[error("\"instances\" is empty; give at least one instance")]
    NoInstances,
    #[error("\"instances\" must be a JSON array")]
    InstancesNotArray,
    #[error("the request has neither \"instances\" (row format) nor \"inputs\" (columnar format)")]
    NoLayout,
    #[error(
        "the signature has {count} inputs ({names}); each instance must be an object naming them"
    )]
    InstancesNotNamed { count: usize, names: String },
    #[error("instances mix named objects and bare values")]
    MixedInstances,
    #[error("instance {0} is not an object, unlike instance 0")]
    InstanceNotObject(usize),
    #[error("instance {0} has different keys from instance 0")]
    DifferentKeys(usize),
    #[error("instance {instance} lacks input '{input}', which instance 0 has")]
    MissingInInstance { instance: usize, input: String },
    #[error(
        "the signature has {count} inputs ({names}); \"inputs\" must be an object naming them"
    )]
    InputsNotNamed { count: usize, names: String },
    /// The row format needs every output to share dimension 0.
    #[error(
        "output '{output}' has shape {shape:?}, which does not share the batch size {batch} of \
         the other outputs; use the columnar \"inputs\" format"
    )]
    RaggedOutputs {
        output: String,
        shape: Vec<usize>,
        batch: usize,
    },
    #[error("unknown verb ':{0}'; the REST API supports :predict, :classify and :regress")]
    UnknownVerb(String),
}

impl PredictBodyError {
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_to_fix() {
        let unnamed = PredictBodyError::InstancesNotNamed {
            count: 2,
            names: "a, b".into(),
        };
        assert_eq!(
            unnamed.to_string(),
            "the signature has 2 inputs (a, b); each instance must be an object naming them"
        );
        let ragged = PredictBodyError::RaggedOutputs {
            output: "y".into(),
            shape: vec![3],
            batch: 2,
        };
        assert!(ragged
            .to_string()
            .contains("use the columnar \"inputs\" format"));
        assert_eq!(ragged.kind(), ErrorKind::InvalidArgument);
    }
}
