//! Set-up shared by the benchmarks that run the real request path in their own process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tensorport::backend::onnx::OnnxRuntime;
use tensorport::backend::{onnx_library, RuntimeThreads};
use tensorport::batcher::BatchSettings;
use tensorport::infer::InferService;
use tensorport::metrics::Metrics;
use tensorport::repository::{Loader, ModelRepository};
use tensorport::shm::{ShmPolicy, ShmRegistry};
use tensorport::tensor::DecodeLimits;

pub type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// ONNX Runtime from `ORT_DYLIB_PATH`, or the checkout's virtual environment (`make venv`).
pub fn onnx_runtime(root: &Path) -> BenchResult<OnnxRuntime> {
    let env_path = std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from);
    let library = onnx_library::find(None, env_path.as_deref(), &[root.to_path_buf()])
        .ok_or(onnx_library::HOW_TO_GET_IT)?;
    Ok(OnnxRuntime::load(&library)?)
}

/// The request path over the models in `folder`, loaded: one instance and one intra-op and
/// one inter-op thread per model, a request run inline when its model's runs average at most
/// `inline_run_max`, its tensors decoded within `limits`.
pub async fn infer_service(
    folder: &Path,
    onnx: OnnxRuntime,
    inline_run_max: Duration,
    limits: DecodeLimits,
) -> BenchResult<InferService> {
    let metrics = Arc::new(Metrics::new());
    let loader = Loader {
        onnx,
        threads: RuntimeThreads {
            intra_op: 1,
            inter_op: 1,
        },
        default_batching: BatchSettings::default(),
        metrics: metrics.clone(),
        instances: 1,
        inline_run_max,
        strict_model_config: false,
    };
    let repository = Arc::new(ModelRepository::new(folder, loader));
    repository.reconcile().await?;
    Ok(InferService::new(
        repository,
        limits,
        metrics,
        Arc::new(ShmRegistry::new(ShmPolicy::Local)),
    ))
}
