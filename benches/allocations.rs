//! Heap allocations per request on the server's side, for one batch-1 request of the example
//! ranker over KServe gRPC, KServe JSON and TF Serving REST.
//!
//! `cargo bench --bench allocations` (needs `make venv` for ONNX Runtime).
//!
//! The real server runs in this process on loopback, on a Tokio runtime of its own whose
//! threads (workers and blocking threads) are marked when they start; a counting global
//! allocator counts the allocations (`alloc`, `alloc_zeroed` and `realloc` calls) and bytes
//! made on marked threads only. The clients run on another runtime, so their allocations are
//! not counted. What is counted is everything the server's Rust code allocates for a request,
//! the HTTP/2 and HTTP/1 stacks included; ONNX Runtime's own C++ allocations do not go through
//! Rust's allocator and are not counted. Requests are sent one at a time on one connection,
//! after a warm-up, and the totals are divided by the number sent.
//!
//! Each protocol is measured with every request through the batcher's queue, and with inline
//! runs allowed (a bound no run of the ranker comes near, so that every request after the
//! first takes that path whatever the machine's load).

// The counting allocator is the one `unsafe` here: it forwards every call to the system
// allocator unchanged, so it upholds `GlobalAlloc`'s contract exactly as `System` does.
#![allow(unsafe_code)]
// Set-up failures end the benchmark with their message.
#![allow(clippy::panic, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tensorport::backend::onnx::OnnxRuntime;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::ModelInferRequest;
use tensorport::tensor::DecodeLimits;
use tensorport::{Listeners, ServerOptions};

mod support;

use support::BenchResult;

const FEATURES: usize = 16;
const WARMUP: usize = 200;
const REQUESTS: usize = 2000;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread is one of the server's.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn count(bytes: usize) {
    // `try_with`: a thread being torn down has no thread-locals left; it is not counted.
    if COUNTED.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

struct Counting;

// SAFETY: every method forwards its arguments to `System` unchanged and returns its result;
// counting touches only atomics and a const-initialised thread-local, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller's contract for `realloc` is passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is passed on unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Where a server listens.
struct Urls {
    grpc: String,
    rest: String,
}

fn main() -> BenchResult<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let onnx = support::onnx_runtime(root)?;
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;

    println!("## Heap allocations per request (server side, example ranker, batch 1)\n");
    println!("| path | protocol | allocations / request | bytes / request |");
    println!("| --- | --- | ---: | ---: |");
    for (path, inline_run_max) in [
        ("through the queue", Duration::ZERO),
        ("inline", Duration::from_secs(3600)),
    ] {
        let server = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .on_thread_start(|| COUNTED.with(|counted| counted.set(true)))
            .enable_all()
            .build()?;
        let urls = server.block_on(start_server(root, onnx.clone(), inline_run_max))?;
        for protocol in ["kserve-grpc", "kserve-json", "tfs-rest"] {
            let (allocations, bytes) = client.block_on(measure(protocol, &urls))?;
            println!("| {path} | {protocol} | {allocations:.1} | {bytes:.0} |");
        }
        server.shutdown_background();
    }
    Ok(())
}

async fn start_server(
    root: &Path,
    onnx: OnnxRuntime,
    inline_run_max: Duration,
) -> BenchResult<Urls> {
    let folder = root.join("examples/models");
    let infer = Arc::new(
        support::infer_service(&folder, onnx, inline_run_max, DecodeLimits::default()).await?,
    );
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let rest = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let urls = Urls {
        grpc: format!("http://{}", grpc.local_addr()?),
        rest: format!("http://{}", rest.local_addr()?),
    };
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
    Ok(urls)
}

/// Allocations and bytes per request of `protocol`, averaged over [`REQUESTS`].
async fn measure(protocol: &str, urls: &Urls) -> BenchResult<(f64, f64)> {
    let values: Vec<f32> = (0..FEATURES).map(|i| i as f32 / 16.0).collect();
    let mut grpc = GrpcInferenceServiceClient::connect(urls.grpc.clone()).await?;
    let http = reqwest::Client::new();
    let grpc_request = ModelInferRequest {
        model_name: "ranker".into(),
        inputs: vec![InferInputTensor {
            name: "features".into(),
            datatype: "FP32".into(),
            shape: vec![1, FEATURES as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
            .into()],
        ..Default::default()
    };
    let (url, body) = match protocol {
        "kserve-json" => (
            format!("{}/v2/models/ranker/infer", urls.rest),
            serde_json::json!({"inputs": [{"name": "features", "datatype": "FP32",
                                            "shape": [1, FEATURES], "data": values}]})
            .to_string(),
        ),
        _ => (
            format!("{}/v1/models/ranker:predict", urls.rest),
            serde_json::json!({ "instances": [values] }).to_string(),
        ),
    };
    let mut before = (0, 0);
    for sent in 0..WARMUP + REQUESTS {
        if sent == WARMUP {
            before = totals();
        }
        if protocol == "kserve-grpc" {
            grpc.model_infer(grpc_request.clone()).await?;
        } else {
            let response = http.post(&url).body(body.clone()).send().await?;
            if !response.status().is_success() {
                return Err(format!("{protocol}: {}", response.text().await?).into());
            }
            response.bytes().await?;
        }
    }
    let after = totals();
    let per = |a: u64, b: u64| (a - b) as f64 / REQUESTS as f64;
    Ok((per(after.0, before.0), per(after.1, before.1)))
}

fn totals() -> (u64, u64) {
    (
        ALLOCATIONS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    )
}
