//! Starts the real server (the library's `run`) on 127.0.0.1:0 for integration tests.

// Test support fails loudly: a panic here is a failed test with its message.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
// Each test binary uses its own subset of this support.
#![allow(dead_code)]

pub mod budget;
pub mod gate;
pub mod otlp;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tensorport::backend::onnx::OnnxRuntime;
use tensorport::backend::onnx_library;
use tensorport::backend::RuntimeThreads;
use tensorport::batcher::BatchSettings;
use tensorport::infer::InferService;
use tensorport::metrics::Metrics;
use tensorport::repository::{BackendDecorator, Loader, ModelRepository};
use tensorport::shm::{ShmPolicy, ShmRegistry};
use tensorport::tensor::DecodeLimits;
use tensorport::{Listeners, ServerOptions};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// ONNX Runtime from ORT_DYLIB_PATH or the checkout's .venv (`make venv`). ONNX Runtime allows
/// one environment per process, so every test in this binary shares it.
pub fn onnx_runtime() -> OnnxRuntime {
    static RUNTIME: OnceLock<OnnxRuntime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let env_path = std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from);
            let library = onnx_library::find(None, env_path.as_deref(), &[repo_path("")])
                .unwrap_or_else(|| panic!("{}", onnx_library::HOW_TO_GET_IT));
            OnnxRuntime::load(&library).unwrap_or_else(|err| panic!("{err}"))
        })
        .clone()
}

pub struct TestServer {
    pub rest_url: String,
    pub grpc_url: String,
    pub metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl TestServer {
    /// Serves `examples/models` on two free loopback ports.
    pub async fn start() -> Self {
        Self::start_with(
            "examples/models",
            BatchSettings::default(),
            ServerOptions::default(),
        )
        .await
    }

    /// Serves the models in `models` (relative to the checkout) with these settings.
    pub async fn start_with(models: &str, batching: BatchSettings, options: ServerOptions) -> Self {
        Self::start_decorated(models, batching, options, None).await
    }

    /// Like [`Self::start_with`], with every loaded backend passed through `decorate`.
    pub async fn start_decorated(
        models: &str,
        batching: BatchSettings,
        options: ServerOptions,
        decorate: Option<BackendDecorator>,
    ) -> Self {
        Self::start_configured(models, batching, options, decorate, |repository| repository).await
    }

    /// Like [`Self::start_decorated`], with the repository's own settings (a memory budget,
    /// say) applied by `configure` before the first load.
    pub async fn start_configured(
        models: &str,
        batching: BatchSettings,
        options: ServerOptions,
        decorate: Option<BackendDecorator>,
        configure: impl FnOnce(ModelRepository) -> ModelRepository,
    ) -> Self {
        Self::start_full(
            models,
            batching,
            options,
            decorate,
            Duration::ZERO,
            configure,
        )
        .await
    }

    /// Like [`Self::start_configured`], letting requests of models whose runs take at most
    /// `inline_run_max` run on the calling thread (the tests above keep every request on the
    /// queue, so that what they observe does not depend on how fast a run was).
    pub async fn start_full(
        models: &str,
        batching: BatchSettings,
        options: ServerOptions,
        decorate: Option<BackendDecorator>,
        inline_run_max: Duration,
        configure: impl FnOnce(ModelRepository) -> ModelRepository,
    ) -> Self {
        Self::start_serving(
            models,
            batching,
            options,
            decorate,
            inline_run_max,
            configure,
            |infer| infer,
        )
        .await
    }

    /// Like [`Self::start_full`], with the inference service's own settings (its shadow
    /// queue, say) applied by `serve`.
    pub async fn start_serving(
        models: &str,
        batching: BatchSettings,
        options: ServerOptions,
        decorate: Option<BackendDecorator>,
        inline_run_max: Duration,
        configure: impl FnOnce(ModelRepository) -> ModelRepository,
        serve: impl FnOnce(InferService) -> InferService,
    ) -> Self {
        let metrics = Arc::new(Metrics::new());
        let loader = Loader {
            onnx: onnx_runtime(),
            threads: RuntimeThreads {
                intra_op: 1,
                inter_op: 1,
            },
            default_batching: batching,
            metrics: metrics.clone(),
            instances: 1,
            inline_run_max,
            strict_model_config: false,
        };
        let mut repository = ModelRepository::new(&repo_path(models), loader);
        if let Some(decorate) = decorate {
            repository = repository.with_backend_decorator(decorate);
        }
        let repository = Arc::new(configure(repository));
        repository
            .reconcile()
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        let infer = Arc::new(serve(InferService::new(
            repository,
            DecodeLimits::default(),
            metrics.clone(),
            Arc::new(ShmRegistry::new(ShmPolicy::Local)),
        )));
        let grpc = TcpListener::bind("127.0.0.1:0").await.expect("bind gRPC");
        let rest = TcpListener::bind("127.0.0.1:0").await.expect("bind REST");
        let grpc_url = format!("http://{}", grpc.local_addr().expect("gRPC address"));
        let rest_url = format!("http://{}", rest.local_addr().expect("REST address"));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let listeners = Listeners {
                grpc: Some(grpc),
                rest: Some(rest),
                metrics: None,
            };
            tensorport::run(infer, listeners, options, async {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
        });
        Self {
            rest_url,
            grpc_url,
            metrics,
            stop: Some(stop),
            task,
        }
    }

    /// Resolves the server's shutdown future: it starts draining.
    pub fn begin_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Whether `run` has returned.
    pub fn has_stopped(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the server and waits until it has.
    pub async fn stop(mut self) {
        self.begin_stop();
        (&mut self.task)
            .await
            .expect("server task finished cleanly");
    }
}
