//! The KServe v2 JSON infer request: the envelope (`body.rs`) turned into an
//! [`InferRequest`], each input's `data` decoded straight into its tensor.

use std::borrow::Cow;

use axum::body::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::body::{Entry, InferBody, Inputs};
use super::lift::{lift, Lifted};
use super::support::{params, string_field};
use crate::api::json;
use crate::api::json::decode::{decode_flat, decode_flat_unparsed};
use crate::api::kserve::classification::class_count;
use crate::api::kserve::codec;
use crate::api::kserve::params::{param_bool, scheduling_params, sequence_params, Param, Params};
use crate::api::kserve::raw_input::raw_input;
use crate::api::kserve::request::{InferRequest, InputData, InputRequest, OutputRequest, ShmRef};
use crate::error::Error;
use crate::request::{HeldMemory, RequestContext};
use crate::tensor::{shape_from_dims, DecodeLimits};
use crate::wire_error::{BodyError, InferRequestError};

/// Decodes an infer request body: its JSON part, and the binary-extension bytes that follow
/// it. The model and version, which come from the path, are left empty. This is the whole
/// wire-to-request step, so tests and fuzzers drive it with arbitrary bytes.
///
/// A body with large lists of numbers in its inputs' `data` first takes the lifted route
/// (`lift.rs`); the general one answers everything that route does not take, errors
/// included, so both give the same answer.
pub fn decode_infer_body(
    json: &[u8],
    binary: Bytes,
    limits: &DecodeLimits,
) -> Result<InferRequest, Error> {
    decode_infer_body_charged(json, binary, limits, None)
}

/// [`decode_infer_body`] for a request with a `context`: what a BYTES input in the binary
/// part holds once decoded is charged to the request memory budget before it is built, and
/// the charge travels with the request ([`InferRequest::memory`]).
pub fn decode_infer_body_charged(
    json: &[u8],
    binary: Bytes,
    limits: &DecodeLimits,
    context: Option<&RequestContext>,
) -> Result<InferRequest, Error> {
    let lifted = lift(json).and_then(|lifted| decode_lifted(&lifted, &binary, limits, context));
    if let Some(request) = lifted {
        return Ok(request);
    }
    let mut rewritten = Vec::new();
    let request = parse_infer_body(json, &mut rewritten)?;
    decode_request(&request, None, binary, limits, context)
}

/// The request from a lifted body, if its envelope parses, every lifted list is claimed by
/// an input's `data` (so the structural pass and the parser agree on where the lists were)
/// and everything decodes.
fn decode_lifted(
    lifted: &Lifted<'_>,
    binary: &Bytes,
    limits: &DecodeLimits,
    context: Option<&RequestContext>,
) -> Option<InferRequest> {
    let request: InferBody = serde_json::from_slice(lifted.envelope()).ok()?;
    let Some(Inputs::List(inputs)) = &request.inputs else {
        return None;
    };
    let claimed = inputs
        .iter()
        .filter_map(|input| match input {
            Entry::Object(input) => input.data.and_then(|data| lifted.list(data)),
            Entry::NotAnObject => None,
        })
        .count();
    if claimed != lifted.len() {
        return None;
    }
    decode_request(&request, Some(lifted), binary.clone(), limits, context).ok()
}

/// The infer request envelope, read in one pass; tensor data stays text until its input's
/// dtype and shape are known.
fn parse_infer_body<'a>(
    body: &'a [u8],
    rewritten: &'a mut Vec<u8>,
) -> Result<InferBody<'a>, Error> {
    if let Some(err) = json::body::not_an_object(body) {
        return Err(err.into());
    }
    json::body::parse_borrowed(body, rewritten).map_err(|err| {
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

/// The string member `key` of the object `what()` describes: borrowed from the body unless it
/// has escapes. Refused as missing or as not a string, the way [`string_field`] words it.
fn string_member<'a>(
    raw: Option<&'a RawValue>,
    key: &'static str,
    what: impl Fn() -> String,
) -> Result<Cow<'a, str>, Error> {
    if let Some(text) = raw.and_then(|raw| serde_json::from_str::<&str>(raw.get()).ok()) {
        return Ok(Cow::Borrowed(text));
    }
    let mut member = Map::new();
    if let Some(value) = small(raw) {
        member.insert(key.to_owned(), value);
    }
    string_field(&member, key, &what()).map(|text| Cow::Owned(text.to_owned()))
}

