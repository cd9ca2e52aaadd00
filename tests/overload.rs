//! Overload protection, deadlines, priority, health and graceful drain against the real
//! server on loopback. Requests stay in flight because the `spin` model's runs wait at a
//! [`Gate`] the test opens, never because a model is slow enough: on a loaded machine a slow
//! run finishes before the test looks.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::gate::{Gate, OpenOnDrop};
use common::{TestResult, TestServer};
use serde_json::{json, Value};
use tensorport::batcher::BatchSettings;
use tensorport::metrics::{Metrics, RefusalReason};
use tensorport::overload::{OverloadSettings, RateSettings};
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::infer_parameter::ParameterChoice;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::{InferParameter, ModelInferRequest, ModelStatisticsRequest};
use tensorport::request::Protocol;
use tensorport::ServerOptions;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const MODELS: &str = "tests/models";
/// A request for the spin model (one round), whose `x` input is `tag`: the gate records the
/// order in which runs reach the model by it.
fn spin_request(tag: f32, priority: Option<u64>) -> ModelInferRequest {
    let tensor = |name: &str, datatype: &str| InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: vec![1],
        ..Default::default()
    };
    let mut parameters = std::collections::HashMap::new();
    if let Some(level) = priority {
        parameters.insert(
            "priority".to_owned(),
            InferParameter {
                parameter_choice: Some(ParameterChoice::Uint64Param(level)),
            },
        );
    }
    ModelInferRequest {
        model_name: "spin".into(),
        inputs: vec![tensor("x", "FP32"), tensor("rounds", "INT64")],
        raw_input_contents: vec![
            tag.to_le_bytes().to_vec().into(),
            1i64.to_le_bytes().to_vec().into(),
        ],
        parameters,
        ..Default::default()
    }
}

fn spin_json(tag: f32, parameters: Value) -> Value {
    json!({
        "inputs": [
            {"name": "x", "shape": [1], "datatype": "FP32", "data": [tag]},
            {"name": "rounds", "shape": [1], "datatype": "INT64", "data": [1]},
        ],
        "parameters": parameters,
    })
}

async fn kserve(server: &TestServer) -> GrpcInferenceServiceClient<Channel> {
    GrpcInferenceServiceClient::connect(server.grpc_url.clone())
        .await
        .expect("gRPC connects")
}

async fn start(batching: BatchSettings, overload: OverloadSettings) -> TestServer {
    let options = ServerOptions {
        overload,
        ..ServerOptions::default()
    };
    TestServer::start_with(MODELS, batching, options).await
}

/// Starts the server with the spin model's runs held at a closed gate (warmup ran while it
/// was open). The gate opens when the returned handle drops, so a failed assertion never
/// leaves a runtime thread waiting at it forever.
async fn start_gated(batching: BatchSettings, options: ServerOptions) -> (TestServer, OpenOnDrop) {
    let gate = Gate::new();
    let server =
        TestServer::start_decorated(MODELS, batching, options, Some(gate.decorator("spin"))).await;
    gate.close();
    (server, OpenOnDrop(gate))
}

fn with_overload(overload: OverloadSettings) -> ServerOptions {
    ServerOptions {
        overload,
        ..ServerOptions::default()
    }
}

