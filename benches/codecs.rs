//! Decoding and encoding one 1 MiB float32 tensor in each wire format, as the server does it:
//! protobuf bytes -> message -> domain `Tensor` (and back) for gRPC, JSON text -> `Tensor`
//! (and back) for KServe HTTP, raw bytes for the binary extension. Throughput is per MiB of
//! tensor data.
//!
//! `cargo bench --bench codecs`
//!
//! On a shared machine, wall-clock times swell with the load; `CODECS_CPU_TIME=1 cargo bench
//! --bench codecs` instead prints the CPU time this process spent per KServe JSON decode and
//! encode (from `/proc/self/stat`, over enough iterations that its 10 ms tick does not matter).

// Set-up failures end the benchmark with their message.
#![allow(clippy::panic)]

use bytes::Bytes;
use criterion::{black_box, criterion_group, Criterion, Throughput};
use prost::Message;
use tensorport::api::json::{decode as json_decode, encode as json_tensor};
use tensorport::api::kserve::codec;
use tensorport::api::kserve::http;
use tensorport::api::kserve::http::body::{InferBody, Inputs};
use tensorport::api::kserve::http::lift as infer_lift;
use tensorport::api::tfserving::tensor_proto;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::{ModelInferRequest, ModelInferResponse};
use tensorport::proto::tensorflow::serving::{ModelSpec, PredictRequest};
use tensorport::tensor::{DataType, DecodeLimits, ScanHelpers, Tensor};

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

/// The body as Python clients (`numpy`'s `tolist()`, then `json.dumps`) and
/// `serde_json::json!` spell it: each float32 widened to a float64 and printed with up to 17
/// significant digits (4.9 MB of text for the 1 MiB tensor).
fn kserve_json_body() -> Vec<u8> {
    serde_json::json!({
        "inputs": [{ "name": "x", "shape": [1, ELEMENTS], "datatype": "FP32", "data": values() }]
    })
    .to_string()
    .into_bytes()
}

/// The same tensor with each float32 printed with its own shortest digits (1.8 MB of text).
fn kserve_json_body_short_digits() -> Vec<u8> {
    let data = serde_json::to_string(&values()).unwrap_or_default();
    format!(
        r#"{{"inputs":[{{"name":"x","shape":[1,{ELEMENTS}],"datatype":"FP32","data":{data}}}]}}"#
    )
    .into_bytes()
}

/// As the server does it: the whole wire-to-request step of KServe HTTP infer (the large
/// `data` lifted out, the envelope parsed, the data scanned straight into the tensor).
fn kserve_json_decode(body: &[u8], limits: &DecodeLimits) -> Option<usize> {
    let request = http::decode_infer_body(body, Bytes::new(), limits).ok()?;
    request
        .inputs
        .first()
        .map(|input| input.shape.iter().product())
}

/// The envelope alone: the structural pass that lifts `data` out, and the parse of the rest.
fn kserve_json_envelope(body: &[u8]) -> bool {
    let Some(lifted) = infer_lift::lift(body) else {
        return false;
    };
    let parsed: Option<InferBody> = serde_json::from_slice(lifted.envelope()).ok();
    matches!(parsed.and_then(|p| p.inputs), Some(Inputs::List(_)))
}

fn kserve_json(c: &mut Criterion) {
    let limits = DecodeLimits::default();
    let body = kserve_json_body();
    let mut group = c.benchmark_group("kserve_json");
    group.throughput(Throughput::Bytes(BYTES));
    group.bench_function("decode", |b| {
        b.iter(|| black_box(kserve_json_decode(&body, &limits)))
    });
    let short_body = kserve_json_body_short_digits();
    group.bench_function("decode_short_digits", |b| {
        b.iter(|| black_box(kserve_json_decode(&short_body, &limits)))
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
fn main() {
    if std::env::var_os("CODECS_CPU_TIME").is_some() {
        kserve_json_cpu_time();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

/// User plus system CPU time of this process so far, in clock ticks (1/100 s on Linux).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after its ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

fn cpu_ms_per_run(runs: u32, mut work: impl FnMut()) -> f64 {
    let start = cpu_ticks();
    for _ in 0..runs {
        work();
    }
    (cpu_ticks() - start) as f64 * 10.0 / f64::from(runs)
}

fn wall_ms_per_run(runs: u32, mut work: impl FnMut()) -> f64 {
    let start = std::time::Instant::now();
    for _ in 0..runs {
        work();
    }
    start.elapsed().as_secs_f64() * 1000.0 / f64::from(runs)
}

fn kserve_json_cpu_time() {
    let limits = DecodeLimits::default();
    let body = kserve_json_body();
    let output = tensor();
    let runs = 300;
    let decode = cpu_ms_per_run(runs, || {
        black_box(kserve_json_decode(&body, &limits));
    });
    let encode = cpu_ms_per_run(runs, || {
        let mut out = Vec::with_capacity(256);
        let _ = json_tensor::write_flat(&mut out, &output);
        black_box(out.len());
    });
    let data = serde_json::to_string(&values()).unwrap_or_default();
    let raw = serde_json::value::RawValue::from_string(data).unwrap_or_else(|err| panic!("{err}"));
    let data_only = cpu_ms_per_run(runs, || {
        let decoded = json_decode::decode_flat(&raw, vec![1, ELEMENTS], DataType::F32, &limits);
        black_box(decoded.map(|t| t.element_count()).ok());
    });
    let envelope_only = cpu_ms_per_run(runs, || {
        black_box(kserve_json_envelope(&body));
    });
    let short_body = kserve_json_body_short_digits();
    let short_digits = cpu_ms_per_run(runs, || {
        black_box(kserve_json_decode(&short_body, &limits));
    });
    // The same decode with one helper thread free to read half of the numbers: wall time, as
    // the point is the time a request waits; CPU time counts both threads.
    let helped = DecodeLimits {
        scan_helpers: ScanHelpers::new(1),
        ..DecodeLimits::default()
    };
    let alone_wall = wall_ms_per_run(runs, || {
        black_box(kserve_json_decode(&body, &limits));
    });
    let helped_wall = wall_ms_per_run(runs, || {
        black_box(kserve_json_decode(&body, &helped));
    });
    let helped_cpu = cpu_ms_per_run(runs, || {
        black_box(kserve_json_decode(&body, &helped));
    });
    println!(
        "kserve_json decode, wall time per run over {runs} runs: alone {alone_wall:.2} ms, with \
         one helper thread {helped_wall:.2} ms ({helped_cpu:.2} ms of CPU time)"
    );
    println!(
        "kserve_json per 1 MiB float32 tensor, CPU time over {runs} runs: decode {decode:.2} ms \
         ({} bytes of text; the envelope alone {envelope_only:.2} ms), decode with shortest \
         float32 digits {short_digits:.2} ms ({} bytes; the data alone {data_only:.2} ms), \
         encode {encode:.2} ms",
        body.len(),
        short_body.len()
    );
}
