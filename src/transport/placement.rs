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

const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";

/// `ModelInferRequest.raw_input_contents`.
const RAW_INPUT_CONTENTS: u64 = 7;

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
/// that put the first raw input's bytes on a [`TENSOR_ALIGN`] boundary, or none when the
/// call is not `ModelInfer` or that input does not start within the first frame.
pub fn grpc_lead(path: &str, first: &[u8]) -> usize {
    if path != MODEL_INFER {
        return 0;
    }
    first_raw_input(first).map_or(0, |offset| {
        (TENSOR_ALIGN - offset % TENSOR_ALIGN) % TENSOR_ALIGN
    })
}

/// The offset in `body` (a gRPC message, prefix first) where the first `raw_input_contents`
/// entry's bytes start, if they start within `body` and the message is not compressed.
fn first_raw_input(body: &[u8]) -> Option<usize> {
    let (prefix, mut rest) = body.split_first_chunk::<GRPC_PREFIX>()?;
    if prefix[0] != 0 {
        return None;
    }
    while !rest.is_empty() {
        let (key, after) = varint(rest)?;
        rest = match key & 7 {
            0 => varint(after)?.1,
            1 => after.get(8..)?,
            5 => after.get(4..)?,
            2 => {
                let (len, payload) = varint(after)?;
                if key >> 3 == RAW_INPUT_CONTENTS {
                    return Some(body.len() - payload.len());
                }
                payload.get(usize::try_from(len).ok()?..)?
            }
            _ => return None,
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::{model_infer_request::InferInputTensor, ModelInferRequest};
    use prost::Message;

    fn grpc_body(message: &ModelInferRequest) -> Vec<u8> {
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
            let offset = first_raw_input(&body).unwrap();
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
        let offset = first_raw_input(&body).unwrap();
        assert_eq!(
            grpc_lead("/inference.GRPCInferenceService/ModelMetadata", &body),
            0
        );
        let mut compressed = body.clone();
        compressed[0] = 1;
        assert_eq!(first_raw_input(&compressed), None);
        // A first frame that ends inside the metadata, or inside the prefix.
        assert_eq!(first_raw_input(&body[..offset - 3]), None);
        assert_eq!(first_raw_input(&body[..3]), None);
        // It is enough that the input's bytes start in the frame.
        assert_eq!(first_raw_input(&body[..offset]), Some(offset));
        // Not a message at all.
        assert_eq!(grpc_lead(MODEL_INFER, &[0, 0, 0, 0, 9, 0xff, 0xff]), 0);
    }
}
