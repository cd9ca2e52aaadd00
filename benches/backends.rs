//! The same ranking MLP (features f32[n, 16] -> score f32[n, 1]) in each model format: time per
//! call of the backend in-process, next to the throughput of the server answering KServe gRPC
//! requests for it. The difference is what serving costs (protocol, validation, queueing).
//!
//! `make libtorch libtensorflow venv && cargo bench --features "torch tensorflow" --bench
//! backends`. The server runs in-process on loopback with one intra-op thread per model; client and server share the
//! machine. A new format is one more row in `FORMATS`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tensorport::backend::onnx::OnnxRuntime;
use tensorport::backend::{onnx_library, Backend, RuntimeThreads};
use tensorport::batcher::BatchSettings;
use tensorport::infer::InferService;
use tensorport::metrics::Metrics;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::ModelInferRequest;
use tensorport::repository::{Loader, ModelConfig, ModelRepository};
use tensorport::shm::{ShmPolicy, ShmRegistry};
use tensorport::tensor::{DecodeLimits, Tensor};
use tensorport::{Listeners, ServerOptions};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// One format of the MLP: its name in the table (and the served model's name) and its folder.
struct Format {
    name: &'static str,
    /// Relative to the repository: the model folder, holding `1/<model file>`.
    folder: &'static str,
}

const FORMATS: [Format; 3] = [
    Format {
        name: "onnx",
        folder: "examples/models/ranker",
    },
    Format {
        name: "torchscript",
        folder: "tests/models/ranker_torch",
    },
    Format {
        name: "savedmodel",
        folder: "tests/models/ranker_tf",
    },
];

const ROWS: [usize; 2] = [1, 32];
const CONCURRENCY: usize = 8;
const SERVED_FOR: Duration = Duration::from_secs(3);
const THREADS: RuntimeThreads = RuntimeThreads {
    intra_op: 1,
    inter_op: 1,
};

#[tokio::main]
async fn main() -> BenchResult<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let onnx = onnx_runtime(root)?;
    tensorport::backend::torch::configure_process(THREADS)?;
    let models = served_models(root)?;
    let grpc_url = start_server(&models, onnx.clone()).await?;

    println!("## One MLP, each format: in-process call versus served throughput\n");
    println!(
        "| format | rows | in-process p50 | in-process calls/s | served req/s (concurrency {CONCURRENCY}) | served / in-process |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let loader = Loader {
        onnx,
        threads: THREADS,
        default_batching: BatchSettings::default(),
        metrics: Arc::new(Metrics::new()),
        instances: 1,
        inline_run_max: std::time::Duration::ZERO,
        strict_model_config: false,
    };
    for format in &FORMATS {
        let version = tensorport::repository::VersionFolder {
            version: 1,
            path: root.join(format.folder).join("1"),
        };
        let config = ModelConfig::load(&root.join(format.folder))?;
        let backend = loader.load(&version, &config)?;
        for rows in ROWS {
            let p50 = in_process(backend.as_ref(), rows)?;
            let served = served(&grpc_url, format.name, rows).await?;
            let direct = 1.0 / p50.as_secs_f64();
            println!(
                "| {} | {rows} | {:.1} µs | {direct:.0} | {served:.0} | {:.2} |",
                format.name,
                p50.as_secs_f64() * 1e6,
                served / direct
            );
        }
    }
    std::fs::remove_dir_all(&models)?;
    Ok(())
}

fn onnx_runtime(root: &Path) -> BenchResult<OnnxRuntime> {
    let env_path = std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from);
    let library = onnx_library::find(None, env_path.as_deref(), &[root.to_path_buf()])
        .ok_or(onnx_library::HOW_TO_GET_IT)?;
    Ok(OnnxRuntime::load(&library)?)
}

fn features(rows: usize) -> Vec<f32> {
    (0..rows * 16)
        .map(|i| ((i * 37) % 101) as f32 / 25.0 - 2.0)
        .collect()
}

/// p50 of `Backend::run` on `rows` rows, after a warmup.
fn in_process(backend: &dyn Backend, rows: usize) -> BenchResult<Duration> {
    let signature = backend.signatures()[0].clone();
    let outputs = vec![signature.outputs[0].name.clone()];
    let input = Tensor::from_vec(vec![rows, 16], features(rows))?;
    let mut samples = Vec::new();
    for round in 0..2200 {
        let inputs = vec![(signature.inputs[0].name.clone(), input.clone())];
        let started = Instant::now();
        backend.run(&signature, inputs, &outputs)?;
        if round >= 200 {
            samples.push(started.elapsed());
        }
    }
    samples.sort();
    Ok(samples[samples.len() / 2])
}

/// Requests per second the server answers for `model`, `CONCURRENCY` clients in a closed loop.
async fn served(url: &str, model: &str, rows: usize) -> BenchResult<f64> {
    let bytes: Vec<u8> = features(rows)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let request = ModelInferRequest {
        model_name: model.into(),
        inputs: vec![InferInputTensor {
            name: "features".into(),
            datatype: "FP32".into(),
            shape: vec![rows as i64, 16],
            ..Default::default()
        }],
        raw_input_contents: vec![bytes.into()],
        ..Default::default()
    };
    let client = GrpcInferenceServiceClient::connect(url.to_owned()).await?;
    for _ in 0..100 {
        client.clone().model_infer(request.clone()).await?;
    }
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..CONCURRENCY {
        let mut client = client.clone();
        let request = request.clone();
        clients.push(tokio::spawn(async move {
            let mut done = 0u64;
            while started.elapsed() < SERVED_FOR {
                if client.model_infer(request.clone()).await.is_ok() {
                    done += 1;
                }
            }
            done
        }));
    }
    let mut done = 0;
    for client in clients {
        done += client.await?;
    }
    Ok(done as f64 / started.elapsed().as_secs_f64())
}

/// A model folder holding each format's MLP under its format's name.
fn served_models(root: &Path) -> BenchResult<PathBuf> {
    let dir = std::env::temp_dir().join(format!("tensorport-bench-{}", std::process::id()));
    for format in &FORMATS {
        let folder = dir.join(format.name);
        std::fs::create_dir_all(&folder)?;
        let source = root.join(format.folder);
        std::os::unix::fs::symlink(source.join("1"), folder.join("1"))?;
        let config = source.join("config.toml");
        if config.exists() {
            std::fs::copy(config, folder.join("config.toml"))?;
        }
    }
    Ok(dir)
}

async fn start_server(models: &Path, onnx: OnnxRuntime) -> BenchResult<String> {
    let metrics = Arc::new(Metrics::new());
    let loader = Loader {
        onnx,
        threads: THREADS,
        default_batching: BatchSettings::default(),
        metrics: metrics.clone(),
        instances: 1,
        inline_run_max: std::time::Duration::ZERO,
        strict_model_config: false,
    };
    let repository = Arc::new(ModelRepository::new(models, loader));
    repository.reconcile().await?;
    let infer = Arc::new(InferService::new(
        repository,
        DecodeLimits::default(),
        metrics,
        Arc::new(ShmRegistry::new(ShmPolicy::Local)),
    ));
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
        ServerOptions::default(),
        std::future::pending(),
    ));
    Ok(url)
}
