//! Runs the gRPC and HTTP servers (and the optional metrics listener) on listeners the caller
//! bound, until a shutdown future resolves, then drains. Nothing here binds a port, so tests
//! can bind `127.0.0.1:0`.
//!
//! Shutdown, in order: readiness turns false (HTTP probes answer 503, gRPC health
//! NOT_SERVING); after `shutdown_delay` the listeners close, so new connections are refused;
//! requests in flight, and those queued behind them in the batchers, finish (up to `drain`;
//! the batchers run what is queued without waiting out `max_queue_delay`),
//! and so do requests that reach a connection already open (HTTP/2 connections are told
//! GOAWAY, HTTP/1.1 answers say `Connection: close`; see [`crate::transport`]); then [`run`]
//! returns `Ok` and the process exits 0. Idle connections close once nothing is in flight.
//!
//! Accepting and serving connections (TLS, the connection cap, the timeouts) is
//! [`crate::transport`]'s; this module decides what each port serves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use http::{Method, Request, StatusCode, Uri};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::codec::CompressionEncoding::Gzip;
use tower::util::MapRequestLayer;
use tower::{Layer, ServiceBuilder};

use crate::api::health::{Health, Readiness};
use crate::api::hot_routes::HotRoutes;
use crate::api::http::body::Capped;
use crate::api::http::compression::GzipLayer;
use crate::api::http::grpc_compression;
use crate::api::http::response::RestError;
use crate::api::http::route_table::Routes;
use crate::api::{health, in_place, kserve, scrape, tfserving, AppState};
use crate::auth::{Access, AuthLayer};
use crate::background::Background;
use crate::infer::InferService;
use crate::log_settings::{LogSettings, LogState};
use crate::overload::{MemoryBudget, Overload, OverloadSettings};
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer;
use crate::proto::tensorflow::serving::{
    model_service_server::ModelServiceServer, prediction_service_server::PredictionServiceServer,
};
use crate::repository::{return_memory_when_idle, KeptFreedMemory};
use crate::tensor::tensor_proto::ResponseEncoding;
use crate::trace::export::ExportError;
use crate::trace::{TraceConfig, TraceMode, TraceSettings, Tracer};
use crate::transport::tls::Tls;
use crate::transport::{self, limits, Endpoint, Grpc, Http, Pools, TransportSettings, Wire};

/// How often the gRPC health statuses are brought in line with model state.
const HEALTH_REFRESH: Duration = Duration::from_secs(1);

/// The bound sockets the server answers on.
pub struct Listeners {
    /// `None`: no gRPC port (`--disable-grpc`).
    pub grpc: Option<TcpListener>,
    /// `None`: no HTTP port (`--disable-rest`).
    pub rest: Option<TcpListener>,
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
    /// Which API groups each token may use (`--auth-token-file`); open by default.
    pub auth: Access,
    /// TLS, the connection cap and the connection timeouts.
    pub transport: TransportSettings,
    /// Which models must serve for the server to report ready.
    pub readiness: Readiness,
    /// How TF Serving Predict answers carry tensor values (typed fields, as TF Serving does).
    pub predict_response: ResponseEncoding,
    /// Where the exposition is served besides `/metrics`: TF Serving's path by default, the
    /// one `--monitoring-config-file` names, or nowhere.
    pub tf_serving_metrics_path: Option<String>,
    /// The tasks beside the server (the repository's load and watch) whose failure makes it
    /// unready.
    pub background: Arc<Background>,
    /// What Triton's logging extension reads and changes (the binary's log filter).
    pub log_settings: Arc<LogSettings>,
    /// Tracing as started (`--trace-config`): the mode, the sampling and the collector.
    pub trace: TraceConfig,
    /// What Triton's trace extension reads and changes, and what samples requests.
    pub trace_settings: Arc<TraceSettings>,
    /// Set where `main` tuned malloc to keep freed memory for reuse: the server then gives
    /// the arenas' free tops back while traffic pauses (`repository::idle_trim`).
    pub kept_freed_memory: Option<KeptFreedMemory>,
}