/// The `shape` member of the input `what()` describes: a list of integers.
fn shape_member(raw: Option<&RawValue>, what: impl Fn() -> String) -> Result<Vec<i64>, Error> {
    if let Some(dims) = raw.and_then(|raw| serde_json::from_str::<Vec<i64>>(raw.get()).ok()) {
        return Ok(dims);
    }
    match small(raw) {
        Some(Value::Array(dims)) => dims
            .iter()
            .map(|d| {
                d.as_i64()
                    .ok_or_else(|| InferRequestError::ShapeNotIntegers { what: what() }.into())
            })
            .collect(),
        _ => Err(InferRequestError::ShapeNotArray { what: what() }.into()),
    }
}

fn decode_request(
    request: &InferBody<'_>,
    lifted: Option<&Lifted<'_>>,
    binary: Bytes,
    limits: &DecodeLimits,
    context: Option<&RequestContext>,
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
    let mut memory = HeldMemory::default();
    let mut binary_part = BinaryPart {
        bytes: &binary,
        cursor: &mut cursor,
        context,
        memory: &mut memory,
    };
    let inputs = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| decode_input(i, input, lifted, &mut binary_part, limits))
        .collect::<Result<Vec<_>, _>>()?;
    if cursor != binary.len() {
        return Err(BodyError::UnclaimedBinary(binary.len() - cursor).into());
    }
    let all_binary = param_bool(&request_params, "binary_data_output")?;
    let (priority, timeout) = scheduling_params(&request_params)?;
    let sequence = sequence_params(&request_params)?;
    let outputs = match small(request.outputs) {
        None => Vec::new(),
        Some(Value::Array(outputs)) => outputs
            .iter()
            .map(|output| decode_output(output, all_binary))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(InferRequestError::OutputsNotArray.into()),
    };
    Ok(InferRequest {
        model: String::new(),
        version: String::new(),
        id,
        inputs,
        outputs,
        binary_by_default: all_binary,
        priority,
        timeout,
        sequence,
        memory,
    })
}

/// The binary-extension bytes after the JSON part, read input by input, and what the BYTES
/// inputs among them are charged.
struct BinaryPart<'b> {
    bytes: &'b Bytes,
    /// Where the next input's bytes start.
    cursor: &'b mut usize,
    context: Option<&'b RequestContext>,
    memory: &'b mut HeldMemory,
}

