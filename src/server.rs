//! Runs the gRPC and HTTP servers on listeners the caller bound, until a shutdown future
//! resolves. Nothing here binds a port, so tests can bind `127.0.0.1:0`.

use std::future::Future;
use std::sync::Arc;

use std::net::SocketAddr;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::rest_util::RestError;
use crate::api::route_table::Routes;
use crate::api::{kserve, tfserving};
use crate::infer::InferService;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer;
use crate::proto::tensorflow::serving::{
    model_service_server::ModelServiceServer, prediction_service_server::PredictionServiceServer,
};

/// HTTP/2 flow-control windows for gRPC: per stream, and per connection (several requests in
/// flight on one connection).
const GRPC_STREAM_WINDOW: u32 = 4 << 20;
const GRPC_CONNECTION_WINDOW: u32 = 16 << 20;

/// The two bound sockets the server answers on.
pub struct Listeners {
    pub grpc: TcpListener,
    pub rest: TcpListener,
}

/// Transport settings.
#[derive(Debug, Clone, Copy)]
pub struct ServerOptions {
    /// Largest request body (HTTP) or message (gRPC) accepted, in bytes.
    pub max_request_bytes: usize,
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
        .merge(Routes::new().route("/metrics", get(metrics)))
}

/// The path templates the HTTP port serves, for the test that holds the OpenAPI document
/// (`openapi/tensorport.yaml`) to them. Nothing on the request path uses it.
pub fn rest_route_paths() -> Vec<&'static str> {
    rest_routes().paths().to_vec()
}

/// The HTTP application without its state: the routes and a JSON 404 for everything else.
fn rest_router(options: ServerOptions) -> Router<Arc<InferService>> {
    rest_routes()
        .into_router()
        .fallback(|uri: axum::http::Uri| async move { RestError::not_found_path(uri.path()) })
        .layer(DefaultBodyLimit::max(options.max_request_bytes))
}

/// The HTTP application: TF Serving REST, KServe v2 HTTP, metrics, and a JSON 404 for
/// everything else.
pub fn rest_app(infer: Arc<InferService>, options: ServerOptions) -> Router {
    rest_router(options).with_state(infer)
}

async fn metrics(State(infer): State<Arc<InferService>>) -> Response {
    let (regions, bytes) = infer.shm().usage();
    infer.metrics().set_shared_memory(regions, bytes);
    let mut response = infer.metrics().encode().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// Serves until `shutdown` resolves, then stops accepting and lets in-flight requests finish.
pub async fn run(
    infer: Arc<InferService>,
    listeners: Listeners,
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        // An error means the sender is gone, which also means stop.
        let _ = rx.wait_for(|stop| *stop).await;
    };

    let tf = tfserving::grpc::TfServingGrpc::new(infer.clone());
    let kserve_grpc = kserve::grpc::KserveGrpc::new(infer.clone());
    let limit = options.max_request_bytes;
    let grpc = tonic::transport::Server::builder()
        // HTTP/2's default 64 KiB windows make a client wait for a window update every 64 KiB
        // of a large request; windows of a few MiB let a tensor arrive in one flight.
        .initial_stream_window_size(GRPC_STREAM_WINDOW)
        .initial_connection_window_size(GRPC_CONNECTION_WINDOW)
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
    let app = rest_app(infer, options).into_make_service_with_connect_info::<SocketAddr>();
    let rest = axum::serve(listeners.rest, app).with_graceful_shutdown(stopped(stop_rx));
    let (grpc, rest) = tokio::join!(grpc, rest);
    grpc?;
    rest?;
    Ok(())
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
        };
        let mut from_axum = axum_paths(&rest_router(options));
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