impl ServerOptions {
    /// Traces as `config` says, its sampling the trace settings' start.
    pub fn with_trace(mut self, config: TraceConfig) -> Self {
        self.trace_settings = Arc::new(TraceSettings::new(config.mode, config.sampling.clone()));
        self.trace = config;
        self
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_request_bytes: 64 << 20,
            overload: OverloadSettings::default(),
            shutdown_delay: Duration::ZERO,
            drain: Duration::from_secs(30),
            auth: Access::open(),
            transport: TransportSettings::default(),
            readiness: Readiness::default(),
            predict_response: ResponseEncoding::default(),
            tf_serving_metrics_path: Some(scrape::TF_SERVING_METRICS_PATH.to_owned()),
            background: Background::new(),
            log_settings: Arc::new(LogSettings::unattached(LogState::default())),
            trace: TraceConfig::default(),
            trace_settings: Arc::new(TraceSettings::new(
                TraceMode::Triton,
                TraceConfig::default().sampling,
            )),
            kept_freed_memory: None,
        }
    }
}

/// Why a server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Tls(#[from] transport::TlsError),
    #[error(transparent)]
    Trace(#[from] ExportError),
}

/// Every route of the HTTP port. Add routes here (or in the protocol modules) through
/// [`Routes`], so that [`rest_route_paths`] lists them.
fn rest_routes(tf_serving_metrics_path: Option<&str>) -> Routes<AppState> {
    tfserving::rest::routes()
        .merge(kserve::http::routes())
        .merge(health::routes())
        .merge(scrape::routes(tf_serving_metrics_path))
}

/// The path templates the HTTP port serves, for the test that holds the OpenAPI document
/// (`openapi/tensorport.yaml`) to them, and for the check of a `--monitoring-config-file`'s
/// path. Nothing on the request path uses it.
pub fn rest_route_paths() -> Vec<&'static str> {
    rest_routes(Some(scrape::TF_SERVING_METRICS_PATH))
        .paths()
        .to_vec()
}

/// The HTTP application without its state: the routes, a JSON 405 for a method a route does
/// not take (axum adds its `Allow` header), and a JSON 404 for everything else.
fn rest_router(tf_serving_metrics_path: Option<&str>) -> Router<AppState> {
    rest_routes(tf_serving_metrics_path)
        .into_router()
        .method_not_allowed_fallback(|method: Method, uri: Uri| async move {
            RestError::with_status(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{method} is not allowed on {}", uri.path()),
            )
        })
        .fallback(|uri: Uri| async move { RestError::not_found_path(uri.path()) })
}

/// The HTTP application: TF Serving REST, KServe v2 HTTP, health, `/metrics`, and a JSON 404
/// for everything else, behind the overload stack.
///
/// The layers wrap the router as a whole rather than through `Router::layer`, which wraps
/// every route in each layer separately, boxed: a request would then pay a boxed service
/// clone and a boxed future per layer (about 40 of the 120 allocations of a small KServe
/// JSON request).
pub fn rest_app(
    infer: Arc<InferService>,
    health: &Arc<Health>,
    overload: &Overload,
    options: &ServerOptions,
) -> impl transport::App<Http> {
    let limit = options.max_request_bytes;
    ServiceBuilder::new()
        // The transport has read up to the limit; a body past it is refused as a handler
        // reads on (`api::http::body`).
        .map_request(move |request: Request<transport::Received>| {
            request.map(|body| Body::new(Capped::new(body, limit)))
        })
        .layer(overload.layer::<Body>())
        // Innermost of the protection, right in front of the routes: refusals are still
        // observed (counted and logged), and probes, which bypass the overload layers, still
        // pass this check.
        .layer(AuthLayer::<Body>::new(options.auth.clone()))
        .layer(GzipLayer::new(options.max_request_bytes))
        .service(HotRoutes::new(
            AppState {
                infer,
                health: health.clone(),
                log_settings: options.log_settings.clone(),
                trace_settings: options.trace_settings.clone(),
            },
            rest_router(options.tf_serving_metrics_path.as_deref()),
        ))
}

