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
use crate::api::{kserve, tfserving};
use crate::infer::InferService;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer;
use crate::proto::tensorflow::serving::{
    model_service_server::ModelServiceServer, prediction_service_server::PredictionServiceServer,
};

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

/// The HTTP application: TF Serving REST routes and a JSON 404 for everything else.
pub fn rest_app(infer: Arc<InferService>, options: ServerOptions) -> Router {
    tfserving::rest::routes(infer.clone())
        .merge(kserve::http::routes(infer.clone()))
        .merge(
            Router::new()
                .route("/metrics", get(metrics))
                .with_state(infer),
        )
        .fallback(|uri: axum::http::Uri| async move { RestError::not_found_path(uri.path()) })
        .layer(DefaultBodyLimit::max(options.max_request_bytes))
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
