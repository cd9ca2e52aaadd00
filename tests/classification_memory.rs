//! Triton's classification extension against the request memory budget
//! (`--max-inflight-request-bytes`), on the real server over both KServe transports: the
//! classes of an output are text the server builds after the run, so they are charged to the
//! budget as they are built, and a request whose classes would not fit what is left is
//! refused (429 / RESOURCE_EXHAUSTED, naming the budget) instead of growing the server past
//! it. The same request without classes is served: its answer is charged, never refused.

// Test code fails loudly: a panic is a failed test with its message.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::collections::HashMap;

use bytes::Bytes;
use common::{TestResult, TestServer};
use serde_json::{json, Value};
use tensorport::batcher::BatchSettings;
use tensorport::metrics::RefusalReason;
use tensorport::overload::OverloadSettings;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::infer_parameter::ParameterChoice;
use tensorport::proto::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use tensorport::proto::inference::{InferParameter, ModelInferRequest};
use tensorport::request::Protocol;
use tensorport::ServerOptions;

const MODELS: &str = "tests/models";

/// Scores in one request: 400 kB of floats, whose classes take about 2.5 MB (an index to rank
/// each, an offset and some fifteen characters of text per class).
const SCORES: usize = 100_000;

async fn server(budget: u64) -> TestServer {
    let options = ServerOptions {
        overload: OverloadSettings {
            max_inflight_request_bytes: budget,
            ..OverloadSettings::default()
        },
        ..ServerOptions::default()
    };
    TestServer::start_with(MODELS, BatchSettings::default(), options).await
}

/// Scores from 0 to 1, distinct, as the raw little-endian bytes of FP32 `x`.
fn raw_scores() -> Vec<u8> {
    (0..SCORES)
        .flat_map(|i| (i as f32 / SCORES as f32).to_le_bytes())
        .collect()
}

/// A KServe HTTP request of `echo_float32` with its scores in the binary extension, asking
/// for `classes` classes of `y` (none: the scores themselves).
async fn http_infer(server: &TestServer, classes: Option<usize>) -> reqwest::Response {
    let output = match classes {
        Some(count) => json!({"name": "y", "parameters": {"classification": count}}),
        None => json!({"name": "y", "parameters": {"binary_data": true}}),
    };
    let raw = raw_scores();
    let header = serde_json::to_vec(&json!({
        "inputs": [{"name": "x", "shape": [1, SCORES], "datatype": "FP32",
                    "parameters": {"binary_data_size": raw.len()}}],
        "outputs": [output],
    }))
    .unwrap();
    let json_length = header.len();
    let mut body = header;
    body.extend_from_slice(&raw);
    reqwest::Client::new()
        .post(format!("{}/v2/models/echo_float32/infer", server.rest_url))
        .header("inference-header-content-length", json_length)
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .await
        .unwrap()
}

fn grpc_request(classes: usize) -> ModelInferRequest {
    let count = InferParameter {
        parameter_choice: Some(ParameterChoice::Int64Param(i64::try_from(classes).unwrap())),
    };
    ModelInferRequest {
        model_name: "echo_float32".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![1, i64::try_from(SCORES).unwrap()],
            ..Default::default()
        }],
        outputs: vec![InferRequestedOutputTensor {
            name: "y".into(),
            parameters: HashMap::from([("classification".to_owned(), count)]),
        }],
        raw_input_contents: vec![Bytes::from(raw_scores())],
        ..Default::default()
    }
}

fn budget_used(server: &TestServer) -> u64 {
    u64::try_from(server.metrics.request_memory().get()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_that_would_not_fit_the_budget_are_refused_on_both_transports() -> TestResult {
    // The request itself (its body, charged twice) fits; its classes on top would not.
    let server = server(2 << 20).await;

    let refused = http_infer(&server, Some(SCORES)).await;
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await?;
    let message = body["error"].as_str().unwrap_or_default();
    assert!(
        message.contains("'y'") && message.contains("budget"),
        "{body}"
    );

    let mut grpc = GrpcInferenceServiceClient::connect(server.grpc_url.clone())
        .await?
        .max_decoding_message_size(usize::MAX);
    let refused = grpc
        .model_infer(grpc_request(SCORES))
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(refused.message().contains("budget"), "{refused:?}");
    for protocol in [Protocol::KserveHttp, Protocol::KserveGrpc] {
        assert_eq!(
            server.metrics.refusals(RefusalReason::Memory, protocol),
            1,
            "{protocol:?}"
        );
    }

    // The same scores as scores are served, and a few classes of them fit.
    assert_eq!(http_infer(&server, None).await.status(), 200);
    let answer = grpc.model_infer(grpc_request(3)).await?.into_inner();
    assert_eq!(answer.outputs[0].shape, vec![1, 3]);
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_that_fit_are_served_and_their_charge_comes_back() -> TestResult {
    let server = server(64 << 20).await;
    // More classes than the output has: every class, once.
    let answer = http_infer(&server, Some(usize::MAX >> 12)).await;
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await?;
    let output = &body["outputs"][0];
    assert_eq!(output["shape"], json!([1, SCORES]));
    assert_eq!(output["data"][0], "0.999990:99999");
    assert_eq!(output["data"].as_array().map(Vec::len), Some(SCORES));
    // The answer is sent: nothing of the request stays charged.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while budget_used(&server) != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the charge never came back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    server.stop().await;
    Ok(())
}
