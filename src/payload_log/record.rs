//! One logged request: its inputs and answer, captured on the request path, and their two
//! encodings: TF Serving's `PredictionLog` (for TFRecord files) and a KServe v2 JSON line.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use prost::Message;
use serde_json::{json, Value};

use crate::backend::NamedTensor;
use crate::proto::tensorflow::serving::{
    model_spec::VersionChoice, prediction_log::LogType, LogMetadata, ModelSpec, PredictLog,
    PredictRequest, PredictResponse, PredictionLog, SamplingConfig,
};
use crate::tensor::{tensor_proto, BoolByte, DataType, Element, Tensor, TensorData};

use super::config::LogFormat;
use super::tfrecord::{begin_frame, end_frame};

/// `request_origin` of a shadow copy's record, so that readers can tell it from client traffic.
pub const SHADOW_ORIGIN: &str = "shadow";

/// A request and its answer, owned: nothing in it points into a client's memory.
#[derive(Debug, Clone)]
pub struct PayloadRecord {
    pub model: Arc<str>,
    pub version: i64,
    pub signature: String,
    /// A number unique within the process, the JSON line's `id`.
    pub id: u64,
    pub timestamp: SystemTime,
    /// The share of requests sampled, as the record's metadata says it.
    pub sample: f64,
    /// Empty for client traffic; [`SHADOW_ORIGIN`] for a shadow copy.
    pub origin: &'static str,
    pub inputs: Vec<NamedTensor>,
    pub outputs: Vec<NamedTensor>,
}

impl PayloadRecord {
    /// The record's bytes in `format`: a serialised `PredictionLog` (unframed) or one JSON line
    /// with its newline.
    pub fn encode(&self, format: LogFormat) -> Vec<u8> {
        match format {
            LogFormat::PredictionLog => self.prediction_log().encode_to_vec(),
            LogFormat::Jsonl => {
                let mut line = self.json_line().to_string().into_bytes();
                line.push(b'\n');
                line
            }
        }
    }

    /// Appends the record as its file holds it to `out`: a framed TFRecord of the
    /// `PredictionLog`, or one JSON line. Encoding in place saves the copy (and the
    /// allocation) that framing a separately encoded message would take.
    pub fn write_into(&self, format: LogFormat, out: &mut Vec<u8>) {
        match format {
            LogFormat::PredictionLog => {
                let log = self.prediction_log();
                let start = begin_frame(log.encoded_len(), out);
                // A Vec grows as needed: encoding into one cannot run out of room.
                let _ = log.encode(out);
                end_frame(start, out);
            }
            LogFormat::Jsonl => {
                // Writing JSON into memory fails only for maps with non-string keys: none here.
                let _ = serde_json::to_writer(&mut *out, &self.json_line());
                out.push(b'\n');
            }
        }
    }

    /// TF Serving's record of a Predict call.
    pub fn prediction_log(&self) -> PredictionLog {
        let model_spec = ModelSpec {
            name: self.model.to_string(),
            signature_name: self.signature.clone(),
            version_choice: Some(VersionChoice::Version(self.version)),
        };
        let request = PredictRequest {
            model_spec: Some(model_spec.clone()),
            inputs: self
                .inputs
                .iter()
                .map(|(name, tensor)| (name.clone(), tensor_proto::encode(tensor)))
                .collect(),
            ..Default::default()
        };
        let response = PredictResponse {
            model_spec: Some(model_spec.clone()),
            outputs: self
                .outputs
                .iter()
                .map(|(name, tensor)| (name.clone(), tensor_proto::encode(tensor)))
                .collect(),
        };
        let timestamp_secs = self
            .timestamp
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs() as i64);
        PredictionLog {
            log_metadata: Some(LogMetadata {
                model_spec: Some(model_spec),
                sampling_config: Some(SamplingConfig {
                    sampling_rate: self.sample,
                    ..Default::default()
                }),
                timestamp_secs,
                request_origin: self.origin.to_string(),
                ..Default::default()
            }),
            log_type: Some(LogType::PredictLog(PredictLog {
                request: Some(request),
                response: Some(response),
            })),
        }
    }

    /// The KServe v2 form: the request's fields and the answer's outputs in one object.
    pub fn json_line(&self) -> Value {
        let millis = self
            .timestamp
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        let mut line = json!({
            "model_name": &*self.model,
            "model_version": self.version.to_string(),
            "id": self.id.to_string(),
            "timestamp": millis,
            "inputs": self.inputs.iter().map(json_tensor).collect::<Vec<_>>(),
            "outputs": self.outputs.iter().map(json_tensor).collect::<Vec<_>>(),
        });
        if !self.origin.is_empty() {
            line["origin"] = Value::from(self.origin);
        }
        line
    }
}

