//! KServe v2 HTTP inference: `POST /v2/models/{name}[/versions/{version}]/infer`, with
//! Triton's binary tensor data extension. The JSON body is decoded in `decode.rs`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Extension;

use super::decode::decode_infer_body_charged;
use super::support::{connection_peer, Connection, Reply, Shared};
use crate::api::http::body::{read_payload, Payload};
use crate::api::http::heavy::{json_text_estimate, run_heavy};
use crate::api::http::response::raw_json_response;
use crate::api::json::encode::{write_flat, write_json_str};
use crate::api::kserve::codec;
use crate::api::kserve::infer::infer;
use crate::api::kserve::request::{InferRequest, InferResponse};
use crate::error::Error;
use crate::infer::InferService;
use crate::request::RequestContext;
use crate::shm::Peer;
use crate::wire_error::BodyError;

/// Header that splits a binary-extension body into its JSON part and its tensor data.
const HEADER_LENGTH: &str = "inference-header-content-length";

pub(super) async fn infer_latest(
    State(s): Shared,
    Path(name): Path<String>,
    context: Option<Extension<Arc<RequestContext>>>,
    connection: Connection,
    JsonLength(json_length): JsonLength,
    Payload(body): Payload,
) -> Reply {
    let peer = connection_peer(connection);
    let context = context.as_ref().map(|Extension(context)| context.as_ref());
    run_infer(&s, name, String::new(), context, peer, json_length, body).await
}

pub(super) async fn infer_version(
    State(s): Shared,
    Path((name, version)): Path<(String, String)>,
    context: Option<Extension<Arc<RequestContext>>>,
    connection: Connection,
    JsonLength(json_length): JsonLength,
    Payload(body): Payload,
) -> Reply {
    let peer = connection_peer(connection);
    let context = context.as_ref().map(|Extension(context)| context.as_ref());
    run_infer(&s, name, version, context, peer, json_length, body).await
}

/// Inference for a request that `crate::api::hot_routes` matched, `version` empty for the
/// latest: what the extractors of [`infer_latest`] and [`infer_version`] take, taken from the
/// request itself, and answered by the same [`run_infer`].
pub async fn infer_request(
    s: &InferService,
    model: String,
    version: String,
    request: axum::extract::Request,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let context = parts.extensions.remove::<Arc<RequestContext>>();
    if let Some(context) = &context {
        context.name_model(&model);
    }
    let connection = parts.extensions.remove::<ConnectInfo<SocketAddr>>();
    let peer = connection_peer(connection.map(Extension));
    let json_length = parts.headers.get(HEADER_LENGTH).cloned();
    let reply = match read_payload(body).await {
        Ok(body) => {
            run_infer(
                s,
                model,
                version,
                context.as_deref(),
                peer,
                json_length,
                body,
            )
            .await
        }
        Err(refused) => Err(refused),
    };
    reply.into_response()
}

pub(super) async fn run_infer(
    s: &InferService,
    model: String,
    version: String,
    context: Option<&RequestContext>,
    peer: Peer,
    json_length: Option<HeaderValue>,
    body: Bytes,
) -> Reply {
    let (header, binary) = split_body(json_length.as_ref(), body)?;
    let decoded = InferRequest {
        model,
        version,
        ..run_heavy(header.len(), || {
            decode_infer_body_charged(&header, binary, s.limits(), context)
        })?
    };
    // The JSON text is decoded: let it go before the model runs and the answer is written, so
    // a large request never holds its body and its answer at once.
    drop(header);
    let response = infer(s, decoded, peer, context).await?;
    let elements = response
        .outputs
        .iter()
        .map(|o| o.tensor.element_count())
        .sum();
    Ok(run_heavy(json_text_estimate(elements), || {
        encode_response(&response)
    })?)
}

/// A shape as a JSON list, `[2,16]`.
fn write_shape(json: &mut Vec<u8>, shape: &[usize]) {
    json.push(b'[');
    let mut digits = itoa::Buffer::new();
    for (i, dim) in shape.iter().enumerate() {
        if i > 0 {
            json.push(b',');
        }
        json.extend_from_slice(digits.format(*dim).as_bytes());
    }
    json.push(b']');
}

/// The binary extension's `Inference-Header-Content-Length`, the one header infer reads
/// (taken alone: a `HeaderMap` argument would copy every header of every request).
pub(super) struct JsonLength(Option<HeaderValue>);

impl<S: Send + Sync> FromRequestParts<S> for JsonLength {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(Self(parts.headers.get(HEADER_LENGTH).cloned()))
    }
}

/// Splits a binary-extension body at `Inference-Header-Content-Length` (`json_length`).
pub(super) fn split_body(
    json_length: Option<&HeaderValue>,
    body: Bytes,
) -> Result<(Bytes, Bytes), Error> {
    let Some(value) = json_length else {
        return Ok((body, Bytes::new()));
    };
    let length = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .ok_or(BodyError::HeaderLengthInvalid)?;
    if length > body.len() {
        return Err(BodyError::HeaderLengthPastEnd {
            length,
            body: body.len(),
        }
        .into());
    }
    Ok((body.slice(..length), body.slice(length..)))
}

/// JSON, or JSON followed by binary tensor data when any output asked for it.
pub(super) fn encode_response(response: &InferResponse) -> Result<Response, Error> {
    let mut json = Vec::with_capacity(256);
    let mut blobs: Vec<Bytes> = Vec::new();
    json.extend_from_slice(b"{\"model_name\":");
    write_json_str(&mut json, &response.model_name);
    json.extend_from_slice(b",\"model_version\":");
    match &response.model_version_name {
        Some(name) => write_json_str(&mut json, name),
        None => {
            json.push(b'"');
            json.extend_from_slice(
                itoa::Buffer::new()
                    .format(response.model_version)
                    .as_bytes(),
            );
            json.push(b'"');
        }
    }
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
        write_shape(&mut json, output.tensor.shape());
        if output.shm.is_some() {
            // Shared-memory outputs carry no data and, as clients expect, no parameters.
        } else if output.binary {
            let raw = codec::to_raw(&output.tensor);
            json.extend_from_slice(b",\"parameters\":{\"binary_data_size\":");
            json.extend_from_slice(itoa::Buffer::new().format(raw.len()).as_bytes());
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
    headers.insert(
        HeaderName::from_static(HEADER_LENGTH),
        HeaderValue::from(header_length),
    );
    Ok(response)
}
