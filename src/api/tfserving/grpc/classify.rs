//! TF Serving gRPC `Classify`: the request's examples through [`classify::run`], answered
//! with the spec of the version that ran.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::support::{answered_spec, name_spec_model, spec_target, TfServingGrpc};
use crate::api::tfserving::classify;
use crate::api::tfserving::examples::Examples;
use crate::error::Error;
use crate::proto::tensorflow::serving::{ClassificationRequest, ClassificationResponse};
use crate::request::RequestContext;

pub(super) async fn classify(
    grpc: &TfServingGrpc,
    request: Request<ClassificationRequest>,
) -> Result<Response<ClassificationResponse>, Status> {
    let context = request.extensions().get::<Arc<RequestContext>>().cloned();
    let request = request.into_inner();
    name_spec_model(context.as_deref(), request.model_spec.as_ref());
    let target = spec_target(request.model_spec.as_ref())?;
    let examples = Examples::from_input(request.input).map_err(Error::from)?;
    let (answer, result) =
        classify::run(&grpc.infer, target, context.as_deref(), &examples).await?;
    Ok(Response::new(ClassificationResponse {
        model_spec: Some(answered_spec(&answer.model, &answer.signature().name)),
        result: Some(result),
    }))
}
