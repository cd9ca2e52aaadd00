//! What the `/v2` operations share, beneath the route table and every operation: the state a
//! handler takes, its reply, the peer of its connection, and reading JSON bodies and their
//! parameters.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::{Map, Value};

use crate::api::http::response::RestError;
use crate::api::json;
use crate::api::kserve::params::{Param, Params};
use crate::error::Error;
use crate::infer::InferService;
use crate::shm::Peer;
use crate::wire_error::{BodyError, ParamError};

pub(super) type Shared = State<Arc<InferService>>;
pub(super) type Reply = Result<Response, RestError>;

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
