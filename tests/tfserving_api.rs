//! The TF Serving APIs end to end over real sockets, checked against ONNX Runtime run directly
//! on the same model file.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use common::{onnx_runtime, repo_path, TestResult, TestServer};
use serde_json::{json, Value};
use tensorport::backend::onnx::OnnxSessionOptions;
use tensorport::backend::Backend;
use tensorport::backend::RuntimeThreads;
use tensorport::batcher::BatchSettings;
use tensorport::proto::tensorflow::serving::{
    model_service_client::ModelServiceClient, model_spec::VersionChoice,
    prediction_service_client::PredictionServiceClient, GetModelMetadataRequest,
    GetModelStatusRequest, ModelSpec, PredictRequest, SignatureDefMap,
};
use tensorport::proto::tensorflow::{tensor_shape_proto, DataType, TensorProto, TensorShapeProto};
use tensorport::tensor::tensor_proto::ResponseEncoding;
use tensorport::tensor::Tensor;
use tensorport::ServerOptions;

const FEATURES: usize = 16;

fn features(rows: usize) -> Vec<f32> {
    (0..rows * FEATURES)
        .map(|i| (i as f32 * 0.37).sin())
        .collect()
}

/// Scores from ONNX Runtime itself, with no server in between.
fn reference_scores(values: &[f32], rows: usize) -> Vec<f32> {
    let model = onnx_runtime()
        .load_model(
            &repo_path("examples/models/ranker/2/model.onnx"),
            RuntimeThreads::default(),
            &OnnxSessionOptions::default(),
            1,
            true,
        )
        .expect("ranker loads");
    let signature = model.signatures()[0].clone();
    let input = Tensor::from_vec(vec![rows, FEATURES], values.to_vec()).expect("valid tensor");
    let outputs = model
        .run(
            &signature,
            vec![("features".into(), input)],
            &["score".to_owned()],
        )
        .expect("ranker runs");
    outputs[0].1.view::<f32>().expect("f32 scores").into_owned()
}

fn assert_close(actual: &[f32], expected: &[f32]) {
    assert_eq!(actual.len(), expected.len());
    for (a, e) in actual.iter().zip(expected) {
        assert!((a - e).abs() <= 1e-5, "{a} vs {e}");
    }
}

fn floats(value: &Value) -> Vec<f32> {
    match value {
        Value::Array(items) => items.iter().flat_map(floats).collect(),
        Value::Number(n) => vec![n.as_f64().expect("a number") as f32],
        other => panic!("not a number: {other}"),
    }
}

