//! What is wrong with a TF Serving gRPC request's model spec, metadata fields or config.

use crate::error_kind::ErrorKind;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TfServingRequestError {
    #[error("the request has no model_spec")]
    NoModelSpec,
    #[error("the request names no model")]
    NoModelName,
    #[error("metadata_field is empty; ask for \"signature_def\"")]
    NoMetadataField,
    #[error("metadata field '{0}' is not supported; the supported field is \"signature_def\"")]
    UnsupportedMetadataField(String),
    #[error("the request has no model_config_list")]
    NoModelConfigList,
    #[error("custom_model_config is not supported; send a model_config_list")]
    CustomModelConfig,
    #[error(
        "the model_config_list is empty; refusing to unload every model (unload models \
         one by one through the repository API, or stop the server)"
    )]
    EmptyModelConfigList,
}

impl TfServingRequestError {
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}
