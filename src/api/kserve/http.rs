//! KServe v2 over HTTP, under `/v2`, including Triton's binary tensor data and shared-memory
//! extensions.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::infer_body::{Entry, InferBody, Inputs};
use super::{
    codec, config_json, infer, model_config, model_metadata, param_bool, refuse_load_overrides,
    repository_index, scheduling_params, InferRequest, InferResponse, InputData, InputRequest,
    ModelMetadata, OutputRequest, Param, Params, ShmRef, EXTENSIONS,
};
use crate::api::json_body;
use crate::api::json_decode::decode_flat;
use crate::api::json_tensor::{write_flat, write_json_str};
use crate::api::rest_util::{json_response, raw_json_response, RestError};
use crate::api::route_table::Routes;
use crate::error::Error;
use crate::infer::InferService;
use crate::request::RequestContext;
use crate::shm::{Peer, ShmError};
use crate::tensor::{shape_from_dims, DecodeLimits};

/// Header that splits a binary-extension body into its JSON part and its tensor data.
const HEADER_LENGTH: &str = "inference-header-content-length";

type Shared = State<Arc<InferService>>;
type Reply = Result<Response, RestError>;

/// The `/v2` routes, waiting for their state; the health checks are `crate::api::health`'s.
pub fn routes() -> Routes<Arc<InferService>> {
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

async fn ok() -> Response {
    StatusCode::OK.into_response()
}

async fn server_metadata() -> Response {
    json_response(&json!({
        "name": "tensorport",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS,
    }))
}

fn metadata_json(meta: ModelMetadata) -> Value {
    let tensors = |list: &[super::TensorMetadata]| -> Vec<Value> {
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

async fn metadata(State(s): Shared, Path(name): Path<String>, context: Context) -> Reply {
    let meta = model_metadata(&s, &name, "", context_of(&context)).await?;
    Ok(json_response(&metadata_json(meta)))
}

async fn metadata_version(
    State(s): Shared,
    Path((name, version)): Path<(String, String)>,
    context: Context,
) -> Reply {
    let meta = model_metadata(&s, &name, &version, context_of(&context)).await?;
    Ok(json_response(&metadata_json(meta)))
}

/// 200 when the model (version) can serve; an error status otherwise, as Triton answers.
fn readiness(s: &InferService, name: &str, version: &str) -> Reply {
    let version = crate::repository::VersionSelector::from_kserve(version).map_err(Error::from)?;
    s.resolve(name, version)?;
    Ok(json_response(&json!({ "name": name, "ready": true })))
}

async fn ready(State(s): Shared, Path(name): Path<String>) -> Reply {
    readiness(&s, &name, "")
}

async fn ready_version(State(s): Shared, Path((name, version)): Path<(String, String)>) -> Reply {
    readiness(&s, &name, &version)
}

async fn config(State(s): Shared, Path(name): Path<String>, context: Context) -> Reply {
    let config = model_config(&s, &name, "", context_of(&context)).await?;
    Ok(json_response(&config_json(&config)))
}

async fn config_version(
    State(s): Shared,
    Path((name, version)): Path<(String, String)>,
    context: Context,
) -> Reply {
    let config = model_config(&s, &name, &version, context_of(&context)).await?;
    Ok(json_response(&config_json(&config)))
}

fn stats_json(s: &InferService, name: Option<&str>, version: &str) -> Result<Value, Error> {
    let stats = super::grpc::statistics(s, name, version)?;
    let duration = |d: &Option<crate::proto::inference::StatisticDuration>| {
        let d = d.unwrap_or_default();
        json!({ "count": d.count, "ns": d.ns })
    };
    let models: Vec<Value> = stats
        .model_stats
        .iter()
        .map(|m| {
            let i = m.inference_stats.unwrap_or_default();
            json!({
                "name": m.name,
                "version": m.version,
                "last_inference": m.last_inference,
                "inference_count": m.inference_count,
                "execution_count": m.execution_count,
                "inference_stats": {
                    "success": duration(&i.success),
                    "fail": duration(&i.fail),
                    "queue": duration(&i.queue),
                    "compute_input": duration(&i.compute_input),
                    "compute_infer": duration(&i.compute_infer),
                    "compute_output": duration(&i.compute_output),
                    "cache_hit": duration(&i.cache_hit),
                    "cache_miss": duration(&i.cache_miss),
                },
                "batch_stats": m.batch_stats.iter().map(|b| json!({
                    "batch_size": b.batch_size,
                    "compute_input": duration(&b.compute_input),
                    "compute_infer": duration(&b.compute_infer),
                    "compute_output": duration(&b.compute_output),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(json!({ "model_stats": models }))
}

async fn all_stats(State(s): Shared) -> Reply {
    Ok(json_response(&stats_json(&s, None, "")?))
}

async fn stats(State(s): Shared, Path(name): Path<String>) -> Reply {
    Ok(json_response(&stats_json(&s, Some(&name), "")?))
}

async fn stats_version(State(s): Shared, Path((name, version)): Path<(String, String)>) -> Reply {
    Ok(json_response(&stats_json(&s, Some(&name), &version)?))
}

async fn index(State(s): Shared, body: Bytes) -> Reply {
    let ready_only = if body.is_empty() {
        false
    } else {
        let request = parse_object(&body)?;
        match request.get("ready") {
            None => false,
            Some(Value::Bool(ready)) => *ready,
            Some(_) => return Err(Error::invalid("\"ready\" must be a boolean").into()),
        }
    };
    let rows: Vec<Value> = repository_index(&s, ready_only)
        .into_iter()
        .map(|e| match e.memory_bytes {
            Some(bytes) => json!({ "name": e.name, "version": e.version, "state": e.state, "reason": e.reason, "memory_bytes": bytes }),
            None => json!({ "name": e.name, "version": e.version, "state": e.state, "reason": e.reason }),
        })
        .collect();
    Ok(json_response(&Value::Array(rows)))
}

/// A load / unload body: optional, a JSON object whose `parameters`, if any, is an object.
/// KServe clients may send parameters; none are used.
fn check_repository_body(body: &[u8]) -> Result<Params, Error> {
    if body.is_empty() {
        return Ok(Params::new());
    }
    let request = parse_object(body)?;
    params(request.get("parameters"), "request")
}

/// Loads (or reloads) a model now.
async fn load(State(s): Shared, Path(name): Path<String>, body: Bytes) -> Reply {
    let params = check_repository_body(&body)?;
    refuse_load_overrides(&name, params.keys())?;
    s.repository().load_model(&name).await?;
    Ok(ok().await)
}

async fn unload(State(s): Shared, Path(name): Path<String>, body: Bytes) -> Reply {
    check_repository_body(&body)?;
    s.repository().unload_model(&name).await?;
    Ok(ok().await)
}

/// The peer of a request: it decides which shared-memory regions the request may register,
/// see or name. Without connection info (an in-process caller) the peer is unknown, hence
/// remote.
type Connection = Option<Extension<ConnectInfo<SocketAddr>>>;

fn connection_peer(connection: Connection) -> Peer {
    connection.map_or(Peer::Unknown, |Extension(ConnectInfo(addr))| peer(addr))
}

async fn infer_latest(
    State(s): Shared,
    Path(name): Path<String>,
    context: Option<Extension<Arc<RequestContext>>>,
    connection: Connection,
    headers: HeaderMap,
    body: Bytes,
) -> Reply {
    let peer = connection_peer(connection);
    run_infer(&s, name, String::new(), context, peer, &headers, body).await
}

async fn infer_version(
    State(s): Shared,
    Path((name, version)): Path<(String, String)>,
    context: Option<Extension<Arc<RequestContext>>>,
    connection: Connection,
    headers: HeaderMap,
    body: Bytes,
) -> Reply {
    let peer = connection_peer(connection);
    run_infer(&s, name, version, context, peer, &headers, body).await
}

async fn run_infer(
    s: &InferService,
    model: String,
    version: String,
    context: Option<Extension<Arc<RequestContext>>>,
    peer: Peer,
    headers: &HeaderMap,
    body: Bytes,
) -> Reply {
    let (header, binary) = split_body(headers, body)?;
    let decoded = InferRequest {
        model,
        version,
        ..decode_infer_body(&header, binary, s.limits())?
    };
    let context = context.as_ref().map(|Extension(context)| context.as_ref());
    let response = infer(s, decoded, peer, context).await?;
    Ok(encode_response(&response)?)
}

/// Splits a binary-extension body at `Inference-Header-Content-Length`.
fn split_body(headers: &HeaderMap, body: Bytes) -> Result<(Bytes, Bytes), Error> {
    let Some(value) = headers.get(HEADER_LENGTH) else {
        return Ok((body, Bytes::new()));
    };
    let length = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .ok_or_else(|| {
            Error::invalid("Inference-Header-Content-Length must be a non-negative integer")
        })?;
    if length > body.len() {
        return Err(Error::invalid(format!(
            "Inference-Header-Content-Length is {length} but the body has only {} bytes",
            body.len()
        )));
    }
    Ok((body.slice(..length), body.slice(length..)))
}

fn parse_object(body: &[u8]) -> Result<Map<String, Value>, Error> {
    match json_body::parse(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Error::invalid("the request body must be a JSON object")),
        Err(err) => Err(Error::invalid(format!(
            "the request body is not valid JSON: {err}"
        ))),
    }
}

/// Decodes an infer request body: its JSON part, and the binary-extension bytes that follow
/// it. The model and version, which come from the path, are left empty. This is the whole
/// wire-to-request step, so tests and fuzzers drive it with arbitrary bytes.
pub fn decode_infer_body(
    json: &[u8],
    binary: Bytes,
    limits: &DecodeLimits,
) -> Result<InferRequest, Error> {
    let mut rewritten = Vec::new();
    let request = parse_infer_body(json, &mut rewritten)?;
    decode_request(&request, String::new(), String::new(), binary, limits)
}

/// The infer request envelope, read in one pass; tensor data stays text until its input's
/// dtype and shape are known.
fn parse_infer_body<'a>(
    body: &'a [u8],
    rewritten: &'a mut Vec<u8>,
) -> Result<InferBody<'a>, Error> {
    if let Some(message) = json_body::not_an_object(body) {
        return Err(Error::invalid(message));
    }
    json_body::parse_borrowed(body, rewritten).map_err(|err| {
        if err.is_data() {
            Error::invalid(format!("the request body is malformed: {err}"))
        } else {
            Error::invalid(format!("the request body is not valid JSON: {err}"))
        }
    })
}

/// A small envelope member (a name, a shape, parameters) as a `Value`.
fn small(raw: Option<&RawValue>) -> Option<Value> {
    raw.and_then(|raw| serde_json::from_str(raw.get()).ok())
}

fn params(value: Option<&Value>, what: &str) -> Result<Params, Error> {
    let Some(value) = value else {
        return Ok(Params::new());
    };
    let Value::Object(map) = value else {
        return Err(Error::invalid(format!(
            "{what} parameters must be a JSON object"
        )));
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
                    _ => {
                        return Err(Error::invalid(format!(
                            "parameter {key} is not a usable number"
                        )))
                    }
                },
                _ => {
                    return Err(Error::invalid(format!(
                        "parameter {key} must be a boolean, number or string"
                    )))
                }
            };
            Ok((key.clone(), param))
        })
        .collect()
}

fn string_field<'v>(
    object: &'v Map<String, Value>,
    key: &str,
    what: &str,
) -> Result<&'v str, Error> {
    match object.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(Error::invalid(format!(
            "{what}: \"{key}\" must be a string"
        ))),
        None => Err(Error::invalid(format!("{what}: \"{key}\" is missing"))),
    }
}

fn decode_request(
    request: &InferBody<'_>,
    model: String,
    version: String,
    binary: Bytes,
    limits: &DecodeLimits,
) -> Result<InferRequest, Error> {
    let id = match small(request.id) {
        None => String::new(),
        Some(Value::String(id)) => id,
        Some(_) => return Err(Error::invalid("\"id\" must be a string")),
    };
    let request_params = params(small(request.parameters).as_ref(), "request")?;
    let Some(Inputs::List(inputs)) = &request.inputs else {
        return Err(Error::invalid("the request needs an \"inputs\" array"));
    };
    let mut cursor = 0usize;
    let inputs = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| decode_input(i, input, &binary, &mut cursor, limits))
        .collect::<Result<Vec<_>, _>>()?;
    if cursor != binary.len() {
        return Err(Error::invalid(format!(
            "the body has {} bytes of binary tensor data that no input claims with binary_data_size",
            binary.len() - cursor
        )));
    }
    let all_binary = param_bool(&request_params, "binary_data_output")?;
    let (priority, timeout) = scheduling_params(&request_params)?;
    let outputs = match small(request.outputs) {
        None => Vec::new(),
        Some(Value::Array(outputs)) => outputs
            .iter()
            .map(|output| decode_output(output, all_binary))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(Error::invalid("\"outputs\" must be an array")),
    };
    Ok(InferRequest {
        model,
        version,
        id,
        inputs,
        outputs,
        binary_by_default: all_binary,
        priority,
        timeout,
    })
}

