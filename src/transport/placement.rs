//! Where a joined request body starts in its buffer, so that the tensor bytes a runtime reads
//! in place land aligned.
//!
//! A body that arrives in several frames is copied into one buffer as it comes (`body.rs`).
//! The buffer's start is aligned (the allocator gives 16 bytes), but the tensor data inside a
//! body starts wherever the client's encoding put it: in a KServe `ModelInferRequest`, after
//! the model name, the inputs' metadata and a length prefix; in a KServe binary-extension
//! HTTP body, after the JSON header of `Inference-Header-Content-Length` bytes; so at any
//! offset. A typed view over misaligned bytes is a copy of the whole tensor
//! (`tensor::element::cast_or_copy`). Starting the body a few bytes into its buffer, so that
//! the first tensor lands on a 16-byte boundary, saves that copy for the first (in ranking
//! requests, usually the only large) input, at the cost of at most 15 bytes.

use super::footprint::{json_header_length, varint};

/// The alignment the first tensor's bytes get: enough for every fixed-size KServe datatype,
/// and no more than the allocator gives a buffer's start.
pub const TENSOR_ALIGN: usize = 16;

/// Where the first tensor's bytes sit in each call's message, as the protobuf field numbers
/// to follow from the message down to the bytes field: `ModelInferRequest.raw_input_contents`
/// (7); `PredictRequest.inputs` (2), a map entry's `value` (2), its `TensorProto.tensor_content`
/// (4).
const TENSOR_PATHS: [(&str, &[u64]); 2] = [
    ("/inference.GRPCInferenceService/ModelInfer", &[7]),
    ("/tensorflow.serving.PredictionService/Predict", &[2, 2, 4]),
];

/// gRPC's prefix of a message: a compression flag and a 4-byte length.
const GRPC_PREFIX: usize = 5;

/// The bytes to leave before an HTTP body with `headers`: those that put its binary tensor
/// data, after the JSON header, on a [`TENSOR_ALIGN`] boundary; none for a body without it.
pub fn http_lead(headers: &http::HeaderMap) -> usize {
    json_header_length(headers).map_or(0, |json| {
        (TENSOR_ALIGN - json % TENSOR_ALIGN) % TENSOR_ALIGN
    })
}

/// The bytes to leave before a gRPC body sent to `path` whose first frame is `first`: those
/// that put the first tensor's bytes (a `ModelInfer` raw input, a `Predict` input's
/// `tensor_content`) on a [`TENSOR_ALIGN`] boundary, or none for other calls, or when those
/// bytes do not start within the first frame.
pub fn grpc_lead(path: &str, first: &[u8]) -> usize {
    let Some((_, fields)) = TENSOR_PATHS.iter().find(|(call, _)| *call == path) else {
        return 0;
    };
    first_tensor(first, fields).map_or(0, |offset| {
        (TENSOR_ALIGN - offset % TENSOR_ALIGN) % TENSOR_ALIGN
    })
}

/// The offset in `body` (a gRPC message, prefix first) where the bytes at `fields` start, if
/// they start within `body` and the message is not compressed.
fn first_tensor(body: &[u8], fields: &[u64]) -> Option<usize> {
    let (prefix, message) = body.split_first_chunk::<GRPC_PREFIX>()?;
    if prefix[0] != 0 {
        return None;
    }
    let start = body.len() - message.len();
    find(body, start, body.len(), fields)
}

