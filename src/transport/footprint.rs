//! How much memory a request body will take once decoded, estimated from its bytes before
//! any decoder runs, so that the request memory budget can refuse a request that would expand
//! too far before it allocates anything.
//!
//! The estimate is an upper bound of what the decoders allocate, not an exact count: the body
//! itself, one decoded copy of its bytes, and a cost per element. The per-element cost is what
//! makes small bodies expensive: a JSON value becomes a tree node, a protobuf string becomes a
//! `Bytes` handle in a vector, so 38 MB of empty strings is 20 million handles. Both scans are
//! linear, allocate nothing and never fail: bytes that do not parse are charged as bytes.

/// Charged per string element (a protobuf `bytes` or `string` field, a JSON string): its
/// handle when decoded (32 bytes, twice that in a vector grown by doubling), the runtime's own
/// string when the model runs, and the output's when it echoes them back. Measured: 20 M
/// empty strings sent to an echo model cost about 140 bytes each (docs/BENCHMARKS.md).
pub const STRING_BYTES: u64 = 160;

/// Charged per JSON value other than a string: a tree node (32 bytes), twice that in a
/// vector grown by doubling. Measured: about 55 bytes per value for a 60 MB body of numbers.
pub const VALUE_BYTES: u64 = 64;

/// Charged per embedded protobuf message (an input tensor, a map entry, a shape dimension):
/// the decoded struct, its vectors' headers and its map node.
pub const MESSAGE_BYTES: u64 = 512;

/// The KServe binary extension's header naming where the JSON part of a body ends.
const JSON_HEADER_LENGTH: &str = "inference-header-content-length";

/// Nesting followed in messages whose schema is not known here; deep enough for every
/// request message the server takes, shallow enough that the scan stays linear in practice.
const MAX_UNKNOWN_DEPTH: usize = 6;

/// The length of a body's JSON part, when the binary extension's header gives one.
pub(super) fn json_header_length(headers: &http::HeaderMap) -> Option<usize> {
    headers
        .get(JSON_HEADER_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<usize>().ok())
}

/// The decoded footprint of an HTTP body: JSON, or JSON followed by binary tensor data.
pub fn http(headers: &http::HeaderMap, body: &[u8]) -> u64 {
    let json_len = json_header_length(headers).map_or(body.len(), |len| len.min(body.len()));
    let json = body.get(..json_len).unwrap_or(body);
    let values = json_values(json);
    twice(body.len())
        .saturating_add(values.strings.saturating_mul(STRING_BYTES))
        .saturating_add(values.others.saturating_mul(VALUE_BYTES))
}

/// The body itself and one decoded copy of it.
fn twice(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX).saturating_mul(2)
}

/// Upper bounds of the values in a JSON text: strings (object keys included), and the others,
/// one per `,`, `[` and `{` outside strings, plus one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonValues {
    pub strings: u64,
    pub others: u64,
}

pub fn json_values(json: &[u8]) -> JsonValues {
    let mut others: u64 = 1;
    let mut strings: u64 = 0;
    let mut rest = json;
    // Bodies of numbers are megabytes of text with few strings: the text between strings is
    // counted in one branch-free loop the compiler vectorises, and strings are skipped with
    // `memchr`, so the scan runs at memory speed rather than one branch per byte.
    loop {
        let quote = memchr::memchr(b'"', rest);
        let plain = quote.map_or(rest, |at| rest.get(..at).unwrap_or(rest));
        others = others.saturating_add(structural_bytes(plain));
        let Some(at) = quote else {
            break;
        };
        strings = strings.saturating_add(1);
        rest = after_string(rest.get(at + 1..).unwrap_or_default());
    }
    JsonValues { strings, others }
}

/// The `,`, `[` and `{` in text outside strings: each starts at most one more value.
fn structural_bytes(plain: &[u8]) -> u64 {
    // Counted in blocks small enough for a byte-wide counter, which vectorises best.
    plain
        .chunks(255)
        .map(|block| {
            let count = block.iter().fold(0u8, |count, &byte| {
                count + u8::from(byte == b',' || byte == b'[' || byte == b'{')
            });
            u64::from(count)
        })
        .sum()
}

/// The text after the string whose contents start `text`: after its closing quote, or
/// nothing when the string does not end.
fn after_string(mut text: &[u8]) -> &[u8] {
    while let Some(at) = memchr::memchr2(b'"', b'\\', text) {
        match text.get(at) {
            // A backslash escapes the byte after it, whatever it is.
            Some(b'\\') => text = text.get(at + 2..).unwrap_or_default(),
            _ => return text.get(at + 1..).unwrap_or_default(),
        }
    }
    &[]
}

/// What a length-delimited field of a known message holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// An embedded message, scanned in turn.
    Message,
    /// Packed varints, each decoded into this many bytes.
    Varints(u64),
    /// Bytes, a string, or packed fixed-width scalars: decoded at their wire size.
    Bytes,
}

