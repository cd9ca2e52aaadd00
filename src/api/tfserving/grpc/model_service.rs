//! `tensorflow.serving.ModelService`: model status and config reloads.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::support::{spec_selector, TfServingGrpc};
use crate::api::tfserving::status::version_statuses;
use crate::error::Error;
use crate::proto::tensorflow::serving::model_server_config;
use crate::proto::tensorflow::serving::{
    model_service_server::ModelService, GetModelStatusRequest, GetModelStatusResponse,
    ModelVersionStatus, ReloadConfigRequest, ReloadConfigResponse, StatusProto,
};
use crate::repository::served_models;
use crate::request::RequestContext;
use crate::wire_error::TfServingRequestError;

#[tonic::async_trait]
impl ModelService for TfServingGrpc {
    async fn get_model_status(
        &self,
        request: Request<GetModelStatusRequest>,
    ) -> Result<Response<GetModelStatusResponse>, Status> {
        if let (Some(context), Some(spec)) = (
            request.extensions().get::<Arc<RequestContext>>(),
            &request.get_ref().model_spec,
        ) {
            context.name_model(&spec.name);
        }
        let request = request.into_inner();
        let spec = request
            .model_spec
            .ok_or(Error::from(TfServingRequestError::NoModelSpec))?;
        if spec.name.is_empty() {
            return Err(Error::from(TfServingRequestError::NoModelName).into());
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
        // Refused before the list is read, where clients may not change the models.
        self.infer.repository().check_client_control()?;
        let config = request
            .into_inner()
            .config
            .and_then(|config| config.config)
            .ok_or(Error::from(TfServingRequestError::NoModelConfigList))?;
        let model_server_config::Config::ModelConfigList(list) = config else {
            return Err(Error::from(TfServingRequestError::CustomModelConfig).into());
        };
        // TF Serving applies an empty list: it unloads every model and goes on answering,
        // serving nothing. Here readiness would stay true while every request fails, so an
        // empty list is refused; models are taken out one at a time (KServe's unload) or the
        // server is stopped.
        if list.config.is_empty() {
            return Err(Error::from(TfServingRequestError::EmptyModelConfigList).into());
        }
        let repository = self.infer.repository();
        // The list came over the network: its paths are confined (see `ListPaths`).
        let models = served_models(list, repository)?;
        repository.reload_config(models).await?;
        Ok(Response::new(ReloadConfigResponse {
            status: Some(StatusProto {
                error_code: crate::proto::tensorflow::error::Code::Ok as i32,
                error_message: String::new(),
            }),
            metric: Vec::new(),
        }))
    }
}
