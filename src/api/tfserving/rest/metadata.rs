//! TF Serving REST model metadata: `GET /v1/models/{name}[...]/metadata`, the signature defs
//! of the version that answers.

use axum::response::Response;
use serde_json::{json, Map, Value};

use super::path::{version_selector, VersionRef};
use crate::api::http::response::json_response;
use crate::api::tfserving::signatures::signature_defs;
use crate::error::Error;
use crate::infer::InferService;
use crate::request::RequestContext;

pub(super) async fn metadata(
    infer: &InferService,
    model: &str,
    version: VersionRef<'_>,
    context: Option<&RequestContext>,
) -> Result<Response, Error> {
    let model = infer
        .resolve_loading(model, version_selector(version)?, context)
        .await?;
    let defs: Map<String, Value> = signature_defs(&model)
        .into_iter()
        .map(|(name, def)| {
            let infos = |infos: &std::collections::HashMap<
                String,
                crate::proto::tensorflow::TensorInfo,
            >| {
                infos
                    .iter()
                    .map(|(key, info)| {
                        let dims: Vec<Value> = info
                            .tensor_shape
                            .iter()
                            .flat_map(|shape| shape.dim.iter())
                            .map(|d| json!({ "size": d.size.to_string(), "name": d.name }))
                            .collect();
                        let dtype = crate::proto::tensorflow::DataType::try_from(info.dtype)
                            .map(|d| d.as_str_name())
                            .unwrap_or("DT_INVALID");
                        let name = match &info.encoding {
                            Some(crate::proto::tensorflow::tensor_info::Encoding::Name(n)) => {
                                n.clone()
                            }
                            _ => String::new(),
                        };
                        (
                            key.clone(),
                            json!({
                                "dtype": dtype,
                                "tensor_shape": { "dim": dims, "unknown_rank": false },
                                "name": name,
                            }),
                        )
                    })
                    .collect::<Map<String, Value>>()
            };
            (
                name,
                json!({
                    "inputs": infos(&def.inputs),
                    "outputs": infos(&def.outputs),
                    "method_name": def.method_name,
                }),
            )
        })
        .collect();
    Ok(json_response(&json!({
        "model_spec": {
            "name": &*model.name,
            "signature_name": "",
            "version": model.version.to_string(),
        },
        "metadata": { "signature_def": { "signature_def": defs } },
    })))
}