#[tokio::test]
async fn rest_row_and_columnar_formats_match_the_runtime() -> TestResult {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let rows = 3;
    let values = features(rows);
    let expected = reference_scores(&values, rows);
    let instances: Vec<&[f32]> = values.chunks(FEATURES).collect();
    let url = format!("{}/v1/models/ranker:predict", server.rest_url);

    let rows_body: Value = client
        .post(&url)
        .json(&json!({ "instances": instances }))
        .send()
        .await?
        .json()
        .await?;
    assert_close(&floats(&rows_body["predictions"]), &expected);

    let columns_body: Value = client
        .post(&url)
        .json(&json!({ "inputs": { "features": instances } }))
        .send()
        .await?
        .json()
        .await?;
    assert_close(&floats(&columns_body["outputs"]), &expected);

    let pinned = format!("{}/v1/models/ranker/versions/2:predict", server.rest_url);
    let pinned_body: Value = client
        .post(&pinned)
        .json(&json!({ "instances": instances }))
        .send()
        .await?
        .json()
        .await?;
    assert_close(&floats(&pinned_body["predictions"]), &expected);
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn rest_errors_use_the_status_table() -> TestResult {
    let server = TestServer::start().await;
    let client = reqwest::Client::new();
    let cases = [
        (
            "/v1/models/nope:predict",
            r#"{"instances": [[1]]}"#,
            404,
            "nope",
        ),
        (
            "/v1/models/ranker/versions/1:predict",
            r#"{"instances": [[1]]}"#,
            404,
            "version 1",
        ),
        ("/v1/models/ranker:predict", "{not json", 400, "JSON"),
        (
            "/v1/models/ranker:predict",
            r#"{"instances": [[1, 2]]}"#,
            400,
            "shape",
        ),
    ];
    for (path, body, status, needle) in cases {
        let response = client
            .post(format!("{}{path}", server.rest_url))
            .body(body)
            .send()
            .await?;
        assert_eq!(response.status().as_u16(), status, "{path} {body}");
        let error: Value = response.json().await?;
        let message = error["error"].as_str().unwrap_or_default();
        assert!(
            message.contains(needle),
            "{message:?} should mention {needle:?}"
        );
    }
    server.stop().await;
    Ok(())
}

fn ranker_spec() -> Option<ModelSpec> {
    Some(ModelSpec {
        name: "ranker".into(),
        ..Default::default()
    })
}

#[tokio::test]
async fn grpc_predict_accepts_tensor_content_and_typed_values() -> TestResult {
    let server = TestServer::start().await;
    let mut client = PredictionServiceClient::connect(server.grpc_url.clone()).await?;
    let rows = 2;
    let values = features(rows);
    let expected = reference_scores(&values, rows);
    let shape = TensorShapeProto {
        dim: [rows as i64, FEATURES as i64]
            .into_iter()
            .map(|size| tensor_shape_proto::Dim {
                size,
                name: String::new(),
            })
            .collect(),
        unknown_rank: false,
    };
    let packed = TensorProto {
        dtype: DataType::DtFloat as i32,
        tensor_shape: Some(shape.clone()),
        tensor_content: values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
        ..Default::default()
    };
    let typed = TensorProto {
        dtype: DataType::DtFloat as i32,
        tensor_shape: Some(shape),
        float_val: values.clone(),
        ..Default::default()
    };
    for tensor in [packed, typed] {
        let request = PredictRequest {
            model_spec: ranker_spec(),
            inputs: [("features".to_owned(), tensor)].into(),
            ..Default::default()
        };
        let response = client.predict(request).await?.into_inner();
        let spec = response.model_spec.expect("model_spec in the response");
        assert_eq!(spec.name, "ranker");
        assert_eq!(spec.signature_name, "serving_default");
        assert_eq!(spec.version_choice, Some(VersionChoice::Version(2)));
        let score = &response.outputs["score"];
        let dims: Vec<i64> = score
            .tensor_shape
            .iter()
            .flat_map(|s| s.dim.iter().map(|d| d.size))
            .collect();
        assert_eq!(dims, vec![rows as i64, 1]);
        // TF Serving's default answer: the typed field, no packed bytes.
        assert!(score.tensor_content.is_empty());
        assert_close(&score.float_val, &expected);
    }
    server.stop().await;
    Ok(())
}

/// With `--predict-response-tensor-content`, answers carry packed bytes instead.
#[tokio::test]
async fn grpc_predict_answers_tensor_content_when_asked() -> TestResult {
    let options = ServerOptions {
        predict_response: ResponseEncoding::TensorContent,
        ..ServerOptions::default()
    };
    let server = TestServer::start_with("examples/models", BatchSettings::default(), options).await;
    let mut client = PredictionServiceClient::connect(server.grpc_url.clone()).await?;
    let rows = 3;
    let values = features(rows);
    let expected = reference_scores(&values, rows);
    let request = PredictRequest {
        model_spec: ranker_spec(),
        inputs: [(
            "features".to_owned(),
            TensorProto {
                dtype: DataType::DtFloat as i32,
                tensor_shape: Some(TensorShapeProto {
                    dim: [rows as i64, FEATURES as i64]
                        .into_iter()
                        .map(|size| tensor_shape_proto::Dim {
                            size,
                            name: String::new(),
                        })
                        .collect(),
                    unknown_rank: false,
                }),
                float_val: values,
                ..Default::default()
            },
        )]
        .into(),
        ..Default::default()
    };
    let response = client.predict(request).await?.into_inner();
    let score = &response.outputs["score"];
    assert!(score.float_val.is_empty());
    let scores: Vec<f32> = score
        .tensor_content
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_close(&scores, &expected);
    server.stop().await;
    Ok(())
}

#[tokio::test]
async fn grpc_metadata_and_status_describe_the_served_version() -> TestResult {
    let server = TestServer::start().await;
    let mut predictions = PredictionServiceClient::connect(server.grpc_url.clone()).await?;
    let metadata = predictions
        .get_model_metadata(GetModelMetadataRequest {
            model_spec: ranker_spec(),
            metadata_field: vec!["signature_def".into()],
        })
        .await?
        .into_inner();
    let any = &metadata.metadata["signature_def"];
    assert_eq!(
        any.type_url,
        "type.googleapis.com/tensorflow.serving.SignatureDefMap"
    );
    let map: SignatureDefMap = prost::Message::decode(any.value.as_slice())?;
    let def = &map.signature_def["serving_default"];
    let input = &def.inputs["features"];
    assert_eq!(input.dtype, DataType::DtFloat as i32);
    let dims: Vec<i64> = input
        .tensor_shape
        .iter()
        .flat_map(|s| s.dim.iter().map(|d| d.size))
        .collect();
    assert_eq!(dims, vec![-1, 16]);

    let mut models = ModelServiceClient::connect(server.grpc_url.clone()).await?;
    let status = models
        .get_model_status(GetModelStatusRequest {
            model_spec: ranker_spec(),
        })
        .await?
        .into_inner();
    assert_eq!(status.model_version_status.len(), 1);
    assert_eq!(status.model_version_status[0].version, 2);
    assert_eq!(status.model_version_status[0].state, 30);

    let missing = models
        .get_model_status(GetModelStatusRequest {
            model_spec: Some(ModelSpec {
                name: "nope".into(),
                ..Default::default()
            }),
        })
        .await
        .expect_err("unknown model");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    server.stop().await;
    Ok(())
}
