//! Decoding and encoding one 1 MiB float32 tensor in each wire format, as the server does it:
//! protobuf bytes -> message -> domain `Tensor` (and back) for gRPC, JSON text -> `Tensor`
//! (and back) for KServe HTTP, raw bytes for the binary extension. Throughput is per MiB of
//! tensor data.
//!
//! `cargo bench --bench codecs`

// Set-up failures end the benchmark with their message.
#![allow(clippy::panic)]

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use prost::Message;
use tensorport::api::kserve::codec;
use tensorport::api::kserve::infer_body::{Entry, InferBody, Inputs};
use tensorport::api::tfserving::tensor_proto;
use tensorport::api::{json_body, json_decode, json_tensor};
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::{ModelInferRequest, ModelInferResponse};
use tensorport::proto::tensorflow::serving::{ModelSpec, PredictRequest};
use tensorport::tensor::{DataType, DecodeLimits, Tensor};

const ELEMENTS: usize = 1 << 18;
const BYTES: u64 = (ELEMENTS * 4) as u64;

fn values() -> Vec<f32> {
    (0..ELEMENTS)
        .map(|i| (i % 1000) as f32 * 0.001 + 0.5)
        .collect()
}

fn tensor() -> Tensor {
    Tensor::from_vec(vec![1, ELEMENTS], values()).unwrap_or_else(|err| panic!("{err}"))
}

fn le_bytes() -> Bytes {
    values()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<u8>>()
        .into()
}

fn tfserving(c: &mut Criterion) {
    let limits = DecodeLimits::default();
    let proto = tensor_proto::encode(&tensor());
    let wire: Bytes = PredictRequest {
        model_spec: Some(ModelSpec {
            name: "m".into(),
            ..Default::default()
        }),
        inputs: [("x".to_owned(), proto)].into(),
        ..Default::default()
    }
    .encode_to_vec()
    .into();
    let mut group = c.benchmark_group("tfserving_tensor_proto");
    group.throughput(Throughput::Bytes(BYTES));
    group.bench_function("decode", |b| {
        b.iter(|| {
            let request = PredictRequest::decode(wire.clone()).unwrap_or_default();
            let proto = request.inputs.into_values().next().unwrap_or_default();
            black_box(tensor_proto::decode(proto, &limits).map(|t| t.element_count()))
        })
    });
    let output = tensor();
    group.bench_function("encode", |b| {
        b.iter(|| black_box(tensor_proto::encode(&output).encode_to_vec().len()))
    });
    group.finish();
}

fn kserve_grpc(c: &mut Criterion) {
    let wire: Bytes = ModelInferRequest {
        model_name: "m".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![1, ELEMENTS as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![le_bytes()],
        ..Default::default()
    }
    .encode_to_vec()
    .into();
    let mut group = c.benchmark_group("kserve_grpc_raw");
    group.throughput(Throughput::Bytes(BYTES));
    group.bench_function("decode", |b| {
        b.iter(|| {
            let request = ModelInferRequest::decode(wire.clone()).unwrap_or_default();
            let raw = request
                .raw_input_contents
                .into_iter()
                .next()
                .unwrap_or_default();
            black_box(
                codec::from_raw(DataType::F32, vec![1, ELEMENTS], raw).map(|t| t.element_count()),
            )
        })
    });
    let output = tensor();
    group.bench_function("encode", |b| {
        b.iter(|| {
            let response = ModelInferResponse {
                raw_output_contents: vec![codec::to_raw(&output)],
                ..Default::default()
            };
            black_box(response.encode_to_vec().len())
        })
    });
    group.finish();
}

fn kserve_json(c: &mut Criterion) {
    let limits = DecodeLimits::default();
    let body = serde_json::json!({
        "inputs": [{ "name": "x", "shape": [1, ELEMENTS], "datatype": "FP32", "data": values() }]
    })
    .to_string()
    .into_bytes();
    let mut group = c.benchmark_group("kserve_json");
    group.throughput(Throughput::Bytes(BYTES));
    group.bench_function("decode", |b| {
        b.iter(|| {
            // As the server does it: the envelope in one pass with the data kept as text,
            // then the data decoded straight into the tensor.
            let mut rewritten = Vec::new();
            let parsed: Option<InferBody> = json_body::parse_borrowed(&body, &mut rewritten).ok();
            let data = match parsed.and_then(|p| p.inputs) {
                Some(Inputs::List(entries)) => match entries.into_iter().next() {
                    Some(Entry::Object(input)) => input.data,
                    _ => None,
                },
                _ => None,
            };
            black_box(data.map(|data| {
                json_decode::decode_flat(data, vec![1, ELEMENTS], DataType::F32, &limits)
                    .map(|t| t.element_count())
            }))
        })
    });
    // The same data through serde's visitor (what `decode` did before the number scanner), for
    // a comparison taken under the same load.
    let data = serde_json::to_string(&values()).unwrap_or_default();
    group.bench_function("data_scanner", |b| {
        let raw: Box<serde_json::value::RawValue> =
            serde_json::value::RawValue::from_string(data.clone())
                .unwrap_or_else(|err| panic!("{err}"));
        b.iter(|| {
            black_box(
                json_decode::decode_flat(&raw, vec![1, ELEMENTS], DataType::F32, &limits)
                    .map(|t| t.element_count()),
            )
        })
    });
    group.bench_function("data_serde_visitor", |b| {
        let raw: Box<serde_json::value::RawValue> =
            serde_json::value::RawValue::from_string(data.clone())
                .unwrap_or_else(|err| panic!("{err}"));
        b.iter(|| {
            black_box(
                json_decode::decode_value(&raw, DataType::F32, &limits).map(|t| t.element_count()),
            )
        })
    });
    let output = tensor();
    group.bench_function("encode", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(256);
            let _ = json_tensor::write_flat(&mut out, &output);
            black_box(out.len())
        })
    });
    group.finish();
}

fn kserve_binary(c: &mut Criterion) {
    let raw = le_bytes();
    let mut group = c.benchmark_group("kserve_binary");
    group.throughput(Throughput::Bytes(BYTES));
    group.bench_function("decode", |b| {
        b.iter(|| {
            black_box(
                codec::from_raw(DataType::F32, vec![1, ELEMENTS], raw.clone())
                    .map(|t| t.element_count()),
            )
        })
    });
    let output = tensor();
    group.bench_function("encode", |b| {
        b.iter(|| black_box(codec::to_raw(&output).len()))
    });
    group.finish();
}

criterion_group!(benches, tfserving, kserve_grpc, kserve_json, kserve_binary);
criterion_main!(benches);