/// The tensors of a request, owned: a view of a client's shared memory is copied (the client
/// may rewrite it once answered); other data is shared by reference count.
pub fn owned_tensors(tensors: &[NamedTensor], client_memory: bool) -> Vec<NamedTensor> {
    if !client_memory {
        return tensors.to_vec();
    }
    tensors
        .iter()
        .map(|(name, tensor)| (name.clone(), deep_copy(tensor)))
        .collect()
}

fn deep_copy(tensor: &Tensor) -> Tensor {
    let copied = match tensor.data() {
        TensorData::Dense(bytes) => Tensor::dense(
            tensor.dtype(),
            tensor.shape().to_vec(),
            Bytes::copy_from_slice(bytes),
        ),
        TensorData::Strings(strings) => Tensor::strings(
            tensor.shape().to_vec(),
            strings.iter().map(Bytes::copy_from_slice).collect(),
        ),
    };
    // The copy has the dtype, shape and element count of a valid tensor, so it is valid too.
    copied.unwrap_or_else(|_| tensor.clone())
}

/// `{name, datatype, shape, data}` with the elements as JSON numbers (booleans, strings).
fn json_tensor((name, tensor): &NamedTensor) -> Value {
    json!({
        "name": name,
        "datatype": tensor.dtype().kserve_name(),
        "shape": tensor.shape(),
        "data": json_values(tensor),
    })
}

