//! The `/v2` route table: every path KServe v2 serves over HTTP and the operation that
//! answers it. It stands above the operations; none of them imports it.

use axum::routing::{get, post};
use serde_json::json;

use super::infer::{infer_latest, infer_version};
use super::logging::{get_logging, post_logging};
use super::metadata::{
    config, config_version, metadata, metadata_version, ready, ready_version, server_metadata,
};
use super::repository::{index, load, unload};
use super::shared_memory::{
    cuda_register, cuda_status, shm_register, shm_status, shm_status_all, shm_unregister,
    shm_unregister_all,
};
use super::statistics::{all_stats, stats, stats_version};
use super::support::ok;
use super::trace::{get_model_trace, get_trace, post_model_trace, post_trace};
use crate::api::http::model_name::name_model;
use crate::api::http::response::json_response;
use crate::api::http::route_table::Routes;
use crate::api::AppState;

/// The `/v2` routes, waiting for their state; the health checks are `crate::api::health`'s.
pub fn routes() -> Routes<AppState> {
    Routes::new()
        .route("/v2", get(server_metadata))
        .route("/v2/models/stats", get(all_stats))
        .route("/v2/models/{name}", get(metadata))
        .route("/v2/models/{name}/ready", get(ready))
        .route("/v2/models/{name}/config", get(config))
        .route("/v2/models/{name}/stats", get(stats))
        .route("/v2/models/{name}/infer", post(infer_latest))
        .route(
            "/v2/models/{name}/versions/{version}",
            get(metadata_version),
        )
        .route(
            "/v2/models/{name}/versions/{version}/ready",
            get(ready_version),
        )
        .route(
            "/v2/models/{name}/versions/{version}/config",
            get(config_version),
        )
        .route(
            "/v2/models/{name}/versions/{version}/stats",
            get(stats_version),
        )
        .route(
            "/v2/models/{name}/versions/{version}/infer",
            post(infer_version),
        )
        .route("/v2/logging", get(get_logging).post(post_logging))
        .route("/v2/trace/setting", get(get_trace).post(post_trace))
        .route(
            "/v2/models/{name}/trace/setting",
            get(get_model_trace).post(post_model_trace),
        )
        .route("/v2/repository/index", post(index))
        .route("/v2/repository/models/{name}/load", post(load))
        .route("/v2/repository/models/{name}/unload", post(unload))
        .route("/v2/systemsharedmemory/status", get(shm_status_all))
        .route(
            "/v2/systemsharedmemory/region/{region}/status",
            get(shm_status),
        )
        .route(
            "/v2/systemsharedmemory/region/{region}/register",
            post(shm_register),
        )
        .route(
            "/v2/systemsharedmemory/region/{region}/unregister",
            post(shm_unregister),
        )
        .route(
            "/v2/systemsharedmemory/unregister",
            post(shm_unregister_all),
        )
        .route(
            "/v2/cudasharedmemory/status",
            get(|| async { json_response(&json!([])) }),
        )
        .route(
            "/v2/cudasharedmemory/region/{region}/status",
            get(cuda_status),
        )
        .route(
            "/v2/cudasharedmemory/region/{region}/register",
            post(cuda_register),
        )
        .route("/v2/cudasharedmemory/region/{region}/unregister", post(ok))
        .route("/v2/cudasharedmemory/unregister", post(ok))
        // Last: it wraps every route above. The hot infer routes bypass the router; their
        // model is named by `InferService::prepare`.
        .route_layer(axum::middleware::from_fn(name_model))
}