/// Walks the message in `body[start..end]` (`end` may lie past the body: a message the first
/// frame holds only the start of) for the first field numbered `fields[0]`, descending into
/// it for the rest of `fields`; the offset in `body` of the last one's bytes. A field that
/// holds no match is skipped, which needs its end within `body`.
fn find(body: &[u8], start: usize, end: usize, fields: &[u64]) -> Option<usize> {
    let (&wanted, deeper) = fields.split_first()?;
    let mut at = start;
    while at < end.min(body.len()) {
        let (key, after) = varint(body.get(at..)?)?;
        let mut next = body.len() - after.len();
        match key & 7 {
            0 => next = body.len() - varint(after)?.1.len(),
            1 => next = next.checked_add(8)?,
            5 => next = next.checked_add(4)?,
            2 => {
                let (len, payload) = varint(after)?;
                let payload_at = body.len() - payload.len();
                if key >> 3 == wanted {
                    if deeper.is_empty() {
                        return Some(payload_at);
                    }
                    let payload_end = payload_at.checked_add(usize::try_from(len).ok()?)?;
                    if let Some(found) = find(body, payload_at, payload_end, deeper) {
                        return Some(found);
                    }
                }
                next = payload_at.checked_add(usize::try_from(len).ok()?)?;
            }
            _ => return None,
        }
        if next > body.len() {
            return None;
        }
        at = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::{model_infer_request::InferInputTensor, ModelInferRequest};
    use crate::proto::tensorflow::serving::{ModelSpec, PredictRequest};
    use crate::proto::tensorflow::{DataType, TensorProto};
    use prost::Message;

    const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
    const PREDICT: &str = "/tensorflow.serving.PredictionService/Predict";

    fn grpc_body(message: &impl Message) -> Vec<u8> {
        let encoded = message.encode_to_vec();
        let mut body = vec![0];
        body.extend_from_slice(&u32::try_from(encoded.len()).unwrap().to_be_bytes());
        body.extend_from_slice(&encoded);
        body
    }

    fn request(model: &str, raw: &[u8]) -> ModelInferRequest {
        ModelInferRequest {
            model_name: model.into(),
            inputs: vec![InferInputTensor {
                name: "features".into(),
                datatype: "FP32".into(),
                shape: vec![1, 4],
                ..Default::default()
            }],
            raw_input_contents: vec![raw.to_vec().into()],
            ..Default::default()
        }
    }

    #[test]
    fn the_lead_puts_the_first_raw_input_on_a_boundary_whatever_comes_before_it() {
        let raw = [7u8; 16];
        for model in ["m", "ranker", "a-much-longer-model-name-than-most"] {
            let body = grpc_body(&request(model, &raw));
            let offset = first_tensor(&body, &[7]).unwrap();
            assert_eq!(&body[offset..offset + raw.len()], &raw[..], "model {model}");
            let lead = grpc_lead(MODEL_INFER, &body);
            assert!(lead < TENSOR_ALIGN);
            assert_eq!((lead + offset) % TENSOR_ALIGN, 0, "model {model}");
        }
    }

    #[test]
    fn an_http_body_leads_by_what_aligns_the_data_after_its_json_header() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(http_lead(&headers), 0);
        for json in [0usize, 1, 15, 16, 17, 200, 4093] {
            headers.insert("inference-header-content-length", json.into());
            let lead = http_lead(&headers);
            assert!(lead < TENSOR_ALIGN);
            assert_eq!((lead + json) % TENSOR_ALIGN, 0, "json {json}");
        }
        headers.insert(
            "inference-header-content-length",
            http::HeaderValue::from_static("many"),
        );
        assert_eq!(http_lead(&headers), 0);
    }

    #[test]
    fn no_lead_for_other_calls_compressed_messages_or_a_first_frame_cut_before_the_input() {
        let body = grpc_body(&request("ranker", &[1; 64]));
        let offset = first_tensor(&body, &[7]).unwrap();
        assert_eq!(
            grpc_lead("/inference.GRPCInferenceService/ModelMetadata", &body),
            0
        );
        let mut compressed = body.clone();
        compressed[0] = 1;
        assert_eq!(first_tensor(&compressed, &[7]), None);
        // A first frame that ends inside the metadata, or inside the prefix.
        assert_eq!(first_tensor(&body[..offset - 3], &[7]), None);
        assert_eq!(first_tensor(&body[..3], &[7]), None);
        // It is enough that the input's bytes start in the frame.
        assert_eq!(first_tensor(&body[..offset], &[7]), Some(offset));
        // Not a message at all.
        assert_eq!(grpc_lead(MODEL_INFER, &[0, 0, 0, 0, 9, 0xff, 0xff]), 0);
    }

    fn predict(model: &str, inputs: &[(&str, Option<&[u8]>)]) -> PredictRequest {
        let tensor = |content: Option<&[u8]>| TensorProto {
            dtype: DataType::DtFloat as i32,
            tensor_content: content.map(|c| c.to_vec().into()).unwrap_or_default(),
            float_val: if content.is_none() {
                vec![1.0; 3]
            } else {
                Vec::new()
            },
            ..Default::default()
        };
        PredictRequest {
            model_spec: Some(ModelSpec {
                name: model.into(),
                ..Default::default()
            }),
            inputs: inputs
                .iter()
                .map(|(name, content)| ((*name).to_owned(), tensor(*content)))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_predict_body_leads_by_what_aligns_its_first_tensor_content() {
        let content = [9u8; 32];
        for model in ["m", "ranker", "a-much-longer-model-name-than-most"] {
            for name in ["x", "features", "candidate_features_0123456789"] {
                let body = grpc_body(&predict(model, &[(name, Some(&content))]));
                let offset = first_tensor(&body, &[2, 2, 4]).unwrap();
                assert_eq!(&body[offset..offset + content.len()], &content[..]);
                let lead = grpc_lead(PREDICT, &body);
                assert!(lead < TENSOR_ALIGN);
                assert_eq!((lead + offset) % TENSOR_ALIGN, 0, "{model} {name}");
                // The first frame need only reach the tensor's first byte.
                assert_eq!(first_tensor(&body[..=offset], &[2, 2, 4]), Some(offset));
                assert_eq!(first_tensor(&body[..offset - 1], &[2, 2, 4]), None);
            }
        }
    }

    #[test]
    fn a_predict_input_in_typed_fields_is_passed_over_for_the_next_one_with_content() {
        let content = [5u8; 16];
        // Whichever order the map encodes them in, an entry without content is passed over.
        let body = grpc_body(&predict("m", &[("a", None), ("b", Some(&content))]));
        let offset = first_tensor(&body, &[2, 2, 4]).unwrap();
        assert_eq!(&body[offset..offset + content.len()], &content[..]);
        // With no tensor_content at all, nothing to align.
        let typed = grpc_body(&predict("m", &[("a", None)]));
        assert_eq!(grpc_lead(PREDICT, &typed), 0);
        // Walking a Predict body for ModelInfer's field, or the other way round, finds no
        // tensor where there is none, and never reads past the body.
        assert_eq!(first_tensor(&typed, &[7]), None);
        let infer = grpc_body(&request("m", &[1; 16]));
        assert_eq!(first_tensor(&infer, &[2, 2, 4]), None);
        assert_eq!(
            grpc_lead(PREDICT, &[0, 0, 0, 0, 4, 0x12, 0x7f, 0x12, 0x7f]),
            0
        );
    }
}
