//! Runs the gRPC and HTTP servers (and the optional metrics listener) on listeners the caller
//! bound, until a shutdown future resolves, then drains. Nothing here binds a port, so tests
//! can bind `127.0.0.1:0`.
//!
//! Shutdown, in order: readiness turns false (HTTP probes answer 503, gRPC health
//! NOT_SERVING); after `shutdown_delay` the listeners close, so new connections are refused;
//! requests in flight, and those queued behind them in the batchers, finish (up to `drain`);
//! then [`run`] returns `Ok` and the process exits 0.

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::{Extension, Router};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::health::{Health, Readiness};
use crate::api::rest_util::RestError;
use crate::api::route_table::Routes;
use crate::api::{health, kserve, scrape, tfserving};
use crate::infer::InferService;
use crate::overload::{Overload, OverloadSettings};
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer;
use crate::proto::tensorflow::serving::{
    model_service_server::ModelServiceServer, prediction_service_server::PredictionServiceServer,
};

/// How often the gRPC health statuses are brought in line with model state.
const HEALTH_REFRESH: Duration = Duration::from_secs(1);

/// HTTP/2 flow-control windows for gRPC: per stream, and per connection (several requests in
/// flight on one connection).
const GRPC_STREAM_WINDOW: u32 = 4 << 20;
const GRPC_CONNECTION_WINDOW: u32 = 16 << 20;

/// The bound sockets the server answers on.
pub struct Listeners {
    pub grpc: TcpListener,
    pub rest: TcpListener,
    /// `/metrics` and the probes on a port of their own (`--metrics-port`), unprotected.
    pub metrics: Option<TcpListener>,
}

/// Transport, overload and shutdown settings.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Largest request body (HTTP) or message (gRPC) accepted, in bytes.
    pub max_request_bytes: usize,
    pub overload: OverloadSettings,
    /// Between readiness turning false and the listeners closing, so that load balancers
    /// notice before connections are refused.
    pub shutdown_delay: Duration,
    /// How long requests in flight and queued may take to finish once the listeners close.
    pub drain: Duration,
    /// Which models must serve for the server to report ready.
    pub readiness: Readiness,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_request_bytes: 64 << 20,
            overload: OverloadSettings::default(),
            shutdown_delay: Duration::ZERO,
            drain: Duration::from_secs(30),
            readiness: Readiness::default(),
        }
    }
}

/// Why a server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("gRPC server failed: {0}")]
    Grpc(#[from] tonic::transport::Error),
    #[error("HTTP server failed: {0}")]
    Http(#[from] std::io::Error),
}

/// Every route of the HTTP port. Add routes here (or in the protocol modules) through
/// [`Routes`], so that [`rest_route_paths`] lists them.
fn rest_routes() -> Routes<Arc<InferService>> {
    tfserving::rest::routes()
        .merge(kserve::http::routes())
        .merge(health::routes())
        .merge(scrape::routes())
}

/// The path templates the HTTP port serves, for the test that holds the OpenAPI document
/// (`openapi/tensorport.yaml`) to them. Nothing on the request path uses it.
pub fn rest_route_paths() -> Vec<&'static str> {
    rest_routes().paths().to_vec()
}

/// The HTTP application without its state: the routes and a JSON 404 for everything else.
fn rest_router(options: &ServerOptions) -> Router<Arc<InferService>> {
    rest_routes()
        .into_router()
        .fallback(|uri: axum::http::Uri| async move { RestError::not_found_path(uri.path()) })
        .layer(DefaultBodyLimit::max(options.max_request_bytes))
}

/// The HTTP application: TF Serving REST, KServe v2 HTTP, health, `/metrics`, and a JSON 404
/// for everything else, behind the overload stack.
pub fn rest_app(
    infer: Arc<InferService>,
    health: &Arc<Health>,
    overload: &Overload,
    options: &ServerOptions,
) -> Router {
    rest_router(options)
        .with_state(infer)
        .layer(Extension(health.clone()))
        .layer(overload.layer::<axum::body::Body>())
}

/// The `--metrics-port` application: `/metrics` and the probes, without overload protection
/// (a scrape or a probe must get through when the server is busiest).
fn metrics_app(infer: Arc<InferService>, health: &Arc<Health>) -> Router {
    scrape::routes()
        .merge(health::routes())
        .into_router()
        .with_state(infer)
        .layer(Extension(health.clone()))
}

