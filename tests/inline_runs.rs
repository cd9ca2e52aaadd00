//! Fast models skip the batcher when it has nothing to do, and batch as before under load,
//! against the real server on loopback with the example ranker. Which path a request took is
//! read from `tensorport_inline_runs_total` and the gate's count of runs, never from timing:
//! the server is started with a bound that any measured run of the ranker meets.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::gate::{Gate, OpenOnDrop};
use common::{TestResult, TestServer};
use serde_json::{json, Value};
use tensorport::batcher::BatchSettings;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::{ModelInferRequest, ModelStatisticsRequest};
use tensorport::ServerOptions;

const FEATURES: usize = 16;
/// Any measured run of the ranker is within this bound.
const ANY_MEASURED: Duration = Duration::from_secs(3600);

fn ranker_json(value: f32) -> Value {
    json!({
        "inputs": [{ "name": "features", "datatype": "FP32", "shape": [1, FEATURES],
                     "data": vec![value; FEATURES] }]
    })
}

fn ranker_grpc(value: f32) -> ModelInferRequest {
    ModelInferRequest {
        model_name: "ranker".into(),
        inputs: vec![InferInputTensor {
            name: "features".into(),
            datatype: "FP32".into(),
            shape: vec![1, FEATURES as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![value.to_le_bytes().repeat(FEATURES).into()],
        ..Default::default()
    }
}

/// Starts the server on the examples with batching on (up to 8 rows), inline runs allowed for
/// any measured model, and the ranker's runs behind a closed gate (warmup ran while it was
/// open, and warmup is not a measured run).
async fn start_gated() -> (TestServer, OpenOnDrop) {
    let gate = Gate::new();
    let batching = BatchSettings {
        max_batch_size: 8,
        ..BatchSettings::default()
    };
    let server = TestServer::start_full(
        "examples/models",
        batching,
        ServerOptions::default(),
        Some(gate.decorator("ranker")),
        ANY_MEASURED,
        |repository| repository,
    )
    .await;
    gate.close();
    (server, OpenOnDrop(gate))
}

async fn scrape(server: &TestServer) -> String {
    reqwest::get(format!("{}/metrics", server.rest_url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of the ranker's series of `metric` in the exposition (0 when absent).
fn ranker_value(text: &str, metric: &str) -> f64 {
    let prefix = format!("{metric}{{model=\"ranker\",");
    text.lines()
        .find(|line| line.starts_with(&prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0)
}

async fn inline_runs(server: &TestServer) -> f64 {
    ranker_value(&scrape(server).await, "tensorport_inline_runs_total")
}

/// Waits until the ranker's queue holds `count` requests (a scrape samples the depth).
async fn wait_queued(server: &TestServer, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = scrape(server).await;
        if ranker_value(&text, "tensorport_queue_depth_requests") == count as f64 {
            return;
        }
        assert!(Instant::now() < deadline, "never saw {count} queued");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn infer_http(client: &reqwest::Client, server: &TestServer, value: f32) -> Value {
    let response = client
        .post(format!("{}/v2/models/ranker/infer", server.rest_url))
        .json(&ranker_json(value))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["outputs"][0]["shape"], json!([1, 1]), "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_requests_batch_and_when_idle_a_measured_fast_model_runs_inline() -> TestResult {
    let (server, gate) = start_gated().await;
    let client = reqwest::Client::new();

    // The first request finds a model not yet measured: it goes through the batcher, which
    // runs it on a blocking thread, where the gate holds it and its instance.
    let first = tokio::spawn({
        let (client, url) = (client.clone(), server.rest_url.clone());
        async move {
            client
                .post(format!("{url}/v2/models/ranker/infer"))
                .json(&ranker_json(1.0))
                .send()
                .await
        }
    });
    gate.wait_for_waiting(1).await;
    // The instance is busy: these wait in the queue and leave together.
    let load: Vec<_> = [2.0, 3.0, 4.0]
        .into_iter()
        .map(|value| {
            let client = client.clone();
            let url = format!("{}/v2/models/ranker/infer", server.rest_url);
            tokio::spawn(async move { client.post(url).json(&ranker_json(value)).send().await })
        })
        .collect();
    wait_queued(&server, 3).await;
    assert_eq!(inline_runs(&server).await, 0.0);
    gate.release(2);
    assert_eq!(first.await??.status(), 200);
    for request in load {
        assert_eq!(request.await??.status(), 200);
    }
    assert_eq!(
        gate.arrivals().len(),
        2,
        "the three queued requests ran as one batch"
    );
    assert_eq!(inline_runs(&server).await, 0.0);

    // Idle now, and measured: each request runs on the thread that read it, over both
    // transports, and is counted as any other. (The gate's permits are given in advance, so
    // that no run waits at it on the async runtime's thread.)
    gate.release(3);
    for value in [5.0, 6.0] {
        infer_http(&client, &server, value).await;
    }
    let mut grpc = GrpcInferenceServiceClient::connect(server.grpc_url.clone()).await?;
    let answer = grpc.model_infer(ranker_grpc(7.0)).await?.into_inner();
    assert_eq!(answer.outputs[0].shape, vec![1, 1]);
    assert_eq!(inline_runs(&server).await, 3.0);
    assert_eq!(gate.arrivals().len(), 5);

    let stats = grpc
        .model_statistics(ModelStatisticsRequest {
            name: "ranker".into(),
            version: String::new(),
        })
        .await?
        .into_inner();
    let stats = &stats.model_stats[0];
    assert_eq!(stats.execution_count, 5);
    assert_eq!(stats.inference_count, 7);
    let inference = stats.inference_stats.as_ref().expect("inference stats");
    assert_eq!(inference.success.as_ref().map(|d| d.count), Some(7));
    assert_eq!(inference.queue.as_ref().map(|d| d.count), Some(7));
    let busy = ranker_value(
        &scrape(&server).await,
        "tensorport_instance_busy_seconds_total",
    );
    assert!(busy > 0.0, "inline runs count as the instance's busy time");
    server.stop().await;
    Ok(())
}
