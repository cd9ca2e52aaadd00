//! A stable-toolchain mutation fuzzer for the decoders that take client bytes. Each target
//! starts from its seed corpus (`tests/fuzz/<target>/`), mutates inputs with a seeded PRNG and
//! feeds them to the decoder: in process for the model configuration files, over real sockets
//! against the real server for the request decoders, so that the whole path from bytes to
//! answer is exercised. A target fails if the decoder panics, or if the server answers a
//! mutated request with a 5xx or stops answering.
//!
//! Each target runs for `TENSORPORT_FUZZ_SECS` seconds (default 1, so that the suite stays
//! quick) from `TENSORPORT_FUZZ_SEED` (default 1); `TENSORPORT_FUZZ_TARGETS` (comma-separated
//! target names) limits the mutating to those targets. A failure prints the seed and the input.
//! See docs/RELIABILITY.md.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{repo_path, TestServer};
use prost::Message;
use tensorport::batcher::BatchSettings;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::ModelInferRequest;
use tensorport::proto::tensorflow::serving::prediction_log::LogType;
use tensorport::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;
use tensorport::proto::tensorflow::serving::PredictRequest;
use tensorport::proto::tensorflow::serving::PredictionLog;
use tensorport::repository::tfrecord;
use tensorport::repository::ModelConfig;
use tensorport::tensor::{tensor_proto, DecodeLimits};
use tensorport::ServerOptions;

/// xorshift64*: deterministic, so that a seed reproduces a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: &[&[u8]] = &[
    b"\x00",
    b"\xff",
    b"\x7f",
    b"\x80",
    b"-1",
    b"0",
    b"1e999",
    b"18446744073709551616",
    b"\"",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b"null",
    b"\\u0000",
    b"\xff\xff\xff\xff\x0f",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"NaN",
];

/// One to four mutations of `input`.
fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(out.len() + 1);
        match rng.below(6) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let end = (at + rng.below(16)).min(out.len());
                out.drain(at.min(end)..end);
            }
            2 => {
                let token = INTERESTING[rng.below(INTERESTING.len())];
                out.splice(at..at, token.iter().copied());
            }
            3 if !out.is_empty() => {
                // Duplicate a chunk: repeated fields, nested arrays.
                let start = rng.below(out.len());
                let end = (start + 1 + rng.below(64)).min(out.len());
                let chunk = out[start..end].to_vec();
                out.splice(at..at, chunk);
            }
            4 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = rng.next() as u8;
            }
            _ => out.truncate(at),
        }
    }
    out
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = repo_path(&format!("tests/fuzz/{target}"));
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    let seeds: Vec<Vec<u8>> = entries.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!seeds.is_empty(), "{target} has no seeds");
    seeds
}

