//! What the TF Serving gRPC operations share: the service state, how a request's model spec
//! selects a version, and the spec an answer carries. A leaf under the services, so that
//! the operations never import the dispatcher that routes to them.

use std::sync::Arc;

use crate::error::Error;
use crate::infer::{InferService, ModelTarget};
use crate::proto::tensorflow::serving::{model_spec::VersionChoice, ModelSpec};
use crate::repository::{LoadedModel, VersionSelector};
use crate::request::RequestContext;
use crate::tensor::tensor_proto::ResponseEncoding;
use crate::wire_error::TfServingRequestError;

/// Both TF Serving gRPC services over one [`InferService`].
#[derive(Clone)]
pub struct TfServingGrpc {
    pub(super) infer: Arc<InferService>,
    /// Typed fields (TF Serving's default) or `tensor_content` in Predict answers.
    pub(super) predict_response: ResponseEncoding,
}

impl TfServingGrpc {
    pub fn new(infer: Arc<InferService>, predict_response: ResponseEncoding) -> Self {
        Self {
            infer,
            predict_response,
        }
    }

    /// The version `spec` names, loaded first under a memory budget (see
    /// [`InferService::resolve_loading`]).
    pub(super) async fn resolve(
        &self,
        spec: Option<&ModelSpec>,
        context: Option<&RequestContext>,
    ) -> Result<Arc<LoadedModel>, Error> {
        let spec = spec.ok_or(TfServingRequestError::NoModelSpec)?;
        self.infer
            .resolve_loading(&spec.name, spec_selector(spec)?, context)
            .await
    }
}

pub(super) fn spec_selector(spec: &ModelSpec) -> Result<VersionSelector, Error> {
    let selector = match &spec.version_choice {
        Some(VersionChoice::Version(v)) => VersionSelector::from_tfserving(Some(*v), None),
        Some(VersionChoice::VersionLabel(label)) => {
            VersionSelector::from_tfserving(None, Some(label))
        }
        None => VersionSelector::from_tfserving(None, None),
    };
    Ok(selector?)
}

/// The model a request's spec names, before decoding: no spec is a bad request.
pub(super) fn spec_target(spec: Option<&ModelSpec>) -> Result<ModelTarget<'_>, Error> {
    let spec = spec.ok_or(TfServingRequestError::NoModelSpec)?;
    Ok(ModelTarget {
        model: &spec.name,
        version: spec_selector(spec)?,
        signature: &spec.signature_name,
    })
}

/// The `model_spec` a response carries: the version that actually answered.
pub(super) fn answered_spec(model: &LoadedModel, signature: &str) -> ModelSpec {
    ModelSpec {
        name: model.name.to_string(),
        signature_name: signature.to_owned(),
        version_choice: Some(VersionChoice::Version(model.version as i64)),
    }
}

/// Names the model `spec` addresses in `context`, for the access log, before anything else
/// of the request is read (an answer refusing the rest still names the model).
pub(super) fn name_spec_model(context: Option<&RequestContext>, spec: Option<&ModelSpec>) {
    if let (Some(context), Some(spec)) = (context, spec) {
        context.name_model(&spec.name);
    }
}
