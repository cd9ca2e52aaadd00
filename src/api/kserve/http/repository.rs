//! KServe v2 HTTP model repository extension: `POST /v2/repository/index`,
//! `.../models/{name}/load` and `.../unload`.

use crate::api::http::body::Payload;
use axum::extract::{Path, State};
use serde_json::{json, Value};

use super::support::{ok, params, parse_object, Reply, Shared};
use crate::api::http::response::json_response;
use crate::api::kserve::model_info::repository_index;
use crate::api::kserve::params::{refuse_load_overrides, Params};
use crate::error::Error;
use crate::wire_error::BodyError;

pub(super) async fn index(State(s): Shared, Payload(body): Payload) -> Reply {
    let ready_only = if body.is_empty() {
        false
    } else {
        let request = parse_object(&body)?;
        match request.get("ready") {
            None => false,
            Some(Value::Bool(ready)) => *ready,
            Some(_) => return Err(Error::from(BodyError::NotBoolean("ready")).into()),
        }
    };
    let rows: Vec<Value> = repository_index(&s, ready_only)
        .into_iter()
        .map(|e| match e.memory_bytes {
            Some(bytes) => json!({ "name": e.name, "version": e.version, "state": e.state, "reason": e.reason, "memory_bytes": bytes }),
            // Never loaded: no version, no state, as Triton writes it.
            None if e.state.is_empty() => json!({ "name": e.name }),
            None => json!({ "name": e.name, "version": e.version, "state": e.state, "reason": e.reason }),
        })
        .collect();
    Ok(json_response(&Value::Array(rows)))
}

/// A load / unload body: optional, a JSON object whose `parameters`, if any, is an object.
/// KServe clients may send parameters; none are used.
pub(super) fn check_repository_body(body: &[u8]) -> Result<Params, Error> {
    if body.is_empty() {
        return Ok(Params::new());
    }
    let request = parse_object(body)?;
    params(request.get("parameters"), "request")
}

/// Loads (or reloads) a model now.
pub(super) async fn load(
    State(s): Shared,
    Path(name): Path<String>,
    Payload(body): Payload,
) -> Reply {
    let params = check_repository_body(&body)?;
    // Where clients may not load, that is the answer, whatever the load would have carried.
    s.repository().check_client_control().map_err(Error::from)?;
    refuse_load_overrides(&name, params.keys())?;
    s.repository()
        .load_model(&name)
        .await
        .map_err(Error::from)?;
    Ok(ok().await)
}

pub(super) async fn unload(
    State(s): Shared,
    Path(name): Path<String>,
    Payload(body): Payload,
) -> Reply {
    check_repository_body(&body)?;
    s.repository()
        .unload_model(&name)
        .await
        .map_err(Error::from)?;
    Ok(ok().await)
}