/// The gRPC methods whose request schema the scan knows, by the path of field numbers from
/// the request message; every other method is scanned without a schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schema {
    /// `tensorflow.serving.PredictionService/Predict`: `PredictRequest`.
    Predict,
    /// `inference.GRPCInferenceService/ModelInfer`: `ModelInferRequest`.
    ModelInfer,
    Unknown,
}

impl Schema {
    fn of_path(path: &str) -> Self {
        match path {
            "/tensorflow.serving.PredictionService/Predict" => Self::Predict,
            "/inference.GRPCInferenceService/ModelInfer" => Self::ModelInfer,
            _ => Self::Unknown,
        }
    }

    /// What the length-delimited field at `path` (field numbers from the request message
    /// down) holds. Unknown messages are followed wherever their bytes parse as a message.
    fn field(self, path: &[u32]) -> Option<Field> {
        use Field::{Bytes, Message, Varints};
        let field = match (self, path) {
            (Self::Unknown, _) => return None,
            // inputs (map entries), their value (TensorProto), its shape and dimensions.
            (Self::Predict, [2] | [2, 2] | [2, 2, 2] | [2, 2, 2, 2]) => Message,
            // int_val, half_val, uint32_val.
            (Self::Predict, [2, 2, 7 | 13 | 16]) => Varints(4),
            // int64_val, uint64_val.
            (Self::Predict, [2, 2, 10 | 17]) => Varints(8),
            // bool_val.
            (Self::Predict, [2, 2, 11]) => Varints(1),
            // parameters (map entries and their values), inputs (their parameters and
            // contents), outputs (their parameters).
            (Self::ModelInfer, [4..=6] | [4 | 6, 2] | [5, 4 | 5] | [5, 4, 2] | [6, 2, 2]) => {
                Message
            }
            // An input's shape.
            (Self::ModelInfer, [5, 3]) => Varints(8),
            // bool, int, int64, uint, uint64 contents.
            (Self::ModelInfer, [5, 5, 1]) => Varints(1),
            (Self::ModelInfer, [5, 5, 2 | 4]) => Varints(4),
            (Self::ModelInfer, [5, 5, 3 | 5]) => Varints(8),
            _ => Bytes,
        };
        Some(field)
    }
}

/// The decoded footprint of a gRPC request body (one length-prefixed message, or several)
/// for the method at `path`.
pub fn grpc(path: &str, body: &[u8]) -> u64 {
    let schema = Schema::of_path(path);
    let mut total = twice(body.len());
    let mut rest = body;
    // Each message: a compression flag, a 4-byte big-endian length, the message.
    while let Some((header, after)) = rest.split_first_chunk::<5>() {
        let [compressed, len @ ..] = *header;
        let len = usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX);
        let Some(message) = after.get(..len) else {
            break;
        };
        // A compressed message is refused by the server, which enables no compression.
        if compressed == 0 {
            let mut path = Vec::new();
            let extra = scan(message, schema, &mut path).unwrap_or(0);
            total = total.saturating_add(extra);
        }
        rest = after.get(len..).unwrap_or_default();
    }
    total
}

/// The memory the fields of `message` take beyond their wire bytes, or `None` when its
/// bytes are not a protobuf message.
fn scan(message: &[u8], schema: Schema, path: &mut Vec<u32>) -> Option<u64> {
    let mut extra: u64 = 0;
    let mut rest = message;
    while !rest.is_empty() {
        let (key, after) = varint(rest)?;
        let number = u32::try_from(key >> 3).ok()?;
        if number == 0 {
            return None;
        }
        rest = match key & 7 {
            0 => varint(after)?.1,
            1 => after.get(8..)?,
            5 => after.get(4..)?,
            2 => {
                let (len, after) = varint(after)?;
                let len = usize::try_from(len).ok()?;
                let payload = after.get(..len)?;
                path.push(number);
                let cost = length_delimited(payload, schema, path);
                path.pop();
                extra = extra.saturating_add(cost);
                after.get(len..)?
            }
            _ => return None,
        };
    }
    Some(extra)
}

/// The memory one length-delimited field takes beyond its wire bytes.
fn length_delimited(payload: &[u8], schema: Schema, path: &mut Vec<u32>) -> u64 {
    match schema.field(path) {
        Some(Field::Message) => {
            MESSAGE_BYTES.saturating_add(scan(payload, schema, path).unwrap_or(0))
        }
        Some(Field::Varints(width)) => {
            // Each varint ends at a byte below 0x80.
            let count = payload.iter().filter(|&&byte| byte < 0x80).count();
            u64::try_from(count)
                .unwrap_or(u64::MAX)
                .saturating_mul(width)
        }
        Some(Field::Bytes) => STRING_BYTES,
        None if path.len() <= MAX_UNKNOWN_DEPTH => match scan(payload, schema, path) {
            Some(inner) if !payload.is_empty() => MESSAGE_BYTES.saturating_add(inner),
            _ => STRING_BYTES,
        },
        None => STRING_BYTES,
    }
}

