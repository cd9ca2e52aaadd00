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
}

#[test]
fn strings_carry_any_bytes_both_ways() {
    let model = load("tf_echo");
    let rows = [
        bytes::Bytes::from_static(b"\xff\x00\xfe"),
        bytes::Bytes::from_static(b"text"),
        bytes::Bytes::new(),
        bytes::Bytes::from((0..=255u8).collect::<Vec<_>>()),
    ];
    let strings = Tensor::strings(vec![2, 2], rows.to_vec()).unwrap();
    let got = run_one(&model, "echo_string", ("x", strings), "y").unwrap();
    assert_eq!(got.shape(), &[2, 2]);
    assert_eq!(got.string_elements().unwrap(), rows.as_slice());
    // UTF-8 text takes the direct way in and comes back the same.
    let text = Tensor::strings(vec![1, 1], vec![bytes::Bytes::from_static("é".as_bytes())]);
    let got = run_one(&model, "echo_string", ("x", text.unwrap()), "y").unwrap();
    assert_eq!(got.string_elements().unwrap(), ["é".as_bytes()]);
}

/// A serialized tf.Example with float feature `x` and int64 feature `n`.
fn example(x: &[f32], n: i64) -> bytes::Bytes {
    use prost::Message;
    use tensorport::proto::tensorflow::{
        feature, Example, Feature, Features, FloatList, Int64List,
    };
    let feature = |kind| Feature { kind: Some(kind) };
    let features = [
        (
            "x".to_owned(),
            feature(feature::Kind::FloatList(FloatList { value: x.to_vec() })),
        ),
        (
            "n".to_owned(),
            feature(feature::Kind::Int64List(Int64List { value: vec![n] })),
        ),
    ];
    let example = Example {
        features: Some(Features {
            feature: features.into_iter().collect(),
        }),
    };
    example.encode_to_vec().into()
}

#[test]
fn classification_and_regression_signatures_parse_serialized_examples() {
    let model = load("classifier_tf");
    let method = |name: &str| model.signature_method(name).map(str::to_owned);
    assert_eq!(
        method("classification").as_deref(),
        Some("tensorflow/serving/classify")
    );
    assert_eq!(
        method("regression").as_deref(),
        Some("tensorflow/serving/regress")
    );
    assert_eq!(
        method("serving_default").as_deref(),
        Some("tensorflow/serving/predict")
    );

    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_path("tests/models/classifier_tf/reference.json")).unwrap(),
    )
    .unwrap();
    let rows: Vec<bytes::Bytes> = reference["examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let x: Vec<f32> = serde_json::from_value(e["x"].clone()).unwrap();
            example(&x, e["n"][0].as_i64().unwrap())
        })
        .collect();
    let examples = || Tensor::strings(vec![rows.len()], rows.clone()).unwrap();

    let sig = signature(&model, "classification");
    let outputs = model
        .run(
            sig,
            vec![("inputs".to_owned(), examples())],
            &["classes".to_owned(), "scores".to_owned()],
        )
        .unwrap();
    let labels: Vec<String> =
        serde_json::from_value(reference["classification"]["classes"]["data"].clone()).unwrap();
    let got: Vec<&[u8]> = outputs[0].1.string_elements().unwrap().iter().collect();
    assert_eq!(outputs[0].1.shape(), &[4, 3]);
    assert_eq!(got, labels.iter().map(|l| l.as_bytes()).collect::<Vec<_>>());
    let (shape, want) = floats(&reference["classification"]["scores"]);
    assert_eq!(outputs[1].1.shape(), shape.as_slice());
    for (g, w) in outputs[1].1.view::<f32>().unwrap().iter().zip(&want) {
        assert!((g - w).abs() <= 1e-6, "{g} != {w}");
    }

    let value = run_one(&model, "regression", ("inputs", examples()), "outputs").unwrap();
    let (shape, want) = floats(&reference["regression"]["outputs"]);
    assert_eq!(value.shape(), shape.as_slice());
    assert_eq!(value.view::<f32>().unwrap().as_ref(), want.as_slice());
}

#[test]
fn a_bad_example_is_the_callers_error() {
    let model = load("classifier_tf");
    let garbage = Tensor::strings(vec![1], vec![bytes::Bytes::from_static(b"\xff\xff")]);
    let err = run_one(
        &model,
        "regression",
        ("inputs", garbage.unwrap()),
        "outputs",
    )
    .unwrap_err();
    assert!(matches!(err, BackendError::InvalidInput(_)), "{err}");
    let ok = Tensor::strings(vec![1], vec![example(&[1.0, 1.0], 1)]).unwrap();
    let value = run_one(&model, "regression", ("inputs", ok), "outputs").unwrap();
    assert_eq!(value.view::<f32>().unwrap().as_ref(), &[4.0]);
}

#[test]
fn a_folder_without_a_savedmodel_is_a_load_error() {
    let err = TfModel::load(&repo_path("tests/models/broken"), RuntimeThreads::default())
        .err()
        .expect("refused");
    assert!(matches!(err, BackendError::Load { .. }), "{err}");
}