/// The `--metrics-port` application: `/metrics` and the probes, without overload protection
/// (a scrape or a probe must get through when the server is busiest).
fn metrics_app(
    infer: Arc<InferService>,
    health: &Arc<Health>,
    options: &ServerOptions,
) -> impl transport::App<Http> {
    ServiceBuilder::new()
        .map_request(|request: Request<transport::Received>| request.map(Body::new))
        .layer(AuthLayer::<Body>::new(options.auth.clone()))
        .service(
            scrape::routes(options.tf_serving_metrics_path.as_deref())
                .merge(health::routes())
                .into_router()
                .with_state(AppState {
                    infer,
                    health: health.clone(),
                    log_settings: options.log_settings.clone(),
                    trace_settings: options.trace_settings.clone(),
                }),
        )
}

/// Every gRPC service, each refusing messages over `limit` bytes. gzip messages are accepted
/// (tonic counts their inflated size against `limit`), and the reply to a gzipped request is
/// gzipped (see [`grpc_compression`]). Uncompressed `ModelInfer` and `Predict` calls are
/// decoded in place, in front of tonic ([`in_place::InPlaceUnary`]).
fn grpc_routes(
    infer: &Arc<InferService>,
    health: &Arc<Health>,
    overload: &Overload,
    options: &ServerOptions,
) -> in_place::InPlaceUnary {
    let limit = options.max_request_bytes;
    let tf = tfserving::grpc::TfServingGrpc::new(infer.clone(), options.predict_response);
    // A stream's messages pass the overload stack one by one, inside the route.
    let kserve_grpc = kserve::grpc::KserveGrpc::new(
        infer.clone(),
        health.clone(),
        overload.streams(),
        options.log_settings.clone(),
        options.trace_settings.clone(),
    );
    let routes = tonic::service::Routes::new(health.grpc_service())
        .add_service(
            PredictionServiceServer::new(tf.clone())
                .accept_compressed(Gzip)
                .send_compressed(Gzip)
                .max_decoding_message_size(limit)
                .max_encoding_message_size(usize::MAX),
        )
        .add_service(
            ModelServiceServer::new(tf.clone())
                .accept_compressed(Gzip)
                .send_compressed(Gzip)
                .max_decoding_message_size(limit)
                .max_encoding_message_size(usize::MAX),
        )
        .add_service(
            GrpcInferenceServiceServer::new(kserve_grpc.clone())
                .accept_compressed(Gzip)
                .send_compressed(Gzip)
                .max_decoding_message_size(limit)
                .max_encoding_message_size(usize::MAX),
        )
        .prepare();
    in_place::InPlaceUnary::new(kserve_grpc, tf, limit, routes)
}

