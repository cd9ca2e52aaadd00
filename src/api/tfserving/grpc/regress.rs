//! TF Serving gRPC `Regress`: the request's examples through [`regress::run`], answered
//! with the spec of the version that ran.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::support::{answered_spec, name_spec_model, spec_target, TfServingGrpc};
use crate::api::tfserving::examples::Examples;
use crate::api::tfserving::regress;
use crate::error::Error;
use crate::proto::tensorflow::serving::{RegressionRequest, RegressionResponse};
use crate::request::RequestContext;

pub(super) async fn regress(
    grpc: &TfServingGrpc,
    request: Request<RegressionRequest>,
) -> Result<Response<RegressionResponse>, Status> {
    let context = request.extensions().get::<Arc<RequestContext>>().cloned();
    let request = request.into_inner();
    name_spec_model(context.as_deref(), request.model_spec.as_ref());
    let target = spec_target(request.model_spec.as_ref())?;
    let examples = Examples::from_input(request.input).map_err(Error::from)?;
    let (answer, result) = regress::run(&grpc.infer, target, context.as_deref(), &examples).await?;
    Ok(Response::new(RegressionResponse {
        model_spec: Some(answered_spec(&answer.model, &answer.signature().name)),
        result: Some(result),
    }))
}
