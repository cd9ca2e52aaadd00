//! Liveness and readiness, for Kubernetes probes and for the protocols' own health calls:
//! `grpc.health.v1.Health` (overall and per service), KServe's server live / ready (HTTP and
//! gRPC), and the model-independent `/livez` and `/readyz`.
//!
//! Live: the process answers. Ready: every configured model has settled (loaded, or failed
//! for good, which its status reports; one broken model must not keep the others out of
//! service) and the server is not draining. On shutdown readiness turns false first, before
//! the listeners close, so that load balancers stop sending work here.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Extension;
use serde_json::json;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tonic_health::ServingStatus;

use crate::api::rest_util::json_response;
use crate::api::route_table::Routes;
use crate::infer::InferService;
use crate::repository::{ModelRepository, VersionState};

/// The gRPC services whose health is reported by name, besides the overall "".
pub const GRPC_SERVICES: [&str; 3] = [
    "tensorflow.serving.PredictionService",
    "tensorflow.serving.ModelService",
    "inference.GRPCInferenceService",
];

/// Readiness as last published to gRPC watchers, so that unchanged states are not re-sent.
const UNPUBLISHED: u8 = 0;
const PUBLISHED_READY: u8 = 1;
const PUBLISHED_NOT_READY: u8 = 2;

/// The server's health. Owned by [`crate::server::run`] for the server's lifetime.
pub struct Health {
    infer: Arc<InferService>,
    draining: AtomicBool,
    reporter: HealthReporter,
    published: AtomicU8,
}

impl Health {
    pub fn new(infer: Arc<InferService>) -> Self {
        Self {
            infer,
            draining: AtomicBool::new(false),
            reporter: HealthReporter::new(),
            published: AtomicU8::new(UNPUBLISHED),
        }
    }

    /// Whether the server should receive traffic.
    pub fn ready(&self) -> bool {
        !self.draining.load(Ordering::Acquire) && models_settled(self.infer.repository())
    }

    /// Readiness turns false for good: the server is shutting down.
    pub async fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
        self.publish().await;
    }

    /// Brings the gRPC health statuses in line with [`Health::ready`]; cheap when nothing
    /// changed, so it can run periodically (models may load or fail at any time).
    pub async fn publish(&self) {
        let ready = self.ready();
        let state = if ready {
            PUBLISHED_READY
        } else {
            PUBLISHED_NOT_READY
        };
        if self.published.swap(state, Ordering::AcqRel) == state {
            return;
        }
        let status = if ready {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for service in std::iter::once("").chain(GRPC_SERVICES) {
            self.reporter.set_service_status(service, status).await;
        }
    }

    /// `grpc.health.v1.Health`, answering from this state.
    pub fn grpc_service(&self) -> HealthServer<HealthService> {
        HealthServer::new(HealthService::from_health_reporter(self.reporter.clone()))
    }
}

/// `/livez`, `/readyz` and KServe's `/v2/health/{live,ready}`. They read the server's
/// [`Health`] from a request extension, so that the listing of routes can be built without
/// a running server.
pub fn routes<S>() -> Routes<S>
where
    S: Clone + Send + Sync + 'static,
{
    Routes::new()
        .route("/livez", get(live))
        .route("/v2/health/live", get(live))
        .route("/readyz", get(ready))
        .route("/v2/health/ready", get(ready))
}

async fn ready(Extension(health): Extension<Arc<Health>>) -> Response {
    readiness(health.ready())
}

async fn live() -> Response {
    json_response(&json!({ "live": true }))
}

/// 200 with `{"ready": true}`, or 503 with `{"ready": false}`: probes read the status.
fn readiness(ready: bool) -> Response {
    let mut response = json_response(&json!({ "ready": ready })).into_response();
    if !ready {
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    response
}

/// Whether every model has settled: it serves a version, or none of its versions is still
/// loading (it failed, or was unloaded, which its status reports). A new version loading
/// beside a serving one does not make the server unready. Written as an exhaustive match so
/// that a new state has to decide here whether it blocks readiness.
fn models_settled(repository: &ModelRepository) -> bool {
    repository.snapshot().models().all(|model| {
        model.is_available()
            || model.versions.values().all(|state| match state {
                VersionState::Loading => false,
                VersionState::Available(_) | VersionState::Unloading | VersionState::End { .. } => {
                    true
                }
            })
    })
}
