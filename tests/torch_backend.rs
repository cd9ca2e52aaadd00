//! The TorchScript backend against the committed fixtures (scripts/make_torch_fixtures.py):
//! outputs equal to PyTorch's own, outputs matched by position and by name, failures that stay
//! errors, and a model without a declared signature refused with what to add.
#![cfg(feature = "torch")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{onnx_runtime, repo_path, TestResult};
use serde_json::Value;
use tensorport::backend::torch::TorchModel;
use tensorport::backend::{Backend, BackendError, NamedTensor, RuntimeThreads};
use tensorport::batcher::BatchSettings;
use tensorport::metrics::Metrics;
use tensorport::repository::{Loader, ModelConfig, VersionFolder};
use tensorport::tensor::{DataType, Tensor};

fn load(name: &str) -> TorchModel {
    let dir = repo_path(&format!("tests/models/{name}"));
    let config = ModelConfig::load(&dir).expect("config.toml");
    let signature = config.signature().expect("valid").expect("declared");
    TorchModel::load(
        &dir.join("1/model.pt"),
        signature,
        RuntimeThreads::default(),
    )
    .expect("model loads")
}

fn reference(name: &str) -> Value {
    let path = repo_path(&format!("tests/models/{name}/reference.json"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("reference.json")).expect("JSON")
}

/// A tensor from one entry of reference.json (`{"dtype", "shape", "data"}`).
fn tensor(entry: &Value) -> Tensor {
    let shape: Vec<usize> = serde_json::from_value(entry["shape"].clone()).unwrap();
    let data = &entry["data"];
    match entry["dtype"].as_str().unwrap() {
        "float32" => Tensor::from_vec(shape, floats(data).map(|v| v as f32).collect()),
        "float64" => Tensor::from_vec(shape, floats(data).collect()),
        "int64" => Tensor::from_vec(
            shape,
            data.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect(),
        ),
        other => panic!("no fixture uses {other}"),
    }
    .unwrap()
}

fn floats(data: &Value) -> impl Iterator<Item = f64> + '_ {
    data.as_array().unwrap().iter().map(|v| v.as_f64().unwrap())
}

fn reference_inputs(name: &str) -> Vec<NamedTensor> {
    let reference = reference(name);
    reference["inputs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(input, entry)| (input.clone(), tensor(entry)))
        .collect()
}

fn assert_matches(got: &Tensor, want: &Value) {
    let want = tensor(want);
    assert_eq!(got.dtype(), want.dtype());
    assert_eq!(got.shape(), want.shape());
    match got.dtype() {
        DataType::F32 => close(&got.view::<f32>().unwrap(), &want.view::<f32>().unwrap()),
        DataType::F64 => close(&got.view::<f64>().unwrap(), &want.view::<f64>().unwrap()),
        _ => assert_eq!(got.bytes(), want.bytes()),
    }
}

fn close<T: Copy + Into<f64>>(got: &[T], want: &[T]) {
    for (g, w) in got.iter().zip(want) {
        let (g, w): (f64, f64) = ((*g).into(), (*w).into());
        assert!((g - w).abs() <= 1e-6 * (1.0 + w.abs()), "{g} != {w}");
    }
}

fn run(
    model: &TorchModel,
    inputs: Vec<NamedTensor>,
    outputs: &[&str],
) -> Result<Vec<NamedTensor>, BackendError> {
    let signature = model.signatures()[0].clone();
    let outputs: Vec<String> = outputs.iter().map(|s| s.to_string()).collect();
    model.run(&signature, inputs, &outputs)
}

#[test]
fn ranker_gives_pytorchs_outputs() {
    let model = load("ranker_torch");
    assert_eq!(model.platform(), "pytorch_libtorch");
    let sig = &model.signatures()[0];
    assert_eq!(sig.inputs[0].shape, vec![-1, 16]);
    assert_eq!(sig.inputs[0].symbols[0], "batch");
    let outputs = run(&model, reference_inputs("ranker_torch"), &["score"]).unwrap();
    assert_matches(
        &outputs[0].1,
        &reference("ranker_torch")["outputs"]["score"],
    );
}

#[test]
fn tuple_outputs_are_positional_and_dict_outputs_by_name() {
    let pair = load("torch_pair");
    let outputs = run(&pair, reference_inputs("torch_pair"), &["product", "sum"]).unwrap();
    let names: Vec<&str> = outputs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["product", "sum"]);
    let want = reference("torch_pair");
    assert_matches(&outputs[0].1, &want["outputs"]["product"]);
    assert_matches(&outputs[1].1, &want["outputs"]["sum"]);

    let dict = load("torch_dict");
    // Inputs given in the opposite order of forward()'s parameters still land right.
    let mut inputs = reference_inputs("torch_dict");
    inputs.reverse();
    let outputs = run(&dict, inputs, &["weighted", "count"]).unwrap();
    let want = reference("torch_dict");
    assert_matches(&outputs[0].1, &want["outputs"]["weighted"]);
    assert_matches(&outputs[1].1, &want["outputs"]["count"]);
}

