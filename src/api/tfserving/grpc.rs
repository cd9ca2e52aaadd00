//! `tensorflow.serving.PredictionService` and `tensorflow.serving.ModelService` over tonic.

use std::sync::Arc;

use prost::Message;
use tonic::{Request, Response, Status};

use super::examples::Examples;
use super::tensor_proto::ResponseEncoding;
use super::{classify, multi_inference, regress, signature_defs, tensor_proto, version_statuses};
use crate::error::Error;
use crate::infer::{Decoded, InferService, ModelTarget};
use crate::proto::tensorflow::serving::model_server_config;
use crate::proto::tensorflow::serving::{
    model_service_server::ModelService, model_spec::VersionChoice,
    prediction_service_server::PredictionService, ClassificationRequest, ClassificationResponse,
    GetModelMetadataRequest, GetModelMetadataResponse, GetModelStatusRequest,
    GetModelStatusResponse, ModelSpec, ModelVersionStatus, MultiInferenceRequest,
    MultiInferenceResponse, PredictRequest, PredictResponse, RegressionRequest, RegressionResponse,
    ReloadConfigRequest, ReloadConfigResponse, SignatureDefMap, StatusProto,
};
use crate::repository::{served_models, LoadedModel, VersionSelector};
use crate::request::RequestContext;

/// The metadata field TF Serving clients ask for.
const SIGNATURE_DEF_FIELD: &str = "signature_def";

/// Both TF Serving gRPC services over one [`InferService`].
#[derive(Clone)]
pub struct TfServingGrpc {
    infer: Arc<InferService>,
    /// Typed fields (TF Serving's default) or `tensor_content` in Predict answers.
    predict_response: ResponseEncoding,
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
    async fn resolve(
        &self,
        spec: Option<&ModelSpec>,
        context: Option<&RequestContext>,
    ) -> Result<Arc<LoadedModel>, Error> {
        let spec = spec.ok_or_else(|| Error::invalid("the request has no model_spec"))?;
        self.infer
            .resolve_loading(&spec.name, spec_selector(spec)?, context)
            .await
    }
}

fn spec_selector(spec: &ModelSpec) -> Result<VersionSelector, Error> {
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
fn spec_target(spec: Option<&ModelSpec>) -> Result<ModelTarget<'_>, Error> {
    let spec = spec.ok_or_else(|| Error::invalid("the request has no model_spec"))?;
    Ok(ModelTarget {
        model: &spec.name,
        version: spec_selector(spec)?,
        signature: &spec.signature_name,
    })
}

/// The `model_spec` a response carries: the version that actually answered.
fn answered_spec(model: &LoadedModel, signature: &str) -> ModelSpec {
    ModelSpec {
        name: model.name.clone(),
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
        let context = request.extensions().get::<Arc<RequestContext>>().cloned();
        let request = request.into_inner();
        let limits = *self.infer.limits();
        let PredictRequest {
            model_spec,
            inputs,
            output_filter,
            ..
        } = request;
        let target = spec_target(model_spec.as_ref())?;
        let prepared = self
            .infer
            .prepare(target, context.as_deref(), |_| {
                let inputs = inputs
                    .into_iter()
                    .map(|(name, proto)| match tensor_proto::decode(proto, &limits) {
                        Ok(tensor) => Ok((name, tensor)),
                        Err(err) => Err(Error::from(err.in_input(&name))),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                // TF Serving's API has no priority, and no timeout but the transport's.
                Ok(Decoded {
                    inputs,
                    output_filter,
                    ..Decoded::default()
                })
            })
            .await?;
        let result = self.infer.run(prepared).await?;
        let outputs = result
            .outputs
            .iter()
            .map(|(name, tensor)| {
                let proto = tensor_proto::encode_as(tensor, self.predict_response);
                (name.clone(), proto)
            })
            .collect();
        Ok(Response::new(PredictResponse {
            model_spec: Some(answered_spec(&result.model, &result.signature().name)),
            outputs,
        }))
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
        let context = request.extensions().get::<Arc<RequestContext>>().cloned();
        let request = request.into_inner();
        if request.metadata_field.is_empty() {
            return Err(
                Error::invalid("metadata_field is empty; ask for \"signature_def\"").into(),
            );
        }
        if let Some(field) = request
            .metadata_field
            .iter()
            .find(|field| *field != SIGNATURE_DEF_FIELD)
        {
            return Err(Error::invalid(format!(
                "metadata field '{field}' is not supported; the supported field is \"signature_def\""
            ))
            .into());
        }
        let model = self
            .resolve(request.model_spec.as_ref(), context.as_deref())
            .await?;
        let map = SignatureDefMap {
            signature_def: signature_defs(&model),
        };
        let any = prost_types::Any {
            type_url: "type.googleapis.com/tensorflow.serving.SignatureDefMap".to_owned(),
            value: map.encode_to_vec(),
        };
        Ok(Response::new(GetModelMetadataResponse {
            model_spec: Some(answered_spec(&model, "")),
            metadata: [(SIGNATURE_DEF_FIELD.to_owned(), any)].into(),
        }))
    }
}

#[tonic::async_trait]
impl ModelService for TfServingGrpc {
    async fn get_model_status(
        &self,
        request: Request<GetModelStatusRequest>,
    ) -> Result<Response<GetModelStatusResponse>, Status> {
        let request = request.into_inner();
        let spec = request
            .model_spec
            .ok_or_else(|| Error::invalid("the request has no model_spec"))?;
        if spec.name.is_empty() {
            return Err(Error::invalid("the request names no model").into());
        }
        let snapshot = self.infer.repository().snapshot();
        let record = snapshot.model(&spec.name)?;
        let version = record.version_of(&spec_selector(&spec)?)?;
        let model_version_status = version_statuses(record, version)?
            .into_iter()
            .map(|row| ModelVersionStatus {
                version: row.version as i64,
                state: row.state as i32,
                status: Some(StatusProto {
                    error_code: row.error_code as i32,
                    error_message: row.error_message,
                }),
            })
            .collect();
        Ok(Response::new(GetModelStatusResponse {
            model_version_status,
        }))
    }

    /// Serves exactly the listed models from now on, with their version policies and labels.
    async fn handle_reload_config_request(
        &self,
        request: Request<ReloadConfigRequest>,
    ) -> Result<Response<ReloadConfigResponse>, Status> {
        let config = request
            .into_inner()
            .config
            .and_then(|config| config.config)
            .ok_or_else(|| Error::invalid("the request has no model_config_list"))?;
        let model_server_config::Config::ModelConfigList(list) = config else {
            return Err(Error::invalid(
                "custom_model_config is not supported; send a model_config_list",
            )
            .into());
        };
        // TF Serving applies an empty list: it unloads every model and goes on answering,
        // serving nothing. Here readiness would stay true while every request fails, so an
        // empty list is refused; models are taken out one at a time (KServe's unload) or the
        // server is stopped.
        if list.config.is_empty() {
            return Err(Error::invalid(
                "the model_config_list is empty; refusing to unload every model (unload models \
                 one by one through the repository API, or stop the server)",
            )
            .into());
        }
        let repository = self.infer.repository();
        let models = served_models(list, |name, base_path| {
            repository.model_path(name, base_path)
        })?;
        repository.serve_only(models).await?;
        Ok(Response::new(ReloadConfigResponse {
            status: Some(StatusProto {
                error_code: crate::proto::tensorflow::error::Code::Ok as i32,
                error_message: String::new(),
            }),
            metric: Vec::new(),
        }))
    }
}
