//! The request memory budget (`--max-inflight-request-bytes`) against the real server on
//! loopback: requests that would expand past what is left are refused before they are
//! decoded, over both ports and all protocols, the charge comes back when a request is done,
//! and other clients keep being served. Requests stay in flight because the `spin` model's
//! runs wait at a gate the test opens.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::collections::HashMap;

use common::gate::{Gate, OpenOnDrop};
use common::{TestResult, TestServer};
use serde_json::{json, Value};
use tensorport::batcher::BatchSettings;
use tensorport::metrics::RefusalReason;
use tensorport::overload::OverloadSettings;
use tensorport::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use tensorport::proto::inference::model_infer_request::InferInputTensor;
use tensorport::proto::inference::{InferTensorContents, ModelInferRequest};
use tensorport::proto::tensorflow::serving::prediction_service_client::PredictionServiceClient;
use tensorport::proto::tensorflow::serving::{ModelSpec, PredictRequest};
use tensorport::proto::tensorflow::{DataType, TensorProto};
use tensorport::request::Protocol;
use tensorport::transport::footprint;
use tensorport::ServerOptions;

const MODELS: &str = "tests/models";

fn with_budget(bytes: u64) -> ServerOptions {
    ServerOptions {
        overload: OverloadSettings {
            max_inflight_request_bytes: bytes,
            ..OverloadSettings::default()
        },
        ..ServerOptions::default()
    }
}

fn strings_request(count: usize) -> ModelInferRequest {
    ModelInferRequest {
        model_name: "echo_string".into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "BYTES".into(),
            shape: vec![1, i64::try_from(count).unwrap()],
            contents: Some(InferTensorContents {
                bytes_contents: vec![bytes::Bytes::new(); count],
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn predict_strings(count: usize) -> PredictRequest {
    let mut inputs = HashMap::new();
    inputs.insert(
        "x".to_owned(),
        TensorProto {
            dtype: DataType::DtString as i32,
            tensor_shape: Some(tensorport::proto::tensorflow::TensorShapeProto {
                dim: vec![
                    tensorport::proto::tensorflow::tensor_shape_proto::Dim {
                        size: 1,
                        ..Default::default()
                    },
                    tensorport::proto::tensorflow::tensor_shape_proto::Dim {
                        size: i64::try_from(count).unwrap(),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            string_val: vec![bytes::Bytes::new(); count],
            ..Default::default()
        },
    );
    PredictRequest {
        model_spec: Some(ModelSpec {
            name: "echo_string".into(),
            ..Default::default()
        }),
        inputs,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn string_bombs_are_refused_before_decoding_on_both_grpc_apis() -> TestResult {
    // 500 k empty strings are 1 MB on the wire and 32 MB of handles once decoded.
    let server =
        TestServer::start_with(MODELS, BatchSettings::default(), with_budget(16 << 20)).await;
    let mut kserve = GrpcInferenceServiceClient::connect(server.grpc_url.clone()).await?;
    let refused = kserve
        .model_infer(strings_request(500_000))
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(refused.message().contains("once decoded"), "{refused:?}");

    let mut tfs = PredictionServiceClient::connect(server.grpc_url.clone()).await?;
    let refused = tfs
        .predict(predict_strings(500_000))
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);

    // The refusals took nothing: a request that fits is served, on the same connections.
    let answer = kserve.model_infer(strings_request(3)).await?.into_inner();
    assert_eq!(answer.outputs[0].shape, vec![1, 3]);
    let answer = tfs.predict(predict_strings(3)).await?.into_inner();
    assert!(answer.outputs.contains_key("y"));
    for protocol in [Protocol::KserveGrpc, Protocol::TfServingGrpc] {
        assert_eq!(
            server.metrics.refusals(RefusalReason::Memory, protocol),
            1,
            "{protocol:?}"
        );
    }
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_body_of_many_values_is_refused_with_429_over_both_rest_apis() -> TestResult {
    let server =
        TestServer::start_with(MODELS, BatchSettings::default(), with_budget(8 << 20)).await;
    let http = reqwest::Client::new();
    // 400 k values in 800 kB of JSON: 25 MB charged, more than the whole budget.
    let values = vec![0; 400_000];
    let kserve = json!({"inputs": [{"name": "x", "shape": [1, 400_000], "datatype": "INT32",
                                    "data": values}]});
    let response = http
        .post(format!("{}/v2/models/echo_int32/infer", server.rest_url))
        .json(&kserve)
        .send()
        .await?;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: Value = response.json().await?;
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("budget"),
        "{body}"
    );

    let tfs = json!({"instances": [values]});
    let response = http
        .post(format!("{}/v1/models/echo_int32:predict", server.rest_url))
        .json(&tfs)
        .send()
        .await?;
    assert_eq!(response.status(), 429);

    // Small requests still pass.
    let small = json!({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "INT32",
                                   "data": [1, 2]}]});
    let response = http
        .post(format!("{}/v2/models/echo_int32/infer", server.rest_url))
        .json(&small)
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    assert_eq!(
        server
            .metrics
            .refusals(RefusalReason::Memory, Protocol::KserveHttp),
        1
    );
    server.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charge_is_held_while_a_request_runs_and_given_back_when_it_ends() -> TestResult {
    let body = serde_json::to_vec(&json!({
        "inputs": [
            {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]},
            {"name": "rounds", "shape": [1], "datatype": "INT64", "data": [1]},
        ],
    }))?;
    // Room for one such request and half of another.
    let charged = footprint::http(&http::HeaderMap::new(), &body).div_ceil(1024) * 1024;
    let gate = Gate::new();
    let server = TestServer::start_decorated(
        MODELS,
        BatchSettings::default(),
        with_budget(charged * 3 / 2),
        Some(gate.decorator("spin")),
    )
    .await;
    gate.close();
    let gate = OpenOnDrop(gate);
    let http = reqwest::Client::new();
    let url = format!("{}/v2/models/spin/infer", server.rest_url);
    let send = |http: reqwest::Client, url: String, body: Vec<u8>| async move {
        http.post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
    };
    let held = tokio::spawn(send(http.clone(), url.clone(), body.clone()));
    gate.0.wait_for_waiting(1).await;

    let refused = send(http.clone(), url.clone(), body.clone()).await?;
    assert_eq!(refused.status(), 429);
    // Requests without a body to decode are not charged: the server still answers them.
    let ready = http
        .get(format!("{}/v2/models/spin/ready", server.rest_url))
        .send()
        .await?;
    assert_eq!(ready.status(), 200);

    gate.0.open();
    assert_eq!(held.await??.status(), 200);
    // The held request's charge came back with its answer.
    let response = send(http.clone(), url.clone(), body.clone()).await?;
    assert_eq!(response.status(), 200);
    drop(gate);
    server.stop().await;
    Ok(())
}