#[test]
fn a_failing_forward_is_an_error_for_that_run_only() {
    let model = load("torch_raises");
    let negative = Tensor::from_vec(vec![1, 2], vec![1.0f32, -1.0]).unwrap();
    let err = run(&model, vec![("x".into(), negative)], &["y"]).unwrap_err();
    assert!(matches!(err, BackendError::Runtime(_)), "{err:?}");
    assert!(err.to_string().contains("negative input"), "{err}");
    let positive = Tensor::from_vec(vec![1, 2], vec![1.0f32, 3.0]).unwrap();
    let outputs = run(&model, vec![("x".into(), positive)], &["y"]).unwrap();
    assert_eq!(outputs[0].1.view::<f32>().unwrap().as_ref(), &[2.0, 6.0]);
}

#[test]
fn a_wrong_declared_output_dtype_fails_the_run_with_a_message() {
    let dir = repo_path("tests/models/ranker_torch");
    let mut signature = ModelConfig::load(&dir)
        .unwrap()
        .signature()
        .unwrap()
        .unwrap();
    signature.outputs[0].dtype = DataType::F64;
    let model = TorchModel::load(
        &dir.join("1/model.pt"),
        signature,
        RuntimeThreads::default(),
    )
    .unwrap();
    let features = Tensor::dense(DataType::F32, vec![1, 16], Bytes::from(vec![0u8; 64])).unwrap();
    let err = run(&model, vec![("features".into(), features)], &["score"]).unwrap_err();
    assert!(err.to_string().contains("declares float64"), "{err}");
}

#[test]
fn types_libtorch_lacks_are_refused_at_load() {
    let dir = repo_path("tests/models/ranker_torch");
    let mut signature = ModelConfig::load(&dir)
        .unwrap()
        .signature()
        .unwrap()
        .unwrap();
    signature.inputs[0].dtype = DataType::U32;
    let err = TorchModel::load(
        &dir.join("1/model.pt"),
        signature,
        RuntimeThreads::default(),
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("uint32"), "{err}");
}

#[test]
fn a_model_without_a_signature_is_refused_with_what_to_add() -> TestResult {
    let loader = Loader {
        onnx: onnx_runtime(),
        threads: RuntimeThreads::default(),
        default_batching: BatchSettings::default(),
        metrics: Arc::new(Metrics::new()),
        instances: 1,
        inline_run_max: std::time::Duration::ZERO,
        strict_model_config: false,
    };
    let folder = VersionFolder {
        version: 1,
        path: repo_path("tests/models/ranker_torch/1"),
    };
    let err = loader
        .load(&folder, &ModelConfig::default())
        .err()
        .expect("refused");
    let message = err.to_string();
    assert!(
        message.contains("[[input]]") && message.contains("[[output]]"),
        "{message}"
    );
    assert!(message.contains("config.toml"), "{message}");
    let loaded = loader.load(
        &folder,
        &ModelConfig::load(&repo_path("tests/models/ranker_torch"))?,
    )?;
    assert_eq!(loaded.platform(), "pytorch_libtorch");
    Ok(())
}
