//! KServe v2 HTTP metadata, readiness and configuration: `GET /v2`,
//! `/v2/models/{name}[/versions/{version}]`, `.../ready` and `.../config`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::Response;
use axum::Extension;
use serde_json::{json, Value};

use super::support::{Reply, Shared};
use crate::api::http::response::json_response;
use crate::api::kserve::model_info::{
    config_json, model_config, model_metadata, ModelMetadata, TensorMetadata, EXTENSIONS,
};
use crate::error::Error;
use crate::infer::InferService;
use crate::request::RequestContext;

pub(super) async fn server_metadata() -> Response {
    json_response(&json!({
        "name": "tensorport",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS,
    }))
}

pub(super) fn metadata_json(meta: ModelMetadata) -> Value {
    let tensors = |list: &[TensorMetadata]| -> Vec<Value> {
        list.iter()
            .map(|t| json!({ "name": t.name, "datatype": t.datatype, "shape": t.shape }))
            .collect()
    };
    json!({
        "name": meta.name,
        "versions": meta.versions,
        "platform": meta.platform,
        "inputs": tensors(&meta.inputs),
        "outputs": tensors(&meta.outputs),
    })
}

/// The request's context, where the overload layer set one (it carries the deadline).
type Context = Option<Extension<Arc<RequestContext>>>;

fn context_of(context: &Context) -> Option<&RequestContext> {
    context.as_ref().map(|Extension(context)| context.as_ref())
}

pub(super) async fn metadata(
    State(s): Shared,
    Path(name): Path<String>,
    context: Context,
) -> Reply {
    let meta = model_metadata(&s, &name, "", context_of(&context)).await?;
    Ok(json_response(&metadata_json(meta)))
}

pub(super) async fn metadata_version(
    State(s): Shared,
    Path((name, version)): Path<(String, String)>,
    context: Context,
) -> Reply {
    let meta = model_metadata(&s, &name, &version, context_of(&context)).await?;
    Ok(json_response(&metadata_json(meta)))
}

/// 200 when the model (version) can serve; an error status otherwise, as Triton answers.
pub(super) fn readiness(s: &InferService, name: &str, version: &str) -> Reply {
    let version = crate::repository::VersionSelector::from_kserve(version).map_err(Error::from)?;
    s.resolve(name, version)?;
    Ok(json_response(&json!({ "name": name, "ready": true })))
}

pub(super) async fn ready(State(s): Shared, Path(name): Path<String>) -> Reply {
    readiness(&s, &name, "")
}

pub(super) async fn ready_version(
    State(s): Shared,
    Path((name, version)): Path<(String, String)>,
) -> Reply {
    readiness(&s, &name, &version)
}

pub(super) async fn config(State(s): Shared, Path(name): Path<String>, context: Context) -> Reply {
    let config = model_config(&s, &name, "", context_of(&context)).await?;
    Ok(json_response(&config_json(&config)))
}

pub(super) async fn config_version(
    State(s): Shared,
    Path((name, version)): Path<(String, String)>,
    context: Context,
) -> Reply {
    let config = model_config(&s, &name, &version, context_of(&context)).await?;
    Ok(json_response(&config_json(&config)))
}
