//! What a message of `ModelStreamInfer` is charged to the request memory budget: exactly what
//! the transport charges the same `ModelInferRequest` sent as a `ModelInfer` call
//! ([`footprint::grpc`]), so that a request costs the same whichever way it comes.
//!
//! The transport estimates a call from its body before anything decodes it; a stream's
//! messages reach the server through tonic's decoder instead, one at a time, so the same
//! estimate is computed here from the decoded message, field by field as the transport's scan
//! meets them on the wire (proto3 leaves out empty strings, empty packed lists and unset
//! messages; a map entry leaves out a default key or value).

use std::collections::HashMap;

use prost::Message;

use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::proto::inference::{InferParameter, InferTensorContents, ModelInferRequest};
use crate::request::DecodedFootprint;
use crate::transport::footprint::{MESSAGE_BYTES, STRING_BYTES};

/// gRPC's prefix of each message: a compression flag and a 4-byte length.
const GRPC_PREFIX: u64 = 5;

/// The charge for `message`, as if it were the body of a `ModelInfer` call.
pub fn footprint(message: &ModelInferRequest) -> DecodedFootprint {
    let body = GRPC_PREFIX.saturating_add(len(message.encoded_len()));
    let mut extra = strings(&[&message.model_name, &message.model_version, &message.id])
        .saturating_add(parameters(&message.parameters))
        .saturating_add(len(message.raw_input_contents.len()).saturating_mul(STRING_BYTES));
    for input in &message.inputs {
        let contents = input.contents.as_ref().map_or(0, |contents| {
            MESSAGE_BYTES.saturating_add(typed_contents(contents))
        });
        extra = extra
            .saturating_add(MESSAGE_BYTES)
            .saturating_add(strings(&[&input.name, &input.datatype]))
            .saturating_add(len(input.shape.len()).saturating_mul(8))
            .saturating_add(parameters(&input.parameters))
            .saturating_add(contents);
    }
    for output in &message.outputs {
        extra = extra
            .saturating_add(MESSAGE_BYTES)
            .saturating_add(strings(&[&output.name]))
            .saturating_add(parameters(&output.parameters));
    }
    // The body itself and one decoded copy of it, as the transport charges a call.
    DecodedFootprint(body.saturating_mul(2).saturating_add(extra))
}

fn len(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Strings present on the wire (not empty) are charged one string each.
fn strings(fields: &[&String]) -> u64 {
    len(fields.iter().filter(|field| !field.is_empty()).count()).saturating_mul(STRING_BYTES)
}

/// A parameter map: each entry is an embedded message holding its key (a string) and its
/// value (an embedded `InferParameter`, whose one string choice is charged as a string).
fn parameters(map: &HashMap<String, InferParameter>) -> u64 {
    map.iter()
        .map(|(key, value)| {
            let value = match &value.parameter_choice {
                None => 0,
                Some(ParameterChoice::StringParam(_)) => MESSAGE_BYTES.saturating_add(STRING_BYTES),
                Some(_) => MESSAGE_BYTES,
            };
            MESSAGE_BYTES
                .saturating_add(strings(&[key]))
                .saturating_add(value)
        })
        .fold(0, u64::saturating_add)
}

/// Typed contents: packed integer lists at their decoded width, packed floats as one string
/// each (decoded at their wire size), and one string per BYTES element.
fn typed_contents(contents: &InferTensorContents) -> u64 {
    let packed = |n: usize, width: u64| len(n).saturating_mul(width);
    let floats = |present: bool| if present { STRING_BYTES } else { 0 };
    packed(contents.bool_contents.len(), 1)
        .saturating_add(packed(contents.int_contents.len(), 4))
        .saturating_add(packed(contents.int64_contents.len(), 8))
        .saturating_add(packed(contents.uint_contents.len(), 4))
        .saturating_add(packed(contents.uint64_contents.len(), 8))
        .saturating_add(floats(!contents.fp32_contents.is_empty()))
        .saturating_add(floats(!contents.fp64_contents.is_empty()))
        .saturating_add(packed(contents.bytes_contents.len(), STRING_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::model_infer_request::{
        InferInputTensor, InferRequestedOutputTensor,
    };
    use crate::transport::footprint;

    fn as_a_call(message: &ModelInferRequest) -> u64 {
        let encoded = message.encode_to_vec();
        let mut body = vec![0];
        body.extend_from_slice(&u32::try_from(encoded.len()).unwrap_or(0).to_be_bytes());
        body.extend_from_slice(&encoded);
        footprint::grpc("/inference.GRPCInferenceService/ModelInfer", &body)
    }

    fn param(choice: ParameterChoice) -> InferParameter {
        InferParameter {
            parameter_choice: Some(choice),
        }
    }

    fn params() -> HashMap<String, InferParameter> {
        HashMap::from([
            (
                "priority".to_owned(),
                param(ParameterChoice::Uint64Param(1)),
            ),
            (
                "label".to_owned(),
                param(ParameterChoice::StringParam(String::new())),
            ),
            ("flag".to_owned(), param(ParameterChoice::BoolParam(false))),
            ("".to_owned(), param(ParameterChoice::DoubleParam(0.5))),
            ("unset".to_owned(), InferParameter::default()),
        ])
    }

    fn cases() -> Vec<ModelInferRequest> {
        let input = |name: &str, contents: Option<InferTensorContents>| InferInputTensor {
            name: name.to_owned(),
            datatype: "FP32".to_owned(),
            shape: vec![2, 300],
            parameters: params(),
            contents,
        };
        vec![
            ModelInferRequest::default(),
            ModelInferRequest {
                model_name: "spin".into(),
                id: "m1".into(),
                inputs: vec![input("x", None), input("", None)],
                raw_input_contents: vec![vec![7u8; 4096].into(), bytes::Bytes::new()],
                ..Default::default()
            },
            ModelInferRequest {
                model_name: "echo".into(),
                model_version: "3".into(),
                parameters: params(),
                inputs: vec![
                    input(
                        "typed",
                        Some(InferTensorContents {
                            bool_contents: vec![true; 3],
                            int_contents: vec![-1, 300, 0],
                            int64_contents: vec![1 << 40; 5],
                            uint_contents: vec![9],
                            uint64_contents: vec![u64::MAX, 0],
                            fp32_contents: vec![0.5; 10],
                            fp64_contents: vec![1.5],
                            bytes_contents: vec![bytes::Bytes::new(); 1000],
                        }),
                    ),
                    input("empty", Some(InferTensorContents::default())),
                ],
                outputs: vec![
                    InferRequestedOutputTensor {
                        name: "y".into(),
                        parameters: params(),
                    },
                    InferRequestedOutputTensor::default(),
                ],
                ..Default::default()
            },
        ]
    }

    #[test]
    fn a_message_is_charged_what_the_same_request_is_charged_as_a_call() {
        for message in cases() {
            assert_eq!(footprint(&message).0, as_a_call(&message), "{message:?}");
        }
    }
}
