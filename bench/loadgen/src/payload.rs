//! Request bodies, built once before the run. Every request of a run sends the same bytes
//! (per shared-memory slot), so the generator spends nothing per request on serialisation.

use std::collections::HashMap;

use bytes::Bytes;
use prost::Message;
use serde_json::{json, Value};
use tensorport_client::proto::inference::infer_parameter::ParameterChoice;
use tensorport_client::proto::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use tensorport_client::proto::inference::{InferParameter, InferTensorContents, ModelInferRequest};
use tensorport_client::proto::tensorflow::serving::{ModelSpec, PredictRequest};
use tensorport_client::proto::tensorflow::tensor_shape_proto::Dim;
use tensorport_client::proto::tensorflow::{DataType, TensorProto, TensorShapeProto};

use crate::config::{Config, InputSpec};
use crate::shm::{Placed, Placement};

/// One input's values for a whole request: `batch` rows.
pub struct InputData<'c> {
    pub spec: &'c InputSpec,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

impl InputData<'_> {
    pub fn le_bytes(&self) -> Bytes {
        self.values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
            .into()
    }

    fn shape_i64(&self) -> Vec<i64> {
        self.shape.iter().map(|&d| d as i64).collect()
    }

    /// The values as nested JSON lists, row by row (TF Serving's columnar format).
    fn nested(&self) -> Value {
        nest(&self.values, &self.shape)
    }
}

fn nest(values: &[f32], shape: &[usize]) -> Value {
    match shape.split_first() {
        None => values.first().map_or(Value::Null, |v| json!(v)),
        Some((_, [])) => json!(values),
        Some((&outer, inner)) => {
            let step = values.len() / outer.max(1);
            Value::Array(
                values
                    .chunks(step.max(1))
                    .map(|chunk| nest(chunk, inner))
                    .collect(),
            )
        }
    }
}

/// Deterministic values in [0, 1) (a small LCG: the same run sends the same data).
pub fn inputs(config: &Config) -> Vec<InputData<'_>> {
    let mut state: u32 = 0x2545_f491;
    config
        .inputs
        .iter()
        .map(|spec| {
            let count = config.batch * spec.row_elements();
            let values = (0..count)
                .map(|_| {
                    state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (state >> 8) as f32 / (1u32 << 24) as f32
                })
                .collect();
            let mut shape = vec![config.batch];
            shape.extend(&spec.row_shape);
            InputData {
                spec,
                shape,
                values,
            }
        })
        .collect()
}

fn shm_parameters(region: &str, place: Placement) -> HashMap<String, InferParameter> {
    let int = |v: usize| InferParameter {
        parameter_choice: Some(ParameterChoice::Int64Param(v as i64)),
    };
    HashMap::from([
        (
            "shared_memory_region".to_owned(),
            InferParameter {
                parameter_choice: Some(ParameterChoice::StringParam(region.to_owned())),
            },
        ),
        ("shared_memory_offset".to_owned(), int(place.offset)),
        ("shared_memory_byte_size".to_owned(), int(place.size)),
    ])
}

