//! `tensorflow.serving.PredictionService` and `tensorflow.serving.ModelService` over tonic:
//! the services and what their operations share; each operation is in its own file
//! (`grpc_predict`, `grpc_metadata`, `grpc_model_service`, `classify`, `regress`, ...).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::examples::Examples;
use super::tensor_proto::ResponseEncoding;
use super::{classify, grpc_metadata, grpc_predict, multi_inference, regress};
use crate::error::Error;
use crate::infer::{InferService, ModelTarget};
use crate::proto::tensorflow::serving::{
    model_spec::VersionChoice, prediction_service_server::PredictionService, ClassificationRequest,
    ClassificationResponse, GetModelMetadataRequest, GetModelMetadataResponse, ModelSpec,
    MultiInferenceRequest, MultiInferenceResponse, PredictRequest, PredictResponse,
    RegressionRequest, RegressionResponse,
};
use crate::repository::{LoadedModel, VersionSelector};
use crate::request::RequestContext;
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

#[tonic::async_trait]
impl PredictionService for TfServingGrpc {
    async fn classify(
        &self,
        request: Request<ClassificationRequest>,
    ) -> Result<Response<ClassificationResponse>, Status> {
        let context = request.extensions().get::<Arc<RequestContext>>().cloned();
        let request = request.into_inner();
        let target = spec_target(request.model_spec.as_ref())?;
        let examples = Examples::from_input(request.input).map_err(Error::from)?;
        let (answer, result) =
            classify::run(&self.infer, target, context.as_deref(), &examples).await?;
        Ok(Response::new(ClassificationResponse {
            model_spec: Some(answered_spec(&answer.model, &answer.signature().name)),
            result: Some(result),
        }))
    }

    async fn regress(
        &self,
        request: Request<RegressionRequest>,
    ) -> Result<Response<RegressionResponse>, Status> {
        let context = request.extensions().get::<Arc<RequestContext>>().cloned();
        let request = request.into_inner();
        let target = spec_target(request.model_spec.as_ref())?;
        let examples = Examples::from_input(request.input).map_err(Error::from)?;
        let (answer, result) =
            regress::run(&self.infer, target, context.as_deref(), &examples).await?;
        Ok(Response::new(RegressionResponse {
            model_spec: Some(answered_spec(&answer.model, &answer.signature().name)),
            result: Some(result),
        }))
    }

    async fn predict(
        &self,
        request: Request<PredictRequest>,
    ) -> Result<Response<PredictResponse>, Status> {
        grpc_predict::predict(self, request).await
    }

    async fn multi_inference(
        &self,
        request: Request<MultiInferenceRequest>,
    ) -> Result<Response<MultiInferenceResponse>, Status> {
        let context = request.extensions().get::<Arc<RequestContext>>().cloned();
        let response = multi_inference::run(
            &self.infer,
            request.into_inner(),
            context.as_deref(),
            spec_selector,
            |answer| answered_spec(&answer.model, &answer.signature().name),
        )
        .await?;
        Ok(Response::new(response))
    }

    async fn get_model_metadata(
        &self,
        request: Request<GetModelMetadataRequest>,
    ) -> Result<Response<GetModelMetadataResponse>, Status> {
        grpc_metadata::get_model_metadata(self, request).await
    }
}
