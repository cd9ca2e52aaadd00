//! Liveness and readiness, for Kubernetes probes and for the protocols' own health calls:
//! `grpc.health.v1.Health` (overall and per service), KServe's server live / ready (HTTP and
//! gRPC), and the model-independent `/livez` and `/readyz`.
//!
//! Live: the process answers, from the moment the ports are bound (before any model loads,
//! so that a slow model never fails a liveness or startup probe). Ready: the load at start-up
//! has settled, the server is not draining, and the models meet the [`Readiness`] policy;
//! with no model available the server is never ready. On shutdown readiness turns false
//! first, before the listeners close, so that load balancers stop sending work here.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tonic_health::ServingStatus;

use crate::api::http::response::json_response;
use crate::api::http::route_table::Routes;
use crate::background::Background;
use crate::infer::InferService;
use crate::repository::{ModelRecord, ModelRepository, Residence, VersionState};

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

/// Which models must serve for the server to be ready (`--readiness`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Readiness {
    /// At least one model serves: one broken model does not keep the others out of service.
    /// (Models that appear later load beside the serving ones without turning readiness off.)
    #[default]
    Any,
    /// Triton's strict readiness: every model serves (models unloaded on purpose aside), so
    /// one that failed to load keeps the server unready.
    All,
}

/// The server's health. Owned by [`crate::server::run`] for the server's lifetime.
pub struct Health {
    infer: Arc<InferService>,
    readiness: Readiness,
    draining: AtomicBool,
    reporter: HealthReporter,
    published: AtomicU8,
    /// A failed background task keeps the server unready, and says why.
    background: Arc<Background>,
}

impl Health {
    pub fn new(
        infer: Arc<InferService>,
        readiness: Readiness,
        background: Arc<Background>,
    ) -> Self {
        Self {
            infer,
            readiness,
            draining: AtomicBool::new(false),
            reporter: HealthReporter::new(),
            published: AtomicU8::new(UNPUBLISHED),
            background,
        }
    }

    /// Whether the server should receive traffic.
    pub fn ready(&self) -> bool {
        let repository = self.infer.repository();
        !self.draining.load(Ordering::Acquire)
            && self.background.failure().is_none()
            && repository.initial_load_settled()
            && models_ready(repository, self.readiness)
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

/// `/livez`, `/readyz` and KServe's `/v2/health/{live,ready}`, reading the server's
/// [`Health`] from the router's state. Generic over that state (the server's is
/// [`AppState`](crate::api::AppState)), so that this file, which the state names, does not
/// import it back.
pub fn routes<S>() -> Routes<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<Health>: FromRef<S>,
{
    Routes::new()
        .route("/livez", get(live))
        .route("/v2/health/live", get(live))
        .route("/readyz", get(ready))
        .route("/v2/health/ready", get(ready))
}

async fn ready(State(health): State<Arc<Health>>) -> Response {
    let mut body = match health.background.failure() {
        Some(reason) => json!({ "ready": false, "reason": reason }),
        None => json!({ "ready": health.ready() }),
    };
    // Payload logs that lost records are shown, but do not make the server unready: logging
    // never fails a request, and a full log disk should not take the models out of service.
    if let Some(losses) = payload_log_losses(health.infer.repository()) {
        body["payload_log"] = losses;
    }
    let ready = body["ready"] == true;
    readiness(ready, &body)
}

/// `{model: {records_lost, error, failing}}` for each model whose payload log lost records;
/// `None` when none did.
fn payload_log_losses(repository: &ModelRepository) -> Option<serde_json::Value> {
    let snapshot = repository.snapshot();
    let losses: serde_json::Map<String, serde_json::Value> = snapshot
        .models()
        .filter_map(|record| {
            let losses = record.payload_log.as_ref()?.losses()?;
            let detail = json!({
                "records_lost": losses.records_lost,
                "error": losses.error,
                "failing": losses.failing,
            });
            Some((record.name.clone(), detail))
        })
        .collect();
    (!losses.is_empty()).then_some(serde_json::Value::Object(losses))
}

async fn live() -> Response {
    json_response(&json!({ "live": true }))
}

/// 200 with `{"ready": true}`, or 503 with `{"ready": false}`: probes read the status.
fn readiness(ready: bool, body: &serde_json::Value) -> Response {
    let mut response = json_response(body).into_response();
    if !ready {
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    response
}

/// Where one model stands, as readiness sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelReadiness {
    Serving,
    /// Its first version is still loading.
    Loading,
    /// Every version was unloaded on purpose (the unload API, or a removed version).
    Unloaded,
    /// Nothing serves and nothing is loading: it failed, or has no version folder.
    Failed,
}

/// Written as an exhaustive match so that a new state has to decide here how it counts.
fn model_readiness(model: &ModelRecord) -> ModelReadiness {
    if model.is_available() {
        return ModelReadiness::Serving;
    }
    let mut unloaded = !model.versions.is_empty();
    for state in model.versions.values() {
        match state {
            VersionState::Loading => return ModelReadiness::Loading,
            VersionState::Available(_) | VersionState::End { error: Some(_) } => unloaded = false,
            VersionState::Unloading | VersionState::End { error: None } => {}
            // Loads on its first request: as good as serving for readiness.
            VersionState::NotResident(Residence::NotLoaded | Residence::Evicted) => {
                return ModelReadiness::Serving
            }
            VersionState::NotResident(Residence::TooLarge { .. }) => unloaded = false,
        }
    }
    if unloaded {
        ModelReadiness::Unloaded
    } else {
        ModelReadiness::Failed
    }
}

/// Whether the models meet `policy`. Either way some model must serve: a server with
/// nothing to serve is not ready.
fn models_ready(repository: &ModelRepository, policy: Readiness) -> bool {
    let snapshot = repository.snapshot();
    let states: Vec<ModelReadiness> = snapshot.models().map(model_readiness).collect();
    let any_serving = states.contains(&ModelReadiness::Serving);
    any_serving
        && match policy {
            Readiness::Any => true,
            Readiness::All => states
                .iter()
                .all(|s| matches!(s, ModelReadiness::Serving | ModelReadiness::Unloaded)),
        }
}
