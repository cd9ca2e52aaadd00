//! KServe v2 HTTP shared-memory extensions: system shared memory, and the CUDA routes, which
//! answer that CUDA memory is not supported.

use crate::api::http::body::Payload;
use axum::extract::{Path, State};
use serde_json::{json, Value};

use super::support::{connection_peer, ok, parse_object, string_field, Connection, Reply, Shared};
use crate::api::http::response::json_response;
use crate::error::Error;
use crate::infer::InferService;
use crate::shm::{Peer, ShmError};
use crate::wire_error::BodyError;

pub(super) async fn shm_status_all(State(s): Shared, connection: Connection) -> Reply {
    shm_status_json(&s, None, connection_peer(connection))
}

pub(super) async fn shm_status(
    State(s): Shared,
    connection: Connection,
    Path(region): Path<String>,
) -> Reply {
    shm_status_json(&s, Some(&region), connection_peer(connection))
}

pub(super) fn shm_status_json(s: &InferService, region: Option<&str>, peer: Peer) -> Reply {
    let rows: Vec<Value> = s
        .shm()
        .status(region, peer)
        .map_err(Error::from)?
        .into_iter()
        .map(|r| json!({ "name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size }))
        .collect();
    Ok(json_response(&Value::Array(rows)))
}

pub(super) async fn shm_register(
    State(s): Shared,
    connection: Connection,
    Path(region): Path<String>,
    Payload(body): Payload,
) -> Reply {
    let request = parse_object(&body)?;
    let key = string_field(&request, "key", "register")?;
    let number = |field: &'static str| -> Result<u64, Error> {
        match request.get(field) {
            None if field == "offset" => Ok(0),
            Some(value) => value
                .as_u64()
                .ok_or_else(|| BodyError::RegisterNotInteger(field).into()),
            None => Err(BodyError::Missing {
                what: "register".to_owned(),
                key: field,
            }
            .into()),
        }
    };
    let (offset, byte_size) = (number("offset")?, number("byte_size")?);
    s.shm()
        .register(&region, key, offset, byte_size, connection_peer(connection))
        .map_err(Error::from)?;
    Ok(ok().await)
}

pub(super) async fn shm_unregister(
    State(s): Shared,
    connection: Connection,
    Path(region): Path<String>,
) -> Reply {
    s.shm()
        .unregister(Some(&region), connection_peer(connection))
        .map_err(Error::from)?;
    Ok(ok().await)
}

pub(super) async fn shm_unregister_all(State(s): Shared, connection: Connection) -> Reply {
    s.shm()
        .unregister(None, connection_peer(connection))
        .map_err(Error::from)?;
    Ok(ok().await)
}

pub(super) async fn cuda_status(Path(region): Path<String>) -> Reply {
    Err(Error::from(ShmError::NotFound(region)).into())
}

pub(super) async fn cuda_register() -> Reply {
    Err(Error::from(ShmError::CudaUnsupported).into())
}