fn json_values(tensor: &Tensor) -> Value {
    fn numbers<T: Element + Into<Value>>(tensor: &Tensor) -> Value {
        tensor.view::<T>().map_or(Value::Null, |values| {
            Value::Array(values.iter().map(|&v| v.into()).collect())
        })
    }
    fn floats<T: Element>(tensor: &Tensor, widen: impl Fn(T) -> f64) -> Value {
        tensor.view::<T>().map_or(Value::Null, |values| {
            Value::Array(values.iter().map(|&v| Value::from(widen(v))).collect())
        })
    }
    match tensor.dtype() {
        DataType::Bool => tensor.view::<BoolByte>().map_or(Value::Null, |values| {
            Value::Array(values.iter().map(|v| Value::Bool(v.0 != 0)).collect())
        }),
        DataType::U8 => numbers::<u8>(tensor),
        DataType::U16 => numbers::<u16>(tensor),
        DataType::U32 => numbers::<u32>(tensor),
        DataType::U64 => numbers::<u64>(tensor),
        DataType::I8 => numbers::<i8>(tensor),
        DataType::I16 => numbers::<i16>(tensor),
        DataType::I32 => numbers::<i32>(tensor),
        DataType::I64 => numbers::<i64>(tensor),
        DataType::F16 => floats(tensor, |v: half::f16| v.to_f64()),
        DataType::BF16 => floats(tensor, |v: half::bf16| v.to_f64()),
        DataType::F32 => floats(tensor, |v: f32| f64::from(v)),
        DataType::F64 => floats(tensor, |v: f64| v),
        DataType::String => tensor.string_elements().map_or(Value::Null, |strings| {
            Value::Array(
                strings
                    .iter()
                    .map(|s| Value::from(String::from_utf8_lossy(s).into_owned()))
                    .collect(),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::tensorflow::DataType as TfType;

    fn record() -> PayloadRecord {
        PayloadRecord {
            model: "ranker".into(),
            version: 3,
            signature: "serving_default".into(),
            id: 7,
            timestamp: UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123),
            sample: 0.5,
            origin: "",
            inputs: vec![(
                "x".into(),
                Tensor::from_vec(vec![1, 2], vec![1.5f32, -2.0]).unwrap(),
            )],
            outputs: vec![(
                "y".into(),
                Tensor::from_vec(vec![2], vec![4i64, 5]).unwrap(),
            )],
        }
    }

    #[test]
    fn written_in_place_equals_encoded_then_framed() {
        let record = record();
        let mut framed = b"before".to_vec();
        super::super::tfrecord::frame_into(&record.encode(LogFormat::PredictionLog), &mut framed);
        let mut in_place = b"before".to_vec();
        record.write_into(LogFormat::PredictionLog, &mut in_place);
        assert_eq!(in_place, framed);
        let mut line = Vec::new();
        record.write_into(LogFormat::Jsonl, &mut line);
        assert_eq!(line, record.encode(LogFormat::Jsonl));
    }

    #[test]
    fn a_prediction_log_holds_the_request_and_the_answer() {
        let bytes = record().encode(LogFormat::PredictionLog);
        let log = PredictionLog::decode(bytes.as_slice()).unwrap();
        let meta = log.log_metadata.unwrap();
        let spec = meta.model_spec.unwrap();
        assert_eq!(spec.name, "ranker");
        assert_eq!(spec.version_choice, Some(VersionChoice::Version(3)));
        assert_eq!(meta.timestamp_secs, 1_700_000_000);
        assert_eq!(meta.sampling_config.unwrap().sampling_rate, 0.5);
        let Some(LogType::PredictLog(predict)) = log.log_type else {
            panic!("not a predict log");
        };
        let x = &predict.request.unwrap().inputs["x"];
        assert_eq!(x.dtype, TfType::DtFloat as i32);
        let dims: Vec<i64> = x
            .tensor_shape
            .as_ref()
            .unwrap()
            .dim
            .iter()
            .map(|d| d.size)
            .collect();
        assert_eq!(dims, [1, 2]);
        let floats: Vec<f32> = x
            .tensor_content
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(floats, [1.5, -2.0]);
        let y = &predict.response.unwrap().outputs["y"];
        assert_eq!(y.dtype, TfType::DtInt64 as i32);
        assert_eq!(y.tensor_content.len(), 16);
    }

    #[test]
    fn a_json_line_is_kserve_v2_shaped() {
        let mut shadow = record();
        shadow.origin = SHADOW_ORIGIN;
        let bytes = shadow.encode(LogFormat::Jsonl);
        assert_eq!(bytes.last(), Some(&b'\n'));
        let line: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(line["model_name"], "ranker");
        assert_eq!(line["model_version"], "3");
        assert_eq!(line["id"], "7");
        assert_eq!(line["timestamp"], 1_700_000_000_123u64);
        assert_eq!(line["origin"], "shadow");
        assert_eq!(
            line["inputs"][0],
            json!({"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1.5, -2.0]})
        );
        assert_eq!(line["outputs"][0]["data"], json!([4, 5]));
        assert!(record().json_line().get("origin").is_none());
    }

    #[test]
    fn client_memory_is_copied_other_data_is_shared() {
        let inputs = record().inputs;
        let TensorData::Dense(original) = inputs[0].1.data() else {
            panic!("dense")
        };
        let shared = owned_tensors(&inputs, false);
        let copied = owned_tensors(&inputs, true);
        let (TensorData::Dense(a), TensorData::Dense(b)) = (shared[0].1.data(), copied[0].1.data())
        else {
            panic!("dense")
        };
        assert_eq!(a.as_ptr(), original.as_ptr());
        assert_ne!(b.as_ptr(), original.as_ptr());
        assert_eq!(copied, inputs);
        let strings = vec![(
            "s".to_string(),
            Tensor::strings(
                vec![2],
                vec![Bytes::from_static(b"a"), Bytes::from_static(b"bc")],
            )
            .unwrap(),
        )];
        assert_eq!(owned_tensors(&strings, true), strings);
    }
}