/// Serves until `shutdown` resolves, then drains as the module documentation says.
pub async fn run(
    infer: Arc<InferService>,
    listeners: Listeners,
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    // Before anything starts: a certificate that cannot be read stops the server here.
    let tls = options.transport.tls.as_ref().map(Tls::load).transpose()?;
    let health = Arc::new(Health::new(
        infer.clone(),
        options.readiness,
        options.background.clone(),
    ));
    health.publish().await;
    // The exporter runs on this runtime; without OpenTelemetry mode nothing is sampled.
    let mut overload_settings = options.overload.clone();
    if options.trace.exports() {
        let counters = infer.shared_metrics().trace_counters();
        let tracer = Tracer::start(&options.trace, options.trace_settings.clone(), counters)?;
        overload_settings.tracer = Some(tracer);
    }
    let overload = Arc::new(Overload::sticky_on(
        &overload_settings,
        infer.shared_metrics(),
        infer.repository().sticky_headers(),
    ));
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        // An error means the sender is gone, which also means stop.
        let _ = rx.wait_for(|stop| *stop).await;
    };
    tokio::spawn(refresh_health(health.clone(), stopped(stop_rx.clone())));
    tokio::spawn({
        let (overload, stopped) = (overload.clone(), stopped(stop_rx.clone()));
        async move { overload.prune_rate_limiter(stopped).await }
    });
    // What a burst made malloc keep goes back to the system once the server is idle.
    tokio::spawn(return_memory_when_idle(
        overload.memory_budget(),
        options.kept_freed_memory,
        infer.shared_metrics().memory_trims(),
        stopped(stop_rx.clone()),
    ));

    // Read now rather than when the flags were parsed: the limit may have been raised since.
    let max_connections = options
        .transport
        .max_connections
        .unwrap_or_else(|| limits::default_max_connections(limits::descriptor_limit()));
    tracing::info!(
        max_connections,
        tls = tls.is_some(),
        client_certificates = options
            .transport
            .tls
            .as_ref()
            .is_some_and(|tls| tls.client_ca.is_some()),
        "connection limits"
    );
    let settings = Arc::new(options.transport.clone());
    // One cap for the HTTP and gRPC ports together: they draw on the same descriptors and
    // the same memory; their answers are charged to the request memory budget until sent.
    let pools = Pools::new(
        max_connections,
        options.transport.max_receiving_bytes,
        options.max_request_bytes,
        overload.memory_budget(),
    );
    let send_timeouts = infer.shared_metrics().send_timeouts();
    let endpoint = |alpn: &[&[u8]]| {
        Endpoint::new(
            tls.as_ref().map(|tls| tls.acceptor(alpn)),
            pools.clone(),
            settings.clone(),
            options.max_request_bytes,
        )
        .counting_send_timeouts(send_timeouts.clone())
    };

    // Auth inside the overload stack, as on the HTTP port.
    let grpc_app = overload.layer::<tonic::body::Body>().layer(
        AuthLayer::<tonic::body::Body>::new(options.auth.clone()).layer(
            MapRequestLayer::new(grpc_compression::reply_in_kind)
                .layer(grpc_routes(&infer, &health, &overload, &options)),
        ),
    );
    let grpc = async {
        if let Some(listener) = listeners.grpc {
            let endpoint = endpoint(Grpc::ALPN);
            transport::serve::<Grpc, _>(listener, grpc_app, endpoint, stop_rx.clone()).await;
        }
    };
    let rest = async {
        if let Some(listener) = listeners.rest {
            let app = rest_app(infer.clone(), &health, &overload, &options);
            let endpoint = endpoint(Http::ALPN);
            transport::serve::<Http, _>(listener, app, endpoint, stop_rx.clone()).await;
        }
    };
    let metrics = async {
        if let Some(listener) = listeners.metrics {
            // Plain HTTP and a cap of its own: probes and scrapers get through whatever
            // happens on the other ports.
            let endpoint = Endpoint::new(
                None,
                Pools::new(
                    transport::METRICS_MAX_CONNECTIONS,
                    0,
                    0,
                    MemoryBudget::new(0),
                ),
                settings.clone(),
                options.max_request_bytes,
            );
            let app = metrics_app(infer.clone(), &health, &options);
            transport::serve::<Http, _>(listener, app, endpoint, stop_rx.clone()).await;
        }
    };
    let servers = async {
        tokio::join!(grpc, rest, metrics);
        Ok::<(), ServerError>(())
    };
    tokio::pin!(servers);

    tokio::select! {
        // The servers end only once stopped; should they end before, there is nothing to
        // drain.
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
    // Nothing queued may wait out its `max_queue_delay` now: that could outlast the drain.
    infer.repository().flush_queues();
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
    fn axum_paths(router: &Router<AppState>) -> Vec<String> {
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
        let mut from_axum = axum_paths(&rest_router(Some(scrape::TF_SERVING_METRICS_PATH)));
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
