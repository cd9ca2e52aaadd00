//! KServe v2 over HTTP, under `/v2`, including Triton's binary tensor data and shared-memory
//! extensions.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use serde_json::{json, Map, Value};

use super::infer_http::{infer_latest, infer_version};
pub use super::infer_json::decode_infer_body;
use super::metadata::{
    config, config_version, metadata, metadata_version, ready, ready_version, server_metadata,
};
use super::repository::{index, load, unload};
use super::shared_memory::{
    cuda_register, cuda_status, shm_register, shm_status, shm_status_all, shm_unregister,
    shm_unregister_all,
};
use super::statistics::{all_stats, stats, stats_version};
use super::{Param, Params};
use crate::api::http::response::{json_response, RestError};
use crate::api::http::route_table::Routes;
use crate::api::json;
use crate::api::AppState;
use crate::error::Error;
use crate::infer::InferService;
use crate::shm::Peer;
use crate::wire_error::{BodyError, ParamError};

pub(super) type Shared = State<Arc<InferService>>;
pub(super) type Reply = Result<Response, RestError>;

/// The `/v2` routes, waiting for their state; the health checks are `crate::api::health`'s.
pub fn routes() -> Routes<AppState> {
    Routes::new()
        .route("/v2", get(server_metadata))
        .route("/v2/models/stats", get(all_stats))
        .route("/v2/models/{name}", get(metadata))
        .route("/v2/models/{name}/ready", get(ready))
        .route("/v2/models/{name}/config", get(config))
        .route("/v2/models/{name}/stats", get(stats))
        .route("/v2/models/{name}/infer", post(infer_latest))
        .route(
            "/v2/models/{name}/versions/{version}",
            get(metadata_version),
        )
        .route(
            "/v2/models/{name}/versions/{version}/ready",
            get(ready_version),
        )
        .route(
            "/v2/models/{name}/versions/{version}/config",
            get(config_version),
        )
        .route(
            "/v2/models/{name}/versions/{version}/stats",
            get(stats_version),
        )
        .route(
            "/v2/models/{name}/versions/{version}/infer",
            post(infer_version),
        )
        .route("/v2/repository/index", post(index))
        .route("/v2/repository/models/{name}/load", post(load))
        .route("/v2/repository/models/{name}/unload", post(unload))
        .route("/v2/systemsharedmemory/status", get(shm_status_all))
        .route(
            "/v2/systemsharedmemory/region/{region}/status",
            get(shm_status),
        )
        .route(
            "/v2/systemsharedmemory/region/{region}/register",
            post(shm_register),
        )
        .route(
            "/v2/systemsharedmemory/region/{region}/unregister",
            post(shm_unregister),
        )
        .route(
            "/v2/systemsharedmemory/unregister",
            post(shm_unregister_all),
        )
        .route(
            "/v2/cudasharedmemory/status",
            get(|| async { json_response(&json!([])) }),
        )
        .route(
            "/v2/cudasharedmemory/region/{region}/status",
            get(cuda_status),
        )
        .route(
            "/v2/cudasharedmemory/region/{region}/register",
            post(cuda_register),
        )
        .route("/v2/cudasharedmemory/region/{region}/unregister", post(ok))
        .route("/v2/cudasharedmemory/unregister", post(ok))
}

pub(super) async fn ok() -> Response {
    StatusCode::OK.into_response()
}

/// The peer of a request: it decides which shared-memory regions the request may register,
/// see or name. Without connection info (an in-process caller) the peer is unknown, hence
/// remote.
pub(super) type Connection = Option<Extension<ConnectInfo<SocketAddr>>>;

pub(super) fn connection_peer(connection: Connection) -> Peer {
    connection.map_or(Peer::Unknown, |Extension(ConnectInfo(addr))| peer(addr))
}

pub(super) fn parse_object(body: &[u8]) -> Result<Map<String, Value>, Error> {
    match json::body::parse(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(BodyError::NotObject.into()),
        Err(err) => Err(BodyError::NotJson(err.to_string()).into()),
    }
}

pub(super) fn params(value: Option<&Value>, what: &str) -> Result<Params, Error> {
    let Some(value) = value else {
        return Ok(Params::new());
    };
    let Value::Object(map) = value else {
        return Err(ParamError::NotObject {
            what: what.to_owned(),
        }
        .into());
    };
    map.iter()
        .map(|(key, value)| {
            let param = match value {
                Value::Bool(b) => Param::Bool(*b),
                Value::String(s) => Param::Str(s.clone()),
                Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                    (Some(u), _, _) => Param::Uint(u),
                    (None, Some(i), _) => Param::Int(i),
                    (None, None, Some(f)) => Param::Double(f),
                    _ => return Err(ParamError::UnusableNumber(key.clone()).into()),
                },
                _ => return Err(ParamError::WrongJsonType(key.clone()).into()),
            };
            Ok((key.clone(), param))
        })
        .collect()
}

pub(super) fn string_field<'v>(
    object: &'v Map<String, Value>,
    key: &'static str,
    what: &str,
) -> Result<&'v str, Error> {
    match object.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(BodyError::NotString {
            what: what.to_owned(),
            key,
        }
        .into()),
        None => Err(BodyError::Missing {
            what: what.to_owned(),
            key,
        }
        .into()),
    }
}

fn peer(addr: SocketAddr) -> Peer {
    Peer::Ip(addr.ip())
}
