//! The TensorFlow SavedModel backend against the committed fixtures
//! (scripts/make_tf_fixtures.py): every signature def, outputs equal to TensorFlow's own,
//! empty batches, and failures that stay errors of their call.
#![cfg(feature = "tensorflow")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use common::repo_path;
use serde_json::Value;
use tensorport::backend::tf::TfModel;
use tensorport::backend::{Backend, BackendError, RuntimeThreads, Signature};
use tensorport::tensor::{DataType, Tensor};

fn load(name: &str) -> TfModel {
    let threads = RuntimeThreads {
        intra_op: 2,
        inter_op: 5,
    };
    TfModel::load(&repo_path(&format!("tests/models/{name}/1")), threads).expect("model loads")
}

fn signature<'m>(model: &'m TfModel, name: &str) -> &'m Signature {
    model
        .signatures()
        .iter()
        .find(|sig| sig.name == name)
        .expect("signature")
}

/// A float32 entry of reference.json (`{"dtype", "shape", "data"}`): shape and values.
fn floats(entry: &Value) -> (Vec<usize>, Vec<f32>) {
    assert_eq!(entry["dtype"], "float32");
    let shape = serde_json::from_value(entry["shape"].clone()).unwrap();
    let values = entry["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    (shape, values)
}

fn run_one(
    model: &TfModel,
    sig: &str,
    input: (&str, Tensor),
    output: &str,
) -> Result<Tensor, BackendError> {
    let signature = signature(model, sig);
    let mut outputs = model.run(
        signature,
        vec![(input.0.to_owned(), input.1)],
        &[output.to_owned()],
    )?;
    Ok(outputs.remove(0).1)
}

#[test]
fn serves_every_signature_with_tensorflows_outputs() {
    let model = load("ranker_tf");
    assert_eq!(model.platform(), "tensorflow_savedmodel");
    let names: Vec<&str> = model.signatures().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["serving_default", "logits"]);
    let default = &model.signatures()[0];
    assert_eq!(default.inputs[0].name, "features");
    assert_eq!(default.inputs[0].dtype, DataType::F32);
    assert_eq!(default.inputs[0].shape, vec![-1, 16]);
    assert_eq!(default.outputs[0].name, "score");

    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_path("tests/models/ranker_tf/reference.json")).unwrap(),
    )
    .unwrap();
    let (shape, features) = floats(&reference["inputs"]["features"]);
    for (sig, output) in [("serving_default", "score"), ("logits", "logit")] {
        let input = Tensor::from_vec(shape.clone(), features.clone()).unwrap();
        let got = run_one(&model, sig, ("features", input), output).unwrap();
        let (want_shape, want) = floats(&reference["outputs"][output]);
        assert_eq!(got.shape(), want_shape.as_slice());
        let got = got.view::<f32>().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5, "{sig}: {g} != {w}");
        }
    }
}

#[test]
fn an_empty_batch_gives_an_empty_output() {
    let model = load("ranker_tf");
    let input = Tensor::from_vec(vec![0, 16], Vec::<f32>::new()).unwrap();
    let got = run_one(&model, "serving_default", ("features", input), "score").unwrap();
    assert_eq!(got.shape(), &[0, 1]);
    assert_eq!(got.element_count(), 0);
}

#[test]
fn tensorflow_errors_fail_the_call_only() {
    let model = load("tf_echo");
    let ids = |values: Vec<i64>| Tensor::from_vec(vec![values.len()], values).unwrap();
    let err = run_one(&model, "lookup", ("ids", ids(vec![1, 42])), "values").unwrap_err();
    assert!(matches!(err, BackendError::InvalidInput(_)), "{err}");
    assert!(err.to_string().contains("42"), "{err}");
    let good = run_one(&model, "lookup", ("ids", ids(vec![2])), "values").unwrap();
    assert_eq!(good.view::<f32>().unwrap().as_ref(), &[3.0]);

    let strings = Tensor::strings(vec![1, 1], vec![bytes::Bytes::from_static(b"\xff")]).unwrap();
    let err = run_one(&model, "echo_string", ("x", strings), "y").unwrap_err();
    assert!(err.to_string().contains("UTF-8"), "{err}");
}

#[test]
fn a_folder_without_a_savedmodel_is_a_load_error() {
    let err = TfModel::load(&repo_path("tests/models/broken"), RuntimeThreads::default())
        .err()
        .expect("refused");
    assert!(matches!(err, BackendError::Load { .. }), "{err}");
}
