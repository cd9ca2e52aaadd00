//! What an operator's probes and scrapes see: live before the models load, ready only once
//! they have settled and some (or, with `--readiness all`, every) model serves, and the
//! metrics that say why. Each test builds its own model directory from the real models, so
//! that it controls when the load at start-up happens.

// Test support fails loudly: a panic here is a failed test with its message.
#![allow(clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{onnx_runtime, repo_path, TestResult};
use tensorport::api::health::Readiness;
use tensorport::backend::RuntimeThreads;
use tensorport::batcher::BatchSettings;
use tensorport::infer::InferService;
use tensorport::metrics::Metrics;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::ServerReadyRequest;
use tensorport::repository::{Loader, ModelRepository};
use tensorport::shm::{ShmPolicy, ShmRegistry};
use tensorport::tensor::DecodeLimits;
use tensorport::{Listeners, ServerOptions};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// A model directory under the system's temporary folder holding links to real models.
struct ModelDir(PathBuf);

impl ModelDir {
    fn new(test: &str, models: &[&str]) -> std::io::Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("tensorport-ops-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        for model in models {
            let source = [repo_path("examples/models"), repo_path("tests/models")]
                .into_iter()
                .map(|base| base.join(model))
                .find(|path| path.is_dir())
                .ok_or_else(|| std::io::Error::other(format!("no model {model}")))?;
            std::os::unix::fs::symlink(source, dir.join(model))?;
        }
        Ok(Self(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ModelDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server whose repository has not loaded yet: the test calls `load` when it wants the
/// load at start-up to happen, so nothing depends on how long loading takes.
struct Server {
    repository: Arc<ModelRepository>,
    rest: String,
    grpc: String,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(dir: &Path, readiness: Readiness) -> Self {
        let metrics = Arc::new(Metrics::new());
        let loader = Loader {
            onnx: onnx_runtime(),
            threads: RuntimeThreads {
                intra_op: 1,
                inter_op: 1,
            },
            default_batching: BatchSettings::default(),
            metrics: metrics.clone(),
            instances: 1,
            inline_run_max: std::time::Duration::ZERO,
            strict_model_config: false,
        };
        let repository = Arc::new(ModelRepository::new(dir, loader));
        let infer = Arc::new(InferService::new(
            repository.clone(),
            DecodeLimits::default(),
            metrics,
            Arc::new(ShmRegistry::new(ShmPolicy::Local)),
        ));
        let grpc = TcpListener::bind("127.0.0.1:0").await.expect("bind gRPC");
        let rest = TcpListener::bind("127.0.0.1:0").await.expect("bind REST");
        let grpc_url = format!("http://{}", grpc.local_addr().expect("gRPC address"));
        let rest_url = format!("http://{}", rest.local_addr().expect("REST address"));
        let options = ServerOptions {
            readiness,
            ..ServerOptions::default()
        };
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
            repository,
            rest: rest_url,
            grpc: grpc_url,
            stop: Some(stop),
            task,
        }
    }

    /// The load at start-up, as the binary runs it once its ports are bound.
    async fn load(&self) {
        self.repository
            .reconcile()
            .await
            .expect("model dir readable");
    }

    async fn status(&self, path: &str) -> reqwest::Result<u16> {
        Ok(reqwest::get(format!("{}{path}", self.rest))
            .await?
            .status()
            .as_u16())
    }

    async fn kserve_ready(&self) -> Result<bool, Box<dyn std::error::Error>> {
        let mut client = GrpcInferenceServiceClient::connect(self.grpc.clone()).await?;
        Ok(client
            .server_ready(ServerReadyRequest {})
            .await?
            .into_inner()
            .ready)
    }

    /// The overall `grpc.health.v1.Health` status.
    async fn grpc_health(&self) -> Result<ServingStatus, Box<dyn std::error::Error>> {
        let channel = tonic::transport::Channel::from_shared(self.grpc.clone())?
            .connect()
            .await?;
        let mut client = HealthClient::new(channel);
        let response = client
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await?;
        Ok(response.into_inner().status())
    }

    async fn scrape(&self, path: &str) -> reqwest::Result<String> {
        reqwest::get(format!("{}{path}", self.rest))
            .await?
            .text()
            .await
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

#[tokio::test]
async fn probes_answer_before_the_models_load_and_readiness_waits_for_them() -> TestResult {
    let dir = ModelDir::new("before-load", &["ranker", "sum_rows"])?;
    let server = Server::start(dir.path(), Readiness::Any).await;

    assert_eq!(server.status("/livez").await?, 200);
    assert_eq!(server.status("/v2/health/live").await?, 200);
    assert_eq!(server.status("/readyz").await?, 503);
    assert_eq!(server.status("/v2/health/ready").await?, 503);
    assert!(!server.kserve_ready().await?);
    assert_eq!(server.grpc_health().await?, ServingStatus::NotServing);
    // A request for a model that has not loaded yet is answered, not refused at the socket.
    assert_ne!(server.status("/v2/models/ranker/ready").await?, 200);

    server.load().await;
    assert_eq!(server.status("/readyz").await?, 200);
    assert_eq!(server.status("/v2/health/ready").await?, 200);
    assert!(server.kserve_ready().await?);
    // gRPC health follows within its refresh period; waited for, not timed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.grpc_health().await? != ServingStatus::Serving {
        assert!(
            std::time::Instant::now() < deadline,
            "gRPC health never turned SERVING"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_server_with_nothing_to_serve_is_never_ready() -> TestResult {
    for (test, models) in [("empty", &[][..]), ("only-broken", &["broken"][..])] {
        let dir = ModelDir::new(test, models)?;
        for readiness in [Readiness::Any, Readiness::All] {
            let server = Server::start(dir.path(), readiness).await;
            server.load().await;
            assert_eq!(server.status("/livez").await?, 200, "{test}");
            assert_eq!(server.status("/readyz").await?, 503, "{test} {readiness:?}");
            assert!(!server.kserve_ready().await?, "{test} {readiness:?}");
            server.stop().await;
        }
    }
    Ok(())
}

#[tokio::test]
async fn readiness_all_is_strict_about_a_model_that_failed() -> TestResult {
    let dir = ModelDir::new("one-broken", &["ranker", "broken"])?;
    let any = Server::start(dir.path(), Readiness::Any).await;
    any.load().await;
    assert_eq!(any.status("/readyz").await?, 200);
    any.stop().await;

    let all = Server::start(dir.path(), Readiness::All).await;
    all.load().await;
    assert_eq!(all.status("/readyz").await?, 503);
    assert_eq!(all.status("/v2/health/ready").await?, 503);
    assert!(!all.kserve_ready().await?);
    all.stop().await;
    Ok(())
}

#[tokio::test]
async fn readiness_all_does_not_count_a_model_unloaded_on_purpose() -> TestResult {
    let dir = ModelDir::new("unload", &["ranker", "sum_rows"])?;
    let server = Server::start(dir.path(), Readiness::All).await;
    server.load().await;
    assert_eq!(server.status("/readyz").await?, 200);
    server.repository.unload_model("sum_rows").await?;
    assert_eq!(server.status("/readyz").await?, 200);
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn metrics_say_which_versions_serve_with_counters_from_zero() -> TestResult {
    let dir = ModelDir::new("gauge", &["ranker", "broken"])?;
    let server = Server::start(dir.path(), Readiness::Any).await;
    server.load().await;
    let text = server.scrape("/metrics").await?;
    for line in [
        "tensorport_model_ready{model=\"ranker\",version=\"2\"} 1",
        "tensorport_model_ready{model=\"broken\",version=\"1\"} 0",
        "tensorport_model_load_failures_total{model=\"ranker\"} 0",
        "tensorport_model_unloads_total{model=\"ranker\"} 0",
        "tensorport_model_loads_total{model=\"broken\"} 0",
        "tensorport_model_load_failures_total{model=\"broken\"} 1",
        "\nprocess_cpu_seconds_total ",
        "\nprocess_open_fds ",
        "\nprocess_max_fds ",
        "\nprocess_resident_memory_bytes ",
        "\nprocess_start_time_seconds ",
        "\ntensorport_build_info{version=\"",
    ] {
        assert!(text.contains(line), "missing {line} in:\n{text}");
    }
    assert!(!text.contains("tensorport_process_"), "{text}");
    // TF Serving's path serves the same exposition.
    let tf = server.scrape("/monitoring/prometheus/metrics").await?;
    assert!(
        tf.contains("tensorport_model_ready{model=\"ranker\",version=\"2\"} 1"),
        "{tf}"
    );
    server.stop().await;
    Ok(())
}
