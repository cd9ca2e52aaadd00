//! Protocol adapters: wire formats in, domain types to [`crate::infer::InferService`], wire
//! formats out.
//!
//! This level is the front door only: the state the HTTP handlers share ([`AppState`]), the
//! hot routes that skip the router for inference ([`hot_routes`]), the gRPC calls decoded
//! from the received body in front of tonic's routes ([`in_place`]), the probes ([`health`])
//! and the metrics scrape ([`scrape`]). Beneath it, each protocol is a folder whose
//! dispatcher stands above its operations, with what they share in a leaf underneath
//! ([`kserve`], [`tfserving`]); beneath those, the JSON tensor codec ([`json`]) and the HTTP
//! plumbing both protocols use ([`http`]). No file imports the file that routes to it.

pub mod health;
pub mod hot_routes;
pub mod http;
pub mod in_place;
pub mod json;
pub mod kserve;
pub mod scrape;
pub mod tfserving;

use std::sync::Arc;

use axum::extract::FromRef;

use crate::infer::InferService;
use crate::log_settings::LogSettings;
use crate::trace::TraceSettings;

/// What the HTTP handlers read: the inference service, and the server's health for the
/// probes. Given to the router as its state (not each request as an extension, which costs an
/// allocation per request); each handler takes the part it needs.
#[derive(Clone)]
pub struct AppState {
    pub infer: Arc<InferService>,
    pub health: Arc<health::Health>,
    /// Triton's logging extension (`/v2/logging`), shared with the gRPC service.
    pub log_settings: Arc<LogSettings>,
    /// Triton's trace extension (`/v2/trace/setting`), shared with the gRPC service.
    pub trace_settings: Arc<TraceSettings>,
}

impl FromRef<AppState> for Arc<TraceSettings> {
    fn from_ref(state: &AppState) -> Self {
        state.trace_settings.clone()
    }
}

impl FromRef<AppState> for Arc<LogSettings> {
    fn from_ref(state: &AppState) -> Self {
        state.log_settings.clone()
    }
}

impl FromRef<AppState> for Arc<InferService> {
    fn from_ref(state: &AppState) -> Self {
        state.infer.clone()
    }
}

impl FromRef<AppState> for Arc<health::Health> {
    fn from_ref(state: &AppState) -> Self {
        state.health.clone()
    }
}
