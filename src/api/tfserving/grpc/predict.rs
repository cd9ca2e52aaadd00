//! TF Serving gRPC `Predict`: `TensorProto` inputs decoded, the request run, outputs encoded
//! as typed fields or `tensor_content`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::support::{answered_spec, spec_target, TfServingGrpc};
use crate::error::Error;
use crate::infer::Decoded;
use crate::proto::tensorflow::serving::{PredictRequest, PredictResponse};
use crate::request::RequestContext;
use crate::tensor::tensor_proto;

pub(super) async fn predict(
    grpc: &TfServingGrpc,
    request: Request<PredictRequest>,
) -> Result<Response<PredictResponse>, Status> {
    let context = request.extensions().get::<Arc<RequestContext>>().cloned();
    let request = request.into_inner();
    let limits = grpc.infer.limits().clone();
    let PredictRequest {
        model_spec,
        inputs,
        output_filter,
        ..
    } = request;
    let target = spec_target(model_spec.as_ref())?;
    let prepared = grpc
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
    let result = grpc.infer.run(prepared).await?;
    let outputs = result
        .outputs
        .iter()
        .map(|(name, tensor)| {
            let proto = tensor_proto::encode_as(tensor, grpc.predict_response);
            (name.clone(), proto)
        })
        .collect();
    Ok(Response::new(PredictResponse {
        model_spec: Some(answered_spec(&result.model, &result.signature().name)),
        outputs,
    }))
}