/// KServe `ModelInferRequest`, serialised: raw contents, typed contents, or shared memory.
pub fn kserve_grpc(config: &Config, data: &[InputData<'_>], shm: Placed<'_>) -> Bytes {
    let mut request = ModelInferRequest {
        model_name: config.model.clone(),
        ..Default::default()
    };
    for (i, input) in data.iter().enumerate() {
        let mut tensor = InferInputTensor {
            name: input.spec.name.clone(),
            datatype: "FP32".into(),
            shape: input.shape_i64(),
            ..Default::default()
        };
        match shm {
            Some((layout, _)) => {
                tensor.parameters = shm_parameters(&layout.region, layout.inputs[i]);
            }
            None if config.typed_contents => {
                tensor.contents = Some(InferTensorContents {
                    fp32_contents: input.values.clone(),
                    ..Default::default()
                });
            }
            None => request.raw_input_contents.push(input.le_bytes()),
        }
        request.inputs.push(tensor);
    }
    if let Some((layout, slot)) = shm {
        request.outputs = config
            .outputs
            .iter()
            .zip(layout.output_slot(slot))
            .map(|(spec, place)| InferRequestedOutputTensor {
                name: spec.name.clone(),
                parameters: shm_parameters(&layout.region, place),
            })
            .collect();
    }
    request.encode_to_vec().into()
}

/// TF Serving `PredictRequest`, serialised, tensors in `tensor_content`.
pub fn tfs_grpc(config: &Config, data: &[InputData<'_>]) -> Bytes {
    let inputs = data
        .iter()
        .map(|input| {
            let shape = TensorShapeProto {
                dim: input
                    .shape_i64()
                    .into_iter()
                    .map(|size| Dim {
                        size,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            };
            let proto = TensorProto {
                dtype: DataType::DtFloat as i32,
                tensor_shape: Some(shape),
                tensor_content: input.le_bytes(),
                ..Default::default()
            };
            (input.spec.name.clone(), proto)
        })
        .collect();
    PredictRequest {
        model_spec: Some(ModelSpec {
            name: config.model.clone(),
            ..Default::default()
        }),
        inputs,
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

/// KServe JSON body: data inline, or placed in shared memory.
pub fn kserve_json(config: &Config, data: &[InputData<'_>], shm: Placed<'_>) -> Bytes {
    let place_json = |region: &str, place: Placement| {
        json!({
            "shared_memory_region": region,
            "shared_memory_offset": place.offset,
            "shared_memory_byte_size": place.size,
        })
    };
    let inputs: Vec<Value> = data
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let mut tensor = json!({
                "name": input.spec.name,
                "shape": input.shape,
                "datatype": "FP32",
            });
            match shm {
                Some((layout, _)) => {
                    tensor["parameters"] = place_json(&layout.region, layout.inputs[i]);
                }
                None => tensor["data"] = json!(input.values),
            }
            tensor
        })
        .collect();
    let mut body = json!({ "inputs": inputs });
    if let Some((layout, slot)) = shm {
        body["outputs"] = config
            .outputs
            .iter()
            .zip(layout.output_slot(slot))
            .map(|(spec, place)| {
                json!({ "name": spec.name, "parameters": place_json(&layout.region, place) })
            })
            .collect();
    }
    body.to_string().into()
}

/// KServe binary-tensor body (JSON header, then the raw tensors) and the header's length.
pub fn kserve_binary(data: &[InputData<'_>]) -> (Bytes, usize) {
    let inputs: Vec<Value> = data
        .iter()
        .map(|input| {
            json!({
                "name": input.spec.name,
                "shape": input.shape,
                "datatype": "FP32",
                "parameters": { "binary_data_size": input.values.len() * 4 },
            })
        })
        .collect();
    let header = json!({ "inputs": inputs, "parameters": { "binary_data_output": true } })
        .to_string()
        .into_bytes();
    let header_len = header.len();
    let mut body = header;
    for input in data {
        body.extend(input.values.iter().flat_map(|v| v.to_le_bytes()));
    }
    (body.into(), header_len)
}

/// TF Serving REST `:predict` body in the columnar format: `{"inputs": {NAME: [[...]]}}`.
pub fn tfs_rest(data: &[InputData<'_>]) -> Bytes {
    let inputs: serde_json::Map<String, Value> = data
        .iter()
        .map(|input| (input.spec.name.clone(), input.nested()))
        .collect();
    json!({ "inputs": inputs }).to_string().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Protocol;

    #[test]
    fn nested_json_keeps_rows() {
        assert_eq!(
            nest(&[1.0, 2.0, 3.0, 4.0], &[2, 2]),
            json!([[1.0, 2.0], [3.0, 4.0]])
        );
        assert_eq!(nest(&[1.0, 2.0], &[2]), json!([1.0, 2.0]));
    }

    #[test]
    fn binary_body_is_header_then_little_endian_floats() {
        let mut config = Config::new(
            Protocol::KserveHttpBinary,
            "127.0.0.1:1",
            "m",
            vec!["x:2".parse().unwrap()],
        );
        config.batch = 3;
        let data = inputs(&config);
        assert_eq!(data[0].shape, vec![3, 2]);
        let (body, header_len) = kserve_binary(&data);
        assert_eq!(body.len(), header_len + 6 * 4);
        let header: Value = serde_json::from_slice(&body[..header_len]).unwrap();
        assert_eq!(header["inputs"][0]["parameters"]["binary_data_size"], 24);
        let first = f32::from_le_bytes(body[header_len..header_len + 4].try_into().unwrap());
        assert_eq!(first, data[0].values[0]);
    }
}