/// Serves until `shutdown` resolves, then drains as the module documentation says.
pub async fn run(
    infer: Arc<InferService>,
    listeners: Listeners,
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let health = Arc::new(Health::new(infer.clone(), options.readiness));
    health.publish().await;
    let overload = Overload::new(&options.overload, infer.shared_metrics());
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        // An error means the sender is gone, which also means stop.
        let _ = rx.wait_for(|stop| *stop).await;
    };
    tokio::spawn(refresh_health(health.clone(), stopped(stop_rx.clone())));

    let tf = tfserving::grpc::TfServingGrpc::new(infer.clone());
    let kserve_grpc = kserve::grpc::KserveGrpc::new(infer.clone(), health.clone());
    let limit = options.max_request_bytes;
    let grpc = tonic::transport::Server::builder()
        // HTTP/2's default 64 KiB windows make a client wait for a window update every 64 KiB
        // of a large request; windows of a few MiB let a tensor arrive in one flight.
        .initial_stream_window_size(GRPC_STREAM_WINDOW)
        .initial_connection_window_size(GRPC_CONNECTION_WINDOW)
        .layer(overload.layer::<tonic::body::Body>())
        .add_service(health.grpc_service())
        .add_service(
            PredictionServiceServer::new(tf.clone())
                .max_decoding_message_size(limit)
                .max_encoding_message_size(usize::MAX),
        )
        .add_service(
            ModelServiceServer::new(tf)
                .max_decoding_message_size(limit)
                .max_encoding_message_size(usize::MAX),
        )
        .add_service(
            GrpcInferenceServiceServer::new(kserve_grpc)
                .max_decoding_message_size(limit)
                .max_encoding_message_size(usize::MAX),
        )
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listeners.grpc).with_nodelay(Some(true)),
            stopped(stop_rx.clone()),
        );
    let app = rest_app(infer.clone(), &health, &overload, &options)
        .into_make_service_with_connect_info::<SocketAddr>();
    let rest = axum::serve(listeners.rest, app)
        .with_graceful_shutdown(stopped(stop_rx.clone()))
        .into_future();
    let metrics = async {
        match listeners.metrics {
            Some(listener) => {
                let app = metrics_app(infer.clone(), &health);
                axum::serve(listener, app)
                    .with_graceful_shutdown(stopped(stop_rx.clone()))
                    .await
            }
            None => Ok(()),
        }
    };
    let servers = async {
        let (grpc, rest, metrics) = tokio::join!(grpc, rest, metrics);
        grpc?;
        rest?;
        metrics?;
        Ok::<(), ServerError>(())
    };
    tokio::pin!(servers);

    tokio::select! {
        // A server that ends on its own has failed; there is nothing to drain.
        result = &mut servers => return result,
        () = shutdown => {}
    }
    health.start_draining().await;
    tracing::info!(
        delay_ms = u64::try_from(options.shutdown_delay.as_millis()).unwrap_or(u64::MAX),
        "shutting down: readiness is now false"
    );
    tokio::select! {
        result = &mut servers => return result,
        () = tokio::time::sleep(options.shutdown_delay) => {}
    }
    let _ = stop_tx.send(true);
    tracing::info!(
        drain_secs = options.drain.as_secs(),
        "listeners closed; draining requests in flight"
    );
    match tokio::time::timeout(options.drain, &mut servers).await {
        Ok(result) => {
            tracing::info!("drained");
            result
        }
        Err(_) => {
            tracing::warn!(
                drain_secs = options.drain.as_secs(),
                "requests still in flight at the end of the drain period are cut off"
            );
            Ok(())
        }
    }
}

/// Republishes gRPC health until `stopped`, so that model state changes reach watchers.
async fn refresh_health(health: Arc<Health>, stopped: impl Future<Output = ()>) {
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            () = &mut stopped => return,
            () = tokio::time::sleep(HEALTH_REFRESH) => health.publish().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paths axum itself holds, read from its `Debug` output (axum has no listing API).
    /// Only a cross-check: it catches a route added to the router behind `Routes`' back.
    fn axum_paths(router: &Router<Arc<InferService>>) -> Vec<String> {
        let debug = format!("{router:?}");
        debug
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|s| s.starts_with('/'))
            // The fallback is registered as "/" and a private catch-all; it is no route.
            .filter(|s| *s != "/" && !s.contains("__private__axum"))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn the_route_listing_is_what_the_router_serves() {
        let options = ServerOptions {
            max_request_bytes: 1 << 20,
            ..ServerOptions::default()
        };
        let mut from_axum = axum_paths(&rest_router(&options));
        from_axum.sort();
        from_axum.dedup();
        assert!(
            from_axum.len() > 10,
            "axum's Debug output no longer shows paths; update this test: {from_axum:?}"
        );
        let mut listed: Vec<String> = rest_route_paths()
            .into_iter()
            .filter(|p| !p.starts_with("/v1/"))
            .map(str::to_owned)
            .chain(["/v1/models/{*rest}".to_owned()])
            .collect();
        listed.sort();
        assert_eq!(from_axum, listed);
    }
}
