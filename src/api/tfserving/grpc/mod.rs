//! `tensorflow.serving.PredictionService` and `tensorflow.serving.ModelService` over tonic.
//!
//! This file is the `PredictionService` dispatcher: each RPC is in its own file below it
//! (`predict`, `metadata`, `classify`, `regress`, `multi_inference`), `ModelService` is in
//! `model_service`, and what they share (the service state, reading a model spec) is in the
//! `support` leaf, so that no operation imports the dispatcher.

mod classify;
mod metadata;
mod model_service;
mod multi_inference;
mod predict;
mod regress;
mod support;

use tonic::{Request, Response, Status};

pub use self::support::TfServingGrpc;
use crate::proto::tensorflow::serving::{
    prediction_service_server::PredictionService, ClassificationRequest, ClassificationResponse,
    GetModelMetadataRequest, GetModelMetadataResponse, MultiInferenceRequest,
    MultiInferenceResponse, PredictRequest, PredictResponse, RegressionRequest, RegressionResponse,
};

#[tonic::async_trait]
impl PredictionService for TfServingGrpc {
    async fn classify(
        &self,
        request: Request<ClassificationRequest>,
    ) -> Result<Response<ClassificationResponse>, Status> {
        classify::classify(self, request).await
    }

    async fn regress(
        &self,
        request: Request<RegressionRequest>,
    ) -> Result<Response<RegressionResponse>, Status> {
        regress::regress(self, request).await
    }

    async fn predict(
        &self,
        request: Request<PredictRequest>,
    ) -> Result<Response<PredictResponse>, Status> {
        predict::predict(self, request).await
    }

    async fn multi_inference(
        &self,
        request: Request<MultiInferenceRequest>,
    ) -> Result<Response<MultiInferenceResponse>, Status> {
        multi_inference::multi_inference(self, request).await
    }

    async fn get_model_metadata(
        &self,
        request: Request<GetModelMetadataRequest>,
    ) -> Result<Response<GetModelMetadataResponse>, Status> {
        metadata::get_model_metadata(self, request).await
    }
}