/// Waits until `count` requests are in flight (admitted by the concurrency layer).
async fn wait_in_flight(metrics: &Metrics, count: usize) {
    let line = format!("tensorport_requests_in_flight {count}\n");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !metrics.encode().contains(&line) {
        assert!(Instant::now() < deadline, "never saw {line}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until the spin model's queue holds `count` requests.
async fn wait_queued(server: &TestServer, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // A scrape samples the queue depths.
        let text = reqwest::get(format!("{}/metrics", server.rest_url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let line =
            format!("tensorport_queue_depth_requests{{model=\"spin\",version=\"1\"}} {count}\n");
        if text.contains(&line) {
            return;
        }
        assert!(Instant::now() < deadline, "never saw {line}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// How many answers the request-duration histogram holds for requests that resolved no model
/// on `protocol`, read from the exposition.
fn unresolved_answers(metrics: &Metrics, protocol: &str) -> u64 {
    let prefix =
        format!("tensorport_request_duration_seconds_count{{model=\"\",protocol=\"{protocol}\"}}");
    metrics
        .encode()
        .lines()
        .find(|line| line.starts_with(&prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_concurrency_limit_both_transports_refuse_at_once_and_count() -> TestResult {
    let (server, gate) = start_gated(
        BatchSettings::default(),
        with_overload(OverloadSettings {
            max_concurrent_requests: 1,
            ..OverloadSettings::default()
        }),
    )
    .await;
    let mut grpc = kserve(&server).await;
    // Holds the only slot until the gate opens.
    let held = tokio::spawn({
        let mut grpc = grpc.clone();
        async move { grpc.model_infer(spin_request(1.0, None)).await }
    });
    gate.wait_for_waiting(1).await;

    let http = reqwest::Client::new();
    let url = format!("{}/v2/models/spin/infer", server.rest_url);
    for _ in 0..20 {
        let response = http
            .post(&url)
            .json(&spin_json(2.0, json!({})))
            .send()
            .await?;
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "1");
        let body: Value = response.json().await?;
        assert!(body["error"].as_str().unwrap_or_default().contains("limit"));
    }
    let refused = grpc
        .model_infer(spin_request(2.0, None))
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);

    // Refused at once, never queued for the slot: every refusal was answered while the
    // request holding the slot waits at the gate. (How fast, in microseconds, is the
    // overload benchmark's to measure.)
    assert!(
        !held.is_finished(),
        "the refusals waited for the request in flight"
    );
    assert_eq!(unresolved_answers(&server.metrics, "kserve-http"), 20);
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::Concurrency, Protocol::KserveHttp),
        20
    );
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::Concurrency, Protocol::KserveGrpc),
        1
    );
    // The request in flight was not disturbed, and a new one is admitted after it.
    gate.open();
    assert!(held.await?.is_ok());
    grpc.model_infer(spin_request(3.0, None)).await?;
    // Only the held request reached the model while the gate was closed.
    assert_eq!(gate.arrivals(), vec![1.0]);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_model_queue_refuses_and_high_priority_gets_past_it_first() -> TestResult {
    let batching = BatchSettings {
        max_queue_size: 1,
        ..BatchSettings::default()
    };
    let (server, gate) = start_gated(batching, ServerOptions::default()).await;
    let grpc = kserve(&server).await;
    let call = |tag, priority| {
        let mut grpc = grpc.clone();
        tokio::spawn(async move { grpc.model_infer(spin_request(tag, priority)).await })
    };
    // The first runs (held at the gate), so the next one waits in the queue.
    let running = call(1.0, None);
    gate.wait_for_waiting(1).await;
    let queued = call(2.0, None);
    wait_queued(&server, 1).await;

    let refused = kserve(&server)
        .await
        .model_infer(spin_request(9.0, None))
        .await
        .expect_err("the queue is full");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    let http = reqwest::Client::new();
    let response = http
        .post(format!("{}/v2/models/spin/infer", server.rest_url))
        .json(&spin_json(9.0, json!({})))
        .send()
        .await?;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");

    // Priority 1 takes the reserve and runs before the default request queued earlier.
    let urgent = call(3.0, Some(1));
    wait_queued(&server, 2).await;
    gate.release(3);
    running.await??;
    urgent.await??;
    queued.await??;
    assert_eq!(gate.arrivals(), vec![1.0, 3.0, 2.0]);
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::QueueFull, Protocol::KserveGrpc),
        1
    );
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::QueueFull, Protocol::KserveHttp),
        1
    );
    gate.open();
    server.stop().await;
    Ok(())
}

async fn spin_executions(grpc: &mut GrpcInferenceServiceClient<Channel>) -> u64 {
    let stats = grpc
        .model_statistics(ModelStatisticsRequest {
            name: "spin".into(),
            version: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    stats.model_stats.iter().map(|m| m.execution_count).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_whose_deadline_passes_in_the_queue_are_dropped_unrun() -> TestResult {
    let (server, gate) = start_gated(
        BatchSettings::default(),
        with_overload(OverloadSettings {
            request_timeout: Some(Duration::from_millis(150)),
            ..OverloadSettings::default()
        }),
    )
    .await;
    let mut grpc = kserve(&server).await;
    let running = tokio::spawn({
        let mut grpc = grpc.clone();
        let mut long = tonic::Request::new(spin_request(1.0, None));
        // The client's own deadline replaces the server's default; the gate holds the run
        // until the late requests below have all been answered.
        long.set_timeout(Duration::from_secs(600));
        async move { grpc.model_infer(long).await }
    });
    gate.wait_for_waiting(1).await;

    // No deadline from the client: the server's default ends it, server-side, at the
    // deadline and not once the request ahead of it has finished.
    let err = grpc
        .model_infer(spin_request(2.0, None))
        .await
        .expect_err("too late");
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded);
    assert!(
        !running.is_finished(),
        "the late request was answered only after the one ahead of it"
    );
    // grpc-timeout: tonic's client enforces it too and may give up (CANCELLED) a moment
    // before the server's DEADLINE_EXCEEDED arrives; either way the work must not run.
    let mut late = tonic::Request::new(spin_request(3.0, None));
    late.set_timeout(Duration::from_millis(100));
    let err = grpc.model_infer(late).await.expect_err("too late");
    assert!(
        matches!(
            err.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{err:?}"
    );

    // HTTP: the header, KServe's timeout parameter (microseconds), the server's default.
    let http = reqwest::Client::new();
    let url = format!("{}/v2/models/spin/infer", server.rest_url);
    let response = http
        .post(&url)
        .header("x-request-timeout-ms", "100")
        .json(&spin_json(4.0, json!({})))
        .send()
        .await?;
    assert_eq!(response.status(), 504);
    let response = http
        .post(&url)
        .json(&spin_json(5.0, json!({ "timeout": 100_000 })))
        .send()
        .await?;
    assert_eq!(response.status(), 504);
    let response = http
        .post(&url)
        .json(&spin_json(6.0, json!({})))
        .send()
        .await?;
    assert_eq!(response.status(), 504);
    assert!(!running.is_finished());

    // Only the long request reached the model while the gate was closed.
    gate.release(1);
    assert!(running.await?.is_ok());
    assert_eq!(gate.arrivals(), vec![1.0]);
    // A generous deadline changes nothing. It queues behind whatever is left of the late
    // ones, so once it has run, each late one has been dropped or run: only two ran.
    gate.open();
    let mut patient = tonic::Request::new(spin_request(7.0, None));
    patient.set_timeout(Duration::from_secs(600));
    grpc.model_infer(patient).await?;
    assert_eq!(spin_executions(&mut grpc).await, 2);
    assert!(
        server
            .metrics
            .refusals(RefusalReason::Deadline, Protocol::KserveGrpc)
            >= 1
    );
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::Deadline, Protocol::KserveHttp),
        3
    );
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_is_one_budget_per_client_across_both_ports() -> TestResult {
    let server = start(
        BatchSettings::default(),
        OverloadSettings {
            rate_limit: Some(RateSettings {
                per_second: 1,
                burst: 3,
                api_keys: None,
            }),
            ..OverloadSettings::default()
        },
    )
    .await;
    let mut grpc = kserve(&server).await;
    grpc.model_infer(spin_request(1.0, None)).await?;
    grpc.model_infer(spin_request(1.0, None)).await?;
    let http = reqwest::Client::new();
    let url = format!("{}/v2/models/spin/infer", server.rest_url);
    let ok = http
        .post(&url)
        .json(&spin_json(1.0, json!({})))
        .send()
        .await?;
    assert_eq!(ok.status(), 200);
    let refused = http
        .post(&url)
        .json(&spin_json(1.0, json!({})))
        .send()
        .await?;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let err = grpc
        .model_infer(spin_request(1.0, None))
        .await
        .expect_err("over the rate");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    // Probes are never rate limited.
    for _ in 0..5 {
        let ready = http
            .get(format!("{}/readyz", server.rest_url))
            .send()
            .await?;
        assert_eq!(ready.status(), 200);
    }
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::RateLimit, Protocol::KserveHttp)
            + server
                .metrics
                .refusals(RefusalReason::RateLimit, Protocol::KserveGrpc),
        2
    );
    server.stop().await;
    Ok(())
}

async fn health_status(server: &TestServer, service: &str) -> Result<ServingStatus, tonic::Status> {
    let channel = Channel::from_shared(server.grpc_url.clone())
        .map_err(|err| tonic::Status::internal(err.to_string()))?
        .connect()
        .await
        .map_err(|err| tonic::Status::unavailable(err.to_string()))?;
    let mut health = HealthClient::new(channel);
    let response = health
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await?;
    Ok(response.into_inner().status())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_serving_overall_and_per_service() -> TestResult {
    let server = start(BatchSettings::default(), OverloadSettings::default()).await;
    for service in [
        "",
        "tensorflow.serving.PredictionService",
        "tensorflow.serving.ModelService",
        "inference.GRPCInferenceService",
    ] {
        assert_eq!(
            health_status(&server, service).await?,
            ServingStatus::Serving,
            "{service:?}"
        );
    }
    let unknown = health_status(&server, "no.such.Service").await;
    assert_eq!(unknown.map_err(|s| s.code()), Err(tonic::Code::NotFound));
    let http = reqwest::Client::new();
    for path in ["/livez", "/readyz", "/v2/health/live", "/v2/health/ready"] {
        let response = http
            .get(format!("{}{path}", server.rest_url))
            .send()
            .await?;
        assert_eq!(response.status(), 200, "{path}");
    }
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_turns_unready_then_drains_in_flight_requests_and_refuses_new_ones() -> TestResult
{
    let options = ServerOptions {
        shutdown_delay: Duration::from_millis(300),
        drain: Duration::from_secs(20),
        ..ServerOptions::default()
    };
    let (mut server, gate) = start_gated(BatchSettings::default(), options).await;
    let grpc = kserve(&server).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v2/models/spin/infer", server.rest_url);
    // One running (held at the gate), three queued behind it.
    let mut in_flight = Vec::new();
    for _ in 0..2 {
        let mut grpc = grpc.clone();
        in_flight.push(tokio::spawn(async move {
            grpc.model_infer(spin_request(1.0, None))
                .await
                .map(|_| ())
                .map_err(|status| status.to_string())
        }));
    }
    for _ in 0..2 {
        let (http, url) = (http.clone(), url.clone());
        in_flight.push(tokio::spawn(async move {
            let response = http
                .post(url)
                .json(&spin_json(2.0, json!({})))
                .send()
                .await
                .map_err(|err| err.to_string())?;
            if response.status() == 200 {
                Ok(())
            } else {
                Err(format!("status {}", response.status()))
            }
        }));
    }
    wait_in_flight(&server.metrics, 4).await;
    gate.wait_for_waiting(1).await;

    server.begin_stop();
    // Readiness turns false first, while the listeners still accept.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = reqwest::get(format!("{}/readyz", server.rest_url)).await?;
        if ready.status() == 503 {
            break;
        }
        assert!(Instant::now() < deadline, "readiness never turned false");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(health_status(&server, "").await?, ServingStatus::NotServing);
    assert_eq!(
        health_status(&server, "inference.GRPCInferenceService").await?,
        ServingStatus::NotServing
    );

    // Then the listeners close: new connections are refused.
    let deadline = Instant::now() + Duration::from_secs(60);
    while reqwest::get(format!("{}/livez", server.rest_url))
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "the listener never closed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(GrpcInferenceServiceClient::connect(server.grpc_url.clone())
        .await
        .is_err());

    // Everything in flight or queued when the stop began is answered.
    gate.open();
    for request in in_flight {
        request
            .await?
            .map_err(|err| format!("in-flight request failed: {err}"))?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server.has_stopped() {
        assert!(
            Instant::now() < deadline,
            "run did not return after the drain"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.stop().await;
    Ok(())
}