fn decode_input(
    index: usize,
    input: &Entry<'_>,
    lifted: Option<&Lifted<'_>>,
    binary: &mut BinaryPart<'_>,
    limits: &DecodeLimits,
) -> Result<InputRequest, Error> {
    // The descriptions only errors use are written when one occurs.
    let Entry::Object(input) = input else {
        let what = format!("input {index}");
        return Err(InferRequestError::InputNotObject { what }.into());
    };
    let name = string_member(input.name, "name", || format!("input {index}"))?.into_owned();
    let what = || format!("input '{name}'");
    let datatype = string_member(input.datatype, "datatype", what)?;
    let dtype = codec::parse_datatype(&datatype).map_err(|err| Error::from(err.in_input(&name)))?;
    let dims = shape_member(input.shape, what)?;
    let shape = shape_from_dims(&dims).map_err(|err| Error::from(err.in_input(&name)))?;
    let input_params = match input.parameters {
        None => Params::new(),
        Some(raw) => params(small(Some(raw)).as_ref(), &what())?,
    };
    let shm = ShmRef::from_params(&input_params)?;
    let binary_size = match input_params.get("binary_data_size") {
        None => None,
        Some(Param::Uint(n)) => Some(
            usize::try_from(*n)
                .map_err(|_| InferRequestError::BinarySizeTooLarge { what: what() })?,
        ),
        Some(_) => return Err(InferRequestError::BinarySizeNotInteger { what: what() }.into()),
    };
    let data = input.data;
    let sources = usize::from(shm.is_some())
        + usize::from(binary_size.is_some())
        + usize::from(data.is_some());
    if sources > 1 {
        return Err(InferRequestError::SeveralDataSources {
            what: what(),
            sources,
        }
        .into());
    }
    let data = match (shm, binary_size, data) {
        (Some(shm), _, _) => InputData::SharedMemory(shm),
        (None, Some(size), _) => {
            let end = binary
                .cursor
                .checked_add(size)
                .filter(|&end| end <= binary.bytes.len())
                .ok_or_else(|| InferRequestError::BinaryPastEnd { what: what(), size })?;
            let raw = binary.bytes.slice(*binary.cursor..end);
            *binary.cursor = end;
            InputData::Inline(raw_input(
                &name,
                dtype,
                shape.clone(),
                raw,
                binary.context,
                binary.memory,
            )?)
        }
        (None, None, Some(data)) => {
            let decoded = match lifted.and_then(|lifted| lifted.list(data)) {
                Some(list) => decode_flat_unparsed(list, shape.clone(), dtype, limits),
                None => decode_flat(data, shape.clone(), dtype, limits),
            };
            InputData::Inline(decoded.map_err(|e| e.in_input(&name))?)
        }
        (None, None, None) => return Err(InferRequestError::NoData { what: what() }.into()),
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
    Ok(OutputRequest {
        classification: class_count(&name, &output_params)?,
        shm: ShmRef::from_params(&output_params)?,
        name,
        binary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The general route alone, as every body took it before lifting.
    fn general(json: &[u8], binary: Bytes) -> Result<InferRequest, Error> {
        let mut rewritten = Vec::new();
        let request = parse_infer_body(json, &mut rewritten)?;
        decode_request(&request, None, binary, &DecodeLimits::default(), None)
    }

    fn outcome(result: Result<InferRequest, Error>) -> String {
        match result {
            Ok(request) => format!("{request:?}"),
            Err(err) => format!("error: {err}"),
        }
    }

    fn numbers(count: usize, spell: impl Fn(usize) -> String) -> String {
        let values: Vec<String> = (0..count).map(spell).collect();
        values.join(",")
    }

    #[test]
    fn the_lifted_route_answers_as_the_general_one() {
        let floats = numbers(3000, |i| format!("{}", (i as f32 * 0.37).sin()));
        let ints = numbers(3000, |i| format!("{}", i % 300));
        let input = |dtype: &str, shape: &str, data: &str| {
            format!(r#"{{"name": "x", "datatype": "{dtype}", "shape": {shape}, "data": {data}}}"#)
        };
        let bodies = [
            input("FP32", "[3000]", &format!("[{floats}]")),
            input(
                "FP64",
                "[2, 3000]",
                &format!("[[{}], [{}]]", &floats[..], &floats[..]),
            ),
            input("FP32", "[3000]", &format!("[ {floats} ]")),
            input("INT32", "[3000]", &format!("[{ints}]")),
            // Out of range, wrong count, not JSON, strings and literals among the numbers.
            input("UINT8", "[3000]", &format!("[{ints}]")),
            input("FP32", "[2999]", &format!("[{floats}]")),
            input("FP32", "[3001]", &format!("[{floats},]")),
            input("FP32", "[3001]", &format!("[{floats},,1]")),
            input("FP32", "[3001]", &format!("[{floats},01]")),
            input("FP32", "[3001]", &format!("[{floats},1e]")),
            input("FP32", "[3001]", &format!("[{floats},\"NaN\"]")),
            input("FP32", "[3001]", &format!("[{floats},NaN]")),
            input("FP32", "[3000]", &format!("[{floats}] ]")),
            input("BOOL", "[3000]", &format!("[{ints}]")),
            input("FP32", "[3000", &format!("[{floats}]")),
            input("FP99", "[3000]", &format!("[{floats}]")),
            format!(
                r#"{{"name": "x", "datatype": "FP32", "shape": [3000], "data": [{floats}], "data": [{floats}]}}"#
            ),
            format!(
                r#"{{"name": "x", "datatype": "FP32", "shape": [3000], "data": [{floats}], "parameters": {{"binary_data_size": 4}}}}"#
            ),
        ];
        for (index, body) in bodies.into_iter().enumerate() {
            // The first four are well formed: the lifted route must take them itself.
            let plain = format!(r#"{{"inputs": [{body}]}}"#);
            let lifted = lift(plain.as_bytes());
            let taken = lifted.as_ref().and_then(|lifted| {
                decode_lifted(lifted, &Bytes::new(), &DecodeLimits::default(), None)
            });
            assert_eq!(taken.is_some(), index < 4, "{index}: {:.200}", plain);
            for json in [
                format!(r#"{{"inputs": [{body}]}}"#),
                format!(
                    r#"{{"id": "r", "inputs": [{body}, {body}], "outputs": [{{"name": "y"}}]}}"#
                ),
                format!(r#"{{"inputs": [{body}], "parameters": {{"x": [1, 2}}}}"#),
                format!(r#"{{"inputs": [{body}]}} {{"#),
            ] {
                let binary = Bytes::from_static(&[0; 4]);
                let fast =
                    decode_infer_body(json.as_bytes(), binary.clone(), &DecodeLimits::default());
                let slow = general(json.as_bytes(), binary);
                assert_eq!(outcome(fast), outcome(slow), "{:.200}", json);
            }
        }
    }
}
