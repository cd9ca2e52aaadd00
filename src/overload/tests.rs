//! The stack driven directly, with a stand-in for the routes: each refusal has the right code,
//! is decided without waiting (the answer is ready on the first poll), and is counted.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{header, Request, Response, StatusCode};
use futures::FutureExt;
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceExt};

use super::*;
use crate::metrics::RefusalReason;
use crate::request::{Protocol, RequestContext, REQUEST_ID_HEADER};

const INFER: &str = "/v2/models/m/infer";
const PREDICT: &str = "/tensorflow.serving.PredictionService/Predict";

/// Routes that answer 200 once the gate lets them, counting calls and noting each request's
/// deadline.
#[derive(Clone)]
struct Routes {
    gate: Arc<Semaphore>,
    calls: Arc<AtomicUsize>,
}

impl Routes {
    /// `open`: answer at once; otherwise each call waits for a permit.
    fn new(open: bool) -> Self {
        let permits = if open { Semaphore::MAX_PERMITS } else { 0 };
        Self {
            gate: Arc::new(Semaphore::new(permits)),
            calls: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn service<B: Default + Send + 'static>(
        &self,
    ) -> impl Service<
        Request<B>,
        Response = Response<B>,
        Error = Infallible,
        Future = impl std::future::Future<Output = Result<Response<B>, Infallible>> + Send,
    > + Clone {
        let routes = self.clone();
        tower::service_fn(move |_request: Request<B>| {
            let routes = routes.clone();
            async move {
                routes.calls.fetch_add(1, Ordering::SeqCst);
                // Closing the gate ends the test; answering then is fine too.
                if let Ok(permit) = routes.gate.acquire().await {
                    permit.forget();
                }
                Ok::<_, Infallible>(Response::new(B::default()))
            }
        })
    }
}

fn stack(settings: OverloadSettings) -> (Overload, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    (Overload::new(&settings, metrics.clone()), metrics)
}

fn request<B: Default>(path: &str, peer: [u8; 4]) -> Request<B> {
    let mut request = Request::builder()
        .uri(path)
        .body(B::default())
        .unwrap_or_default();
    let addr = SocketAddr::from((peer, 40000));
    request.extensions_mut().insert(ConnectInfo(addr));
    request
}

fn limited(max: usize) -> OverloadSettings {
    OverloadSettings {
        max_concurrent_requests: max,
        ..OverloadSettings::default()
    }
}

#[tokio::test]
async fn over_the_concurrency_limit_is_refused_at_once_and_counted() {
    let (overload, metrics) = stack(limited(1));
    let routes = Routes::new(false);
    let mut service = overload.layer::<axum::body::Body>().layer(routes.service());
    let held = tokio::spawn(service.clone().oneshot(request(INFER, [127, 0, 0, 1])));
    while routes.calls.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    assert!(metrics
        .encode()
        .contains("tensorport_requests_in_flight 1\n"));

    let refused = service
        .ready()
        .await
        .unwrap()
        .call(request(INFER, [127, 0, 0, 1]))
        .now_or_never()
        .expect("a refusal never waits")
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
    assert!(refused.headers().contains_key(REQUEST_ID_HEADER));
    // The small body unread is drained in the background: the connection stays open.
    assert!(!refused.headers().contains_key(header::CONNECTION));
    // A body too large to drain closes an HTTP/1 connection, and the refusal says so.
    let mut large = request::<axum::body::Body>(INFER, [127, 0, 0, 1]);
    *large.body_mut() = axum::body::Body::from(vec![0u8; (drain::DRAIN_LIMIT + 1) as usize]);
    let refused_large = service
        .ready()
        .await
        .unwrap()
        .call(large)
        .now_or_never()
        .expect("a refusal never waits")
        .unwrap();
    assert_eq!(refused_large.headers()[header::CONNECTION], "close");
    assert_eq!(routes.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        metrics.refusals(RefusalReason::Concurrency, Protocol::KserveHttp),
        2
    );
    assert_eq!(
        metrics.requests(Protocol::KserveHttp, None, "resource_exhausted"),
        2
    );

    routes.gate.add_permits(2);
    assert_eq!(held.await.unwrap().unwrap().status(), StatusCode::OK);
    let admitted = service
        .oneshot(request(INFER, [127, 0, 0, 1]))
        .await
        .unwrap();
    assert_eq!(admitted.status(), StatusCode::OK);
    assert!(metrics
        .encode()
        .contains("tensorport_requests_in_flight 0\n"));
}

#[tokio::test]
async fn grpc_refusals_are_resource_exhausted() {
    let (overload, metrics) = stack(limited(1));
    let routes = Routes::new(false);
    let service = overload
        .layer::<tonic::body::Body>()
        .layer(routes.service());
    let _held = tokio::spawn(service.clone().oneshot(request(PREDICT, [127, 0, 0, 1])));
    while routes.calls.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let refused = service
        .oneshot(request(PREDICT, [127, 0, 0, 1]))
        .now_or_never()
        .expect("a refusal never waits")
        .unwrap();
    assert_eq!(refused.headers()["grpc-status"], "8");
    assert!(!refused.headers().contains_key(header::CONNECTION));
    assert_eq!(
        metrics.refusals(RefusalReason::Concurrency, Protocol::TfServingGrpc),
        1
    );
    routes.gate.close();
}

#[tokio::test]
async fn the_rate_limit_is_per_client_ip_or_listed_api_key() {
    let (overload, metrics) = stack(OverloadSettings {
        rate_limit: Some(RateSettings {
            per_second: 1,
            burst: 2,
            api_keys: Some(ApiKeys::from_keys(
                http::HeaderName::from_static("x-api-key"),
                ["tenant-a"],
            )),
        }),
        ..OverloadSettings::default()
    });
    let routes = Routes::new(true);
    let service = overload.layer::<axum::body::Body>().layer(routes.service());
    let call = |request: Request<axum::body::Body>| {
        service
            .clone()
            .oneshot(request)
            .now_or_never()
            .expect("the stand-in routes answer at once")
            .unwrap()
    };
    let one = [10, 0, 0, 1];
    assert_eq!(call(request(INFER, one)).status(), StatusCode::OK);
    assert_eq!(call(request(INFER, one)).status(), StatusCode::OK);
    let refused = call(request(INFER, one));
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = refused.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    // A key nobody listed is no escape: each new one still counts against the address.
    for n in 0..5 {
        let mut unlisted = request(INFER, one);
        unlisted
            .headers_mut()
            .insert("x-api-key", format!("made-up-{n}").parse().unwrap());
        assert_eq!(call(unlisted).status(), StatusCode::TOO_MANY_REQUESTS);
    }
    // Another address, or a listed key, has a budget of its own.
    assert_eq!(call(request(INFER, [10, 0, 0, 2])).status(), StatusCode::OK);
    let mut keyed = request(INFER, one);
    keyed
        .headers_mut()
        .insert("x-api-key", "tenant-a".parse().unwrap());
    assert_eq!(call(keyed).status(), StatusCode::OK);
    assert_eq!(
        metrics.refusals(RefusalReason::RateLimit, Protocol::KserveHttp),
        6
    );
    assert_eq!(routes.calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn rate_limited_grpc_clients_are_keyed_by_their_tcp_peer() {
    let (overload, metrics) = stack(OverloadSettings {
        rate_limit: Some(RateSettings {
            per_second: 1,
            burst: 1,
            api_keys: None,
        }),
        ..OverloadSettings::default()
    });
    let routes = Routes::new(true);
    let service = overload
        .layer::<tonic::body::Body>()
        .layer(routes.service());
    // tonic's own connection info, not axum's.
    let grpc_request = |ip: [u8; 4]| {
        let mut request = Request::new(tonic::body::Body::default());
        *request.uri_mut() = PREDICT.parse().unwrap();
        request
            .extensions_mut()
            .insert(tonic::transport::server::TcpConnectInfo {
                local_addr: None,
                remote_addr: Some(SocketAddr::from((ip, 5000))),
            });
        request
    };
    let status = |ip| {
        let response = service
            .clone()
            .oneshot(grpc_request(ip))
            .now_or_never()
            .unwrap()
            .unwrap();
        response
            .headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(status([10, 0, 0, 1]), None);
    assert_eq!(status([10, 0, 0, 1]).as_deref(), Some("8"));
    assert_eq!(status([10, 0, 0, 2]), None);
    assert_eq!(
        metrics.refusals(RefusalReason::RateLimit, Protocol::TfServingGrpc),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_deadline_is_answered_on_time_and_counted() {
    let (overload, metrics) = stack(OverloadSettings::default());
    let routes = Routes::new(false);
    let service = overload
        .layer::<tonic::body::Body>()
        .layer(routes.service());
    let mut late = request(PREDICT, [127, 0, 0, 1]);
    late.headers_mut()
        .insert("grpc-timeout", "10m".parse().unwrap());
    let started = tokio::time::Instant::now();
    let response = service.clone().oneshot(late).await.unwrap();
    assert_eq!(response.headers()["grpc-status"], "4");
    assert_eq!(started.elapsed(), Duration::from_millis(10));
    assert_eq!(
        metrics.refusals(RefusalReason::Deadline, Protocol::TfServingGrpc),
        1
    );

    // Already expired on arrival: refused without reaching the routes.
    let mut expired = request(PREDICT, [127, 0, 0, 1]);
    expired
        .headers_mut()
        .insert("grpc-timeout", "0n".parse().unwrap());
    let calls = routes.calls.load(Ordering::SeqCst);
    let response = service
        .oneshot(expired)
        .now_or_never()
        .expect("refused at once")
        .unwrap();
    assert_eq!(response.headers()["grpc-status"], "4");
    assert_eq!(routes.calls.load(Ordering::SeqCst), calls);
}

#[tokio::test(start_paused = true)]
async fn the_server_default_timeout_applies_when_the_client_sets_none() {
    let (overload, _metrics) = stack(OverloadSettings {
        request_timeout: Some(Duration::from_millis(50)),
        ..OverloadSettings::default()
    });
    let seen = Arc::new(std::sync::Mutex::new(None));
    let service = overload
        .layer::<axum::body::Body>()
        .layer(tower::service_fn({
            let seen = seen.clone();
            move |request: Request<axum::body::Body>| {
                let context = request.extensions().get::<Arc<RequestContext>>().cloned();
                if let Ok(mut seen) = seen.lock() {
                    *seen = context.and_then(|c| c.deadline());
                }
                std::future::pending::<Result<Response<axum::body::Body>, Infallible>>()
            }
        }));
    let started = tokio::time::Instant::now();
    let response = service
        .oneshot(request(INFER, [127, 0, 0, 1]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    assert_eq!(
        *seen.lock().unwrap(),
        Some(started + Duration::from_millis(50))
    );
}

#[tokio::test]
async fn probes_pass_a_saturated_server() {
    let (overload, metrics) = stack(limited(1));
    let gate = Arc::new(Semaphore::new(0));
    // Inference waits at the gate; everything else answers at once.
    let service = overload
        .layer::<axum::body::Body>()
        .layer(tower::service_fn({
            let gate = gate.clone();
            move |request: Request<axum::body::Body>| {
                let gate = gate.clone();
                async move {
                    if request.uri().path() == INFER {
                        let _ = gate.acquire().await;
                    }
                    Ok::<_, Infallible>(Response::new(axum::body::Body::empty()))
                }
            }
        }));
    let _held = tokio::spawn(service.clone().oneshot(request(INFER, [127, 0, 0, 1])));
    while !metrics
        .encode()
        .contains("tensorport_requests_in_flight 1\n")
    {
        tokio::task::yield_now().await;
    }
    let refused = service
        .clone()
        .oneshot(request(INFER, [127, 0, 0, 1]))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    for path in ["/v2/health/ready", "/readyz", "/livez", "/metrics"] {
        let response = service
            .clone()
            .oneshot(request(path, [127, 0, 0, 1]))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    gate.close();
}

#[tokio::test]
async fn a_malformed_timeout_is_a_bad_request_and_never_runs() {
    let (overload, metrics) = stack(OverloadSettings::default());
    let routes = Routes::new(true);
    let service = overload.layer::<axum::body::Body>().layer(routes.service());
    let mut bad = request(INFER, [127, 0, 0, 1]);
    bad.headers_mut()
        .insert("x-request-timeout-ms", "soon".parse().unwrap());
    let response = service.oneshot(bad).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(routes.calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        metrics.requests(Protocol::KserveHttp, None, "invalid_argument"),
        1
    );
}

#[tokio::test]
async fn ids_are_echoed_and_dropped_requests_count_as_cancelled() {
    let (overload, metrics) = stack(OverloadSettings::default());
    let routes = Routes::new(true);
    let service = overload.layer::<axum::body::Body>().layer(routes.service());
    let mut named = request(INFER, [127, 0, 0, 1]);
    named
        .headers_mut()
        .insert(REQUEST_ID_HEADER, "trace-42".parse().unwrap());
    let response = service.clone().oneshot(named).await.unwrap();
    assert_eq!(response.headers()[REQUEST_ID_HEADER], "trace-42");
    assert_eq!(metrics.requests(Protocol::KserveHttp, None, "ok"), 1);

    routes.gate.forget_permits(Semaphore::MAX_PERMITS);
    let pending = service.oneshot(request(INFER, [127, 0, 0, 1]));
    assert!(pending.now_or_never().is_none());
    assert_eq!(metrics.requests(Protocol::KserveHttp, None, "cancelled"), 1);
}