/// A varint and what follows it; `None` when it runs past the end or past 10 bytes.
pub(super) fn varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value: u64 = 0;
    for (index, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte < 0x80 {
            return Some((value, bytes.get(index + 1..)?));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    use crate::proto::inference::model_infer_request::InferInputTensor;
    use crate::proto::inference::{InferTensorContents, ModelInferRequest};

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut body = vec![0];
        body.extend_from_slice(&u32::try_from(message.len()).unwrap_or(0).to_be_bytes());
        body.extend_from_slice(message);
        body
    }

    fn values(json: &[u8]) -> (u64, u64) {
        let values = json_values(json);
        (values.strings, values.others)
    }

    /// The byte-at-a-time definition the fast scan must agree with.
    fn reference_values(json: &[u8]) -> (u64, u64) {
        let (mut others, mut strings) = (1, 0);
        let (mut in_string, mut escaped) = (false, false);
        for &byte in json {
            if in_string {
                match (escaped, byte) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
            } else if byte == b'"' {
                in_string = true;
                strings += 1;
            } else if matches!(byte, b',' | b'[' | b'{') {
                others += 1;
            }
        }
        (strings, others)
    }

    #[test]
    fn the_fast_scan_agrees_with_the_byte_at_a_time_definition() {
        // Every string of up to six bytes over the alphabet that matters, then long mixes
        // that cross the 255-byte counting blocks.
        let alphabet = *b"\"\\,[{a";
        let mut cases: Vec<Vec<u8>> = vec![Vec::new()];
        for len in 1..=6u32 {
            for mut n in 0..alphabet.len().pow(len) {
                let mut case = Vec::new();
                for _ in 0..len {
                    case.push(alphabet[n % alphabet.len()]);
                    n /= alphabet.len();
                }
                cases.push(case);
            }
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in [254, 255, 256, 511, 4096] {
            let case = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect();
            cases.push(case);
        }
        cases.push([b",".repeat(1000), b"\"".to_vec(), b",".repeat(300)].concat());
        for case in cases {
            assert_eq!(values(&case), reference_values(&case), "{case:?}");
        }
    }

    #[test]
    fn json_values_are_counted_outside_strings_only() {
        assert_eq!(values(br#"{"a": [1, 2, 3]}"#), (1, 5));
        assert_eq!(values(br#"["a,b", "c\",[{"]"#), (2, 3));
        assert_eq!(values(b""), (0, 1));
    }

    #[test]
    fn the_json_part_of_a_binary_body_is_scanned_and_the_rest_charged_as_bytes() {
        let mut headers = http::HeaderMap::new();
        headers.insert(JSON_HEADER_LENGTH, http::HeaderValue::from_static("2"));
        // The binary part is all commas: counted as bytes, not as values.
        let body = b"{},,,,,,,,";
        assert_eq!(http(&headers, body), 20 + 2 * VALUE_BYTES);
        assert_eq!(http(&http::HeaderMap::new(), body), 20 + 10 * VALUE_BYTES);
    }

    #[test]
    fn a_bomb_of_empty_strings_is_charged_per_string() {
        let strings = 10_000;
        let request = ModelInferRequest {
            inputs: vec![InferInputTensor {
                name: "x".into(),
                datatype: "BYTES".into(),
                shape: vec![strings],
                contents: Some(InferTensorContents {
                    bytes_contents: vec![bytes::Bytes::new(); 10_000],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let body = framed(&request.encode_to_vec());
        let charged = grpc("/inference.GRPCInferenceService/ModelInfer", &body);
        assert!(charged >= 10_000 * STRING_BYTES, "{charged}");
        // Without the schema the strings are still found.
        assert!(grpc("/inference.GRPCInferenceService/Other", &body) >= 10_000 * STRING_BYTES);
    }

    #[test]
    fn packed_varints_are_charged_at_their_decoded_width() {
        let request = ModelInferRequest {
            inputs: vec![InferInputTensor {
                contents: Some(InferTensorContents {
                    int64_contents: vec![1; 1000],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let body = framed(&request.encode_to_vec());
        let charged = grpc("/inference.GRPCInferenceService/ModelInfer", &body);
        assert!(charged >= 8000, "{charged}");
    }

    #[test]
    fn dense_tensor_bytes_are_charged_about_twice() {
        let request = ModelInferRequest {
            raw_input_contents: vec![bytes::Bytes::from(vec![0xffu8; 1 << 20])],
            ..Default::default()
        };
        let body = framed(&request.encode_to_vec());
        let charged = grpc("/inference.GRPCInferenceService/ModelInfer", &body);
        let len = body.len() as u64;
        assert!(charged >= 2 * len && charged <= 2 * len + 4096, "{charged}");
    }

    #[test]
    fn garbage_never_fails_and_is_charged_as_bytes() {
        let body = [0u8, 0, 0, 0, 3, 0xff, 0xff, 0xff, 1, 2];
        assert_eq!(grpc("/x/y", &body), 20);
        assert_eq!(grpc("/x/y", &[0, 0, 0]), 6);
    }
}