fn decode_input(
    index: usize,
    input: &Entry<'_>,
    binary: &Bytes,
    cursor: &mut usize,
    limits: &DecodeLimits,
) -> Result<InputRequest, Error> {
    let what = format!("input {index}");
    let Entry::Object(input) = input else {
        return Err(Error::invalid(format!("{what} must be a JSON object")));
    };
    let envelope = [
        ("name", input.name),
        ("datatype", input.datatype),
        ("shape", input.shape),
        ("parameters", input.parameters),
    ]
    .into_iter()
    .filter_map(|(key, raw)| Some((key.to_owned(), small(raw)?)))
    .collect::<Map<String, Value>>();
    let name = string_field(&envelope, "name", &what)?.to_owned();
    let what = format!("input '{name}'");
    let dtype = codec::parse_datatype(string_field(&envelope, "datatype", &what)?)
        .map_err(|err| Error::from(err.in_input(&name)))?;
    let dims: Vec<i64> = match envelope.get("shape") {
        Some(Value::Array(dims)) => dims
            .iter()
            .map(|d| {
                d.as_i64()
                    .ok_or_else(|| Error::invalid(format!("{what}: shape must hold integers")))
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(Error::invalid(format!(
                "{what}: \"shape\" must be an array"
            )))
        }
    };
    let shape = shape_from_dims(&dims).map_err(|err| Error::from(err.in_input(&name)))?;
    let input_params = params(envelope.get("parameters"), &what)?;
    let shm = ShmRef::from_params(&input_params)?;
    let binary_size = match input_params.get("binary_data_size") {
        None => None,
        Some(Param::Uint(n)) => Some(
            usize::try_from(*n)
                .map_err(|_| Error::invalid(format!("{what}: binary_data_size is too large")))?,
        ),
        Some(_) => {
            return Err(Error::invalid(format!(
                "{what}: binary_data_size must be a non-negative integer"
            )))
        }
    };
    let data = input.data;
    let sources = usize::from(shm.is_some())
        + usize::from(binary_size.is_some())
        + usize::from(data.is_some());
    if sources > 1 {
        return Err(Error::invalid(format!(
            "{what} must carry its data in exactly one way: \"data\", binary_data_size, or shared memory (it uses {sources})"
        )));
    }
    let data = match (shm, binary_size, data) {
        (Some(shm), _, _) => InputData::SharedMemory(shm),
        (None, Some(size), _) => {
            let end = cursor
                .checked_add(size)
                .filter(|&end| end <= binary.len())
                .ok_or_else(|| {
                    Error::invalid(format!(
                    "{what}: binary_data_size {size} runs past the end of the body's binary data"
                ))
                })?;
            let raw = binary.slice(*cursor..end);
            *cursor = end;
            InputData::Inline(
                codec::from_raw(dtype, shape.clone(), raw).map_err(|e| e.in_input(&name))?,
            )
        }
        (None, None, Some(data)) => InputData::Inline(
            decode_flat(data, shape.clone(), dtype, limits).map_err(|e| e.in_input(&name))?,
        ),
        (None, None, None) => {
            return Err(Error::invalid(format!(
                "{what} carries no data: give \"data\", binary_data_size, or shared memory"
            )))
        }
    };
    Ok(InputRequest {
        name,
        dtype,
        shape,
        data,
    })
}

fn decode_output(output: &Value, all_binary: bool) -> Result<OutputRequest, Error> {
    let Value::Object(output) = output else {
        return Err(Error::invalid(
            "each requested output must be a JSON object",
        ));
    };
    let name = string_field(output, "name", "requested output")?.to_owned();
    let output_params = params(output.get("parameters"), &format!("output '{name}'"))?;
    let binary = match output_params.get("binary_data") {
        Some(Param::Bool(b)) => *b,
        Some(_) => {
            return Err(Error::invalid(format!(
                "output '{name}': binary_data must be a boolean"
            )))
        }
        None => all_binary,
    };
    if output_params.contains_key("classification") {
        return Err(Error::invalid(format!(
            "output '{name}': the classification extension is not supported"
        )));
    }
    Ok(OutputRequest {
        name,
        binary,
        shm: ShmRef::from_params(&output_params)?,
    })
}

/// JSON, or JSON followed by binary tensor data when any output asked for it.
fn encode_response(response: &InferResponse) -> Result<Response, Error> {
    let mut json = Vec::with_capacity(256);
    let mut blobs: Vec<Bytes> = Vec::new();
    json.extend_from_slice(b"{\"model_name\":");
    write_json_str(&mut json, &response.model_name);
    json.extend_from_slice(b",\"model_version\":");
    write_json_str(&mut json, &response.model_version);
    if !response.id.is_empty() {
        json.extend_from_slice(b",\"id\":");
        write_json_str(&mut json, &response.id);
    }
    json.extend_from_slice(b",\"outputs\":[");
    for (i, output) in response.outputs.iter().enumerate() {
        if i > 0 {
            json.push(b',');
        }
        json.extend_from_slice(b"{\"name\":");
        write_json_str(&mut json, &output.name);
        json.extend_from_slice(b",\"datatype\":\"");
        json.extend_from_slice(codec::datatype_name(output.tensor.dtype()).as_bytes());
        json.extend_from_slice(b"\",\"shape\":");
        json.extend_from_slice(
            serde_json::to_string(output.tensor.shape())
                .unwrap_or_default()
                .as_bytes(),
        );
        if output.shm.is_some() {
            // Shared-memory outputs carry no data and, as clients expect, no parameters.
        } else if output.binary {
            let raw = codec::to_raw(&output.tensor);
            json.extend_from_slice(b",\"parameters\":{\"binary_data_size\":");
            json.extend_from_slice(raw.len().to_string().as_bytes());
            json.push(b'}');
            blobs.push(raw);
        } else {
            json.extend_from_slice(b",\"data\":");
            write_flat(&mut json, &output.tensor)?;
        }
        json.push(b'}');
    }
    json.extend_from_slice(b"]}");
    if blobs.is_empty() {
        return Ok(raw_json_response(json));
    }
    let header_length = json.len();
    let total = header_length + blobs.iter().map(Bytes::len).sum::<usize>();
    let mut body = Vec::with_capacity(total);
    body.extend_from_slice(&json);
    for blob in &blobs {
        body.extend_from_slice(blob);
    }
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(HEADER_LENGTH, HeaderValue::from(header_length));
    Ok(response)
}

fn peer(addr: SocketAddr) -> Peer {
    Peer::Ip(addr.ip())
}

async fn shm_status_all(State(s): Shared, connection: Connection) -> Reply {
    shm_status_json(&s, None, connection_peer(connection))
}

async fn shm_status(State(s): Shared, connection: Connection, Path(region): Path<String>) -> Reply {
    shm_status_json(&s, Some(&region), connection_peer(connection))
}

fn shm_status_json(s: &InferService, region: Option<&str>, peer: Peer) -> Reply {
    let rows: Vec<Value> = s
        .shm()
        .status(region, peer)
        .map_err(Error::from)?
        .into_iter()
        .map(|r| json!({ "name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size }))
        .collect();
    Ok(json_response(&Value::Array(rows)))
}

async fn shm_register(
    State(s): Shared,
    connection: Connection,
    Path(region): Path<String>,
    body: Bytes,
) -> Reply {
    let request = parse_object(&body)?;
    let key = string_field(&request, "key", "register")?;
    let number = |field: &str| -> Result<u64, Error> {
        match request.get(field) {
            None if field == "offset" => Ok(0),
            Some(value) => value.as_u64().ok_or_else(|| {
                Error::invalid(format!(
                    "register: \"{field}\" must be a non-negative integer"
                ))
            }),
            None => Err(Error::invalid(format!("register: \"{field}\" is missing"))),
        }
    };
    let (offset, byte_size) = (number("offset")?, number("byte_size")?);
    s.shm()
        .register(&region, key, offset, byte_size, connection_peer(connection))
        .map_err(Error::from)?;
    Ok(ok().await)
}

async fn shm_unregister(
    State(s): Shared,
    connection: Connection,
    Path(region): Path<String>,
) -> Reply {
    s.shm()
        .unregister(Some(&region), connection_peer(connection))
        .map_err(Error::from)?;
    Ok(ok().await)
}

async fn shm_unregister_all(State(s): Shared, connection: Connection) -> Reply {
    s.shm()
        .unregister(None, connection_peer(connection))
        .map_err(Error::from)?;
    Ok(ok().await)
}

async fn cuda_status(Path(region): Path<String>) -> Reply {
    Err(Error::from(ShmError::NotFound(region)).into())
}

async fn cuda_register() -> Reply {
    Err(Error::from(ShmError::CudaUnsupported).into())
}
