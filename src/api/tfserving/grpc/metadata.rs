//! TF Serving gRPC `GetModelMetadata`: the signature defs of the version that answers.

use std::sync::Arc;

use prost::Message;
use tonic::{Request, Response, Status};

use super::support::{answered_spec, TfServingGrpc};
use crate::api::tfserving::signatures::signature_defs;
use crate::error::Error;
use crate::proto::tensorflow::serving::{
    GetModelMetadataRequest, GetModelMetadataResponse, SignatureDefMap,
};
use crate::request::RequestContext;
use crate::wire_error::TfServingRequestError;

/// The metadata field TF Serving clients ask for.
const SIGNATURE_DEF_FIELD: &str = "signature_def";

pub(super) async fn get_model_metadata(
    grpc: &TfServingGrpc,
    request: Request<GetModelMetadataRequest>,
) -> Result<Response<GetModelMetadataResponse>, Status> {
    let context = request.extensions().get::<Arc<RequestContext>>().cloned();
    let request = request.into_inner();
    if request.metadata_field.is_empty() {
        return Err(Error::from(TfServingRequestError::NoMetadataField).into());
    }
    if let Some(field) = request
        .metadata_field
        .iter()
        .find(|field| *field != SIGNATURE_DEF_FIELD)
    {
        return Err(Error::from(TfServingRequestError::UnsupportedMetadataField(
            field.clone(),
        ))
        .into());
    }
    let model = grpc
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
