//! The KServe v2 JSON infer request: the envelope (`infer_body`) turned into an
//! [`InferRequest`], each input's `data` decoded straight into its tensor.

use axum::body::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::http::{params, string_field};
use super::infer_body::{Entry, InferBody, Inputs};
use super::{
    codec, param_bool, scheduling_params, InferRequest, InputData, InputRequest, OutputRequest,
    Param, ShmRef,
};
use crate::api::json_body;
use crate::api::json_decode::decode_flat;
use crate::error::Error;
use crate::tensor::{shape_from_dims, DecodeLimits};
use crate::wire_error::{BodyError, InferRequestError};

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
    if let Some(err) = json_body::not_an_object(body) {
        return Err(err.into());
    }
    json_body::parse_borrowed(body, rewritten).map_err(|err| {
        if err.is_data() {
            BodyError::Malformed(err.to_string()).into()
        } else {
            BodyError::NotJson(err.to_string()).into()
        }
    })
}

/// A small envelope member (a name, a shape, parameters) as a `Value`.
fn small(raw: Option<&RawValue>) -> Option<Value> {
    raw.and_then(|raw| serde_json::from_str(raw.get()).ok())
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
        Some(_) => return Err(InferRequestError::IdNotString.into()),
    };
    let request_params = params(small(request.parameters).as_ref(), "request")?;
    let Some(Inputs::List(inputs)) = &request.inputs else {
        return Err(InferRequestError::NoInputs.into());
    };
    let mut cursor = 0usize;
    let inputs = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| decode_input(i, input, &binary, &mut cursor, limits))
        .collect::<Result<Vec<_>, _>>()?;
    if cursor != binary.len() {
        return Err(BodyError::UnclaimedBinary(binary.len() - cursor).into());
    }
    let all_binary = param_bool(&request_params, "binary_data_output")?;
    let (priority, timeout) = scheduling_params(&request_params)?;
    let outputs = match small(request.outputs) {
        None => Vec::new(),
        Some(Value::Array(outputs)) => outputs
            .iter()
            .map(|output| decode_output(output, all_binary))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(InferRequestError::OutputsNotArray.into()),
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
        return Err(InferRequestError::InputNotObject { what }.into());
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
                    .ok_or_else(|| InferRequestError::ShapeNotIntegers { what: what.clone() })
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(InferRequestError::ShapeNotArray { what }.into()),
    };
    let shape = shape_from_dims(&dims).map_err(|err| Error::from(err.in_input(&name)))?;
    let input_params = params(envelope.get("parameters"), &what)?;
    let shm = ShmRef::from_params(&input_params)?;
    let binary_size = match input_params.get("binary_data_size") {
        None => None,
        Some(Param::Uint(n)) => Some(
            usize::try_from(*n)
                .map_err(|_| InferRequestError::BinarySizeTooLarge { what: what.clone() })?,
        ),
        Some(_) => return Err(InferRequestError::BinarySizeNotInteger { what }.into()),
    };
    let data = input.data;
    let sources = usize::from(shm.is_some())
        + usize::from(binary_size.is_some())
        + usize::from(data.is_some());
    if sources > 1 {
        return Err(InferRequestError::SeveralDataSources { what, sources }.into());
    }
    let data = match (shm, binary_size, data) {
        (Some(shm), _, _) => InputData::SharedMemory(shm),
        (None, Some(size), _) => {
            let end = cursor
                .checked_add(size)
                .filter(|&end| end <= binary.len())
                .ok_or_else(|| InferRequestError::BinaryPastEnd {
                    what: what.clone(),
                    size,
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
        (None, None, None) => return Err(InferRequestError::NoData { what }.into()),
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
        return Err(InferRequestError::OutputNotObject.into());
    };
    let name = string_field(output, "name", "requested output")?.to_owned();
    let output_params = params(output.get("parameters"), &format!("output '{name}'"))?;
    let binary = match output_params.get("binary_data") {
        Some(Param::Bool(b)) => *b,
        Some(_) => return Err(InferRequestError::BinaryDataNotBoolean(name).into()),
        None => all_binary,
    };
    if output_params.contains_key("classification") {
        return Err(InferRequestError::ClassificationUnsupported(name).into());
    }
    Ok(OutputRequest {
        name,
        binary,
        shm: ShmRef::from_params(&output_params)?,
    })
}