fn budget() -> (Duration, u64) {
    let secs = std::env::var("TENSORPORT_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(1.0);
    let seed = std::env::var("TENSORPORT_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1);
    (Duration::from_secs_f64(secs), seed.max(1))
}

/// Whether `target` mutates for the whole budget: all targets, or those named in
/// `TENSORPORT_FUZZ_TARGETS` (comma-separated); the others run their seeds only.
fn selected(target: &str) -> bool {
    match std::env::var("TENSORPORT_FUZZ_TARGETS") {
        Ok(list) => list.split(',').any(|name| name.trim() == target),
        Err(_) => true,
    }
}

/// Runs `check` on the seeds, then on mutations until the time is up; returns the count.
async fn fuzz<F, Fut>(target: &str, mut check: F) -> u64
where
    F: FnMut(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let (time, seed) = budget();
    let time = if selected(target) {
        time
    } else {
        Duration::ZERO
    };
    let seeds = corpus(target);
    let mut rng = Rng(seed);
    let mut runs = 0u64;
    for input in &seeds {
        if let Err(why) = check(input.clone()).await {
            panic!(
                "{target}: seed input failed: {why}\n{:?}",
                String::from_utf8_lossy(input)
            );
        }
        runs += 1;
    }
    let started = Instant::now();
    while started.elapsed() < time {
        let pick = rng.below(seeds.len());
        let input = mutate(&mut rng, &seeds[pick]);
        if let Err(why) = check(input.clone()).await {
            panic!(
                "{target}: seed {seed}, run {runs}: {why}\ninput: {:?}",
                String::from_utf8_lossy(&input)
            );
        }
        runs += 1;
    }
    eprintln!(
        "fuzz {target}: {runs} inputs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    runs
}

async fn server() -> TestServer {
    TestServer::start_with(
        "tests/models",
        BatchSettings::default(),
        ServerOptions::default(),
    )
    .await
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<(), String> {
    let mut request = client.post(url).body(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request
        .send()
        .await
        .map_err(|err| format!("no answer: {err}"))?;
    let status = response.status();
    if status.is_server_error() {
        let text = response.text().await.unwrap_or_default();
        return Err(format!("answered {status}: {text}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_request_decoders() {
    let server = server().await;
    let client = reqwest::Client::new();
    let kserve = format!("{}/v2/models/echo_float32/infer", server.rest_url);
    let strings = format!("{}/v2/models/echo_string/infer", server.rest_url);
    let tfs = format!("{}/v1/models/echo_float32:predict", server.rest_url);
    let shm = format!(
        "{}/v2/systemsharedmemory/region/fuzz/register",
        server.rest_url
    );
    let json = [("content-type", "application/json".to_owned())];
    fuzz("kserve_json", |body| post(&client, &kserve, &json, body)).await;
    fuzz("kserve_json", |body| post(&client, &strings, &json, body)).await;
    fuzz("tfserving_json", |body| post(&client, &tfs, &json, body)).await;
    fuzz("shm_register", |body| post(&client, &shm, &json, body)).await;
    // The binary extension: the JSON header's length travels in a header of its own, which
    // the mutation takes from the input's first line.
    fuzz("kserve_binary", |input| {
        let split = input.iter().position(|&b| b == b'\n').unwrap_or(0);
        let length = String::from_utf8_lossy(&input[..split]).trim().to_owned();
        let body = input.get(split + 1..).unwrap_or_default().to_vec();
        let headers = [
            ("content-type", "application/octet-stream".to_owned()),
            ("inference-header-content-length", length),
        ];
        let client = client.clone();
        let url = kserve.clone();
        async move {
            if http::HeaderValue::from_str(&headers[1].1).is_err() {
                return Ok(());
            }
            post(&client, &url, &headers, body).await
        }
    })
    .await;
    let live = client
        .get(format!("{}/v2/health/live", server.rest_url))
        .send()
        .await;
    assert_eq!(live.map(|r| r.status().as_u16()).ok(), Some(200));
    server.stop().await;
}

fn grpc_status(result: Result<(), tonic::Status>) -> Result<(), String> {
    match result {
        Ok(()) => Ok(()),
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::Internal | tonic::Code::Unknown | tonic::Code::Unavailable
            ) =>
        {
            Err(format!("answered {status:?}"))
        }
        Err(_) => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_request_decoders() {
    let server = server().await;
    let kserve = GrpcInferenceServiceClient::connect(server.grpc_url.clone())
        .await
        .unwrap();
    let tfs = PredictionServiceClient::connect(server.grpc_url.clone())
        .await
        .unwrap();
    // Mutated bytes that are not a message at all are the server's protobuf library's to
    // refuse; those that decode reach the server's own checks.
    fuzz("model_infer", |bytes| {
        let mut kserve = kserve.clone();
        async move {
            let Ok(request) = ModelInferRequest::decode(bytes.as_slice()) else {
                return Ok(());
            };
            grpc_status(kserve.model_infer(request).await.map(|_| ()))
        }
    })
    .await;
    fuzz("predict", |bytes| {
        let mut tfs = tfs.clone();
        async move {
            let Ok(request) = PredictRequest::decode(bytes.as_slice()) else {
                return Ok(());
            };
            grpc_status(tfs.predict(request).await.map(|_| ()))
        }
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn model_configuration_files() {
    let dir = std::env::temp_dir().join(format!("tensorport-fuzz-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (target, file, other) in [
        ("config_toml", "config.toml", "config.pbtxt"),
        ("config_pbtxt", "config.pbtxt", "config.toml"),
    ] {
        let _ = std::fs::remove_file(dir.join(other));
        fuzz(target, |bytes| {
            let path = dir.join(file);
            let dir = dir.clone();
            async move {
                std::fs::write(&path, &bytes).map_err(|err| err.to_string())?;
                // Any answer is fine; a panic fails the test.
                let _ = ModelConfig::load(&dir);
                Ok(())
            }
        })
        .await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One TFRecord record around `data`, with valid checksums, so that mutations of a record's
/// contents get past the framing to the decoders behind it.
fn framed(data: &[u8]) -> Vec<u8> {
    let length = (data.len() as u64).to_le_bytes();
    let mut out = length.to_vec();
    out.extend_from_slice(&tfrecord::masked_crc(&length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&tfrecord::masked_crc(data).to_le_bytes());
    out
}

/// The warmup file's decoding, as replay does it before running anything: the records, each
/// a `PredictionLog`, each input a `TensorProto`.
fn decode_warmup(file: &[u8]) {
    let Ok(records) = tfrecord::records(file) else {
        return;
    };
    for record in records {
        let Ok(log) = PredictionLog::decode(record) else {
            continue;
        };
        if let Some(LogType::PredictLog(predict)) = log.log_type {
            for proto in predict
                .request
                .into_iter()
                .flat_map(|r| r.inputs.into_values())
            {
                let _ = tensor_proto::decode(proto, &DecodeLimits::default());
            }
        }
    }
}

#[tokio::test]
async fn tfrecord_warmup_file() {
    // Each input is tried as a whole file (the framing) and as one record's contents.
    fuzz("tfrecord_warmup", |bytes| async move {
        decode_warmup(&bytes);
        decode_warmup(&framed(&bytes));
        Ok(())
    })
    .await;
}
