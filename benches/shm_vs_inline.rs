//! Time per request for a large input sent inline over gRPC (`raw_input_contents`) versus
//! through system shared memory, as the tensor grows. The model sums each row, so the output
//! is tiny and the figures show what moving the input costs.
//!
//! `cargo bench --bench shm_vs_inline` (needs `make venv` for ONNX Runtime). The server runs
//! in-process on loopback with one intra-op thread; client and server share the machine.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::infer_parameter::ParameterChoice;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::{
    InferParameter, ModelInferRequest, ModelStatisticsRequest, SystemSharedMemoryRegisterRequest,
    SystemSharedMemoryUnregisterRequest,
};
use tensorport::tensor::DecodeLimits;
use tensorport::{Listeners, ServerOptions};
use tonic::transport::Channel;

mod support;

use support::BenchResult;

const SIZES_MIB: [f64; 5] = [0.0625, 1.0, 4.0, 16.0, 64.0];

#[tokio::main]
async fn main() -> BenchResult<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let grpc_url = start_server(root).await?;
    let mut client = GrpcInferenceServiceClient::connect(grpc_url)
        .await?
        .max_encoding_message_size(usize::MAX)
        .max_decoding_message_size(usize::MAX);

    println!("## Large input: inline gRPC vs system shared memory (model sum_rows)\n");
    println!("| input | inline p50 | shm p50 | inline server | shm server | inline / shm |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for mib in SIZES_MIB {
        let floats = ((mib * 1024.0 * 1024.0) as usize / 4).max(1);
        let data: Vec<f32> = (0..floats).map(|i| (i % 7) as f32).collect();
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        let rounds = if mib >= 16.0 { 20 } else { 100 };

        let inline = request(floats, Some(bytes.clone()), None);
        let (inline_p50, inline_server) = measure(&mut client, &inline, rounds).await?;

        let key = format!("/tensorport-bench-{}", std::process::id());
        let object = ShmObject::create(&key, &bytes)?;
        client
            .system_shared_memory_register(SystemSharedMemoryRegisterRequest {
                name: "bench".into(),
                key: key.clone(),
                offset: 0,
                byte_size: bytes.len() as u64,
            })
            .await?;
        let shm = request(floats, None, Some(bytes.len() as u64));
        let (shm_p50, shm_server) = measure(&mut client, &shm, rounds).await?;
        client
            .system_shared_memory_unregister(SystemSharedMemoryUnregisterRequest {
                name: "bench".into(),
            })
            .await?;
        drop(object);

        println!(
            "| {} | {} | {} | {} | {} | {:.1}x |",
            size_label(bytes.len()),
            micros(inline_p50),
            micros(shm_p50),
            micros(inline_server),
            micros(shm_server),
            inline_p50.as_secs_f64() / shm_p50.as_secs_f64()
        );
    }
    println!("\np50: client-observed latency; server: mean time inside the server per request (statistics `success`).");
    Ok(())
}

async fn start_server(root: &Path) -> BenchResult<String> {
    let onnx = support::onnx_runtime(root)?;
    let limit = 1 << 30;
    let limits = DecodeLimits {
        max_tensor_bytes: limit,
        ..DecodeLimits::default()
    };
    let folder = root.join("tests/models");
    let infer = support::infer_service(&folder, onnx, Duration::ZERO, limits).await?;
    let infer = Arc::new(infer);
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let rest = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", grpc.local_addr()?);
    tokio::spawn(tensorport::run(
        infer,
        Listeners {
            grpc: Some(grpc),
            rest: Some(rest),
            metrics: None,
        },
        ServerOptions {
            max_request_bytes: limit,
            ..ServerOptions::default()
        },
        std::future::pending(),
    ));
    Ok(url)
}

fn request(floats: usize, raw: Option<Vec<u8>>, shm_bytes: Option<u64>) -> ModelInferRequest {
    let mut parameters = std::collections::HashMap::new();
    if let Some(size) = shm_bytes {
        let param = |choice| InferParameter {
            parameter_choice: Some(choice),
        };
        parameters.insert(
            "shared_memory_region".into(),
            param(ParameterChoice::StringParam("bench".into())),
        );
        parameters.insert(
            "shared_memory_byte_size".into(),
            param(ParameterChoice::Int64Param(size as i64)),
        );
    }
    ModelInferRequest {
        model_name: "sum_rows".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![1, floats as i64],
            parameters,
            contents: None,
        }],
        raw_input_contents: raw.map(|r| vec![r.into()]).unwrap_or_default(),
        ..Default::default()
    }
}

/// p50 of client-observed latency and the server's mean time per request.
async fn measure(
    client: &mut GrpcInferenceServiceClient<Channel>,
    request: &ModelInferRequest,
    rounds: usize,
) -> BenchResult<(Duration, Duration)> {
    for _ in 0..3 {
        client.model_infer(request.clone()).await?;
    }
    let before = server_success(client).await?;
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let message = request.clone();
        let started = Instant::now();
        client.model_infer(message).await?;
        samples.push(started.elapsed());
    }
    let after = server_success(client).await?;
    samples.sort();
    let server = Duration::from_nanos((after.1 - before.1) / (after.0 - before.0).max(1));
    Ok((samples[samples.len() / 2], server))
}

async fn server_success(
    client: &mut GrpcInferenceServiceClient<Channel>,
) -> BenchResult<(u64, u64)> {
    let stats = client
        .model_statistics(ModelStatisticsRequest {
            name: "sum_rows".into(),
            version: String::new(),
        })
        .await?
        .into_inner();
    let success = stats
        .model_stats
        .first()
        .and_then(|m| m.inference_stats)
        .and_then(|s| s.success)
        .unwrap_or_default();
    Ok((success.count, success.ns))
}

/// A POSIX shared-memory object filled with `bytes`, removed on drop.
struct ShmObject(String);

impl ShmObject {
    fn create(key: &str, bytes: &[u8]) -> BenchResult<Self> {
        let fd = rustix::shm::open(
            key,
            rustix::shm::OFlags::CREATE | rustix::shm::OFlags::RDWR | rustix::shm::OFlags::TRUNC,
            rustix::fs::Mode::from_raw_mode(0o600),
        )?;
        let mut file = std::fs::File::from(fd);
        file.write_all(bytes)?;
        Ok(Self(key.to_owned()))
    }
}

impl Drop for ShmObject {
    fn drop(&mut self) {
        let _ = rustix::shm::unlink(self.0.as_str());
    }
}

fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

fn micros(d: Duration) -> String {
    format!("{} us", d.as_micros())
}
