//! TF Serving REST model status: `GET /v1/models/{name}[/versions/{version}|/labels/{label}]`.

use axum::response::Response;
use serde_json::{json, Value};

use super::path::{version_selector, VersionRef};
use crate::api::http::response::json_response;
use crate::api::tfserving::status::{state_name, version_statuses};
use crate::error::Error;
use crate::infer::InferService;

pub(super) fn status(
    infer: &InferService,
    model: &str,
    version: VersionRef<'_>,
) -> Result<Response, Error> {
    let snapshot = infer.repository().snapshot();
    let record = snapshot.model(model)?;
    let version = record.version_of(&version_selector(version)?)?;
    let rows: Vec<Value> = version_statuses(record, version)?
        .into_iter()
        .map(|row| {
            json!({
                "version": row.version.to_string(),
                "state": state_name(row.state),
                "status": {
                    "error_code": row.error_code.as_str_name(),
                    "error_message": row.error_message,
                },
            })
        })
        .collect();
    Ok(json_response(&json!({ "model_version_status": rows })))
}
