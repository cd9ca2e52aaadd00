//! Unit tests of `examples`: feeding inputs by feature name or serialized, the mistakes each
//! named, and which signature an operation calls.

use prost::Message;

use super::run::route;
use super::set::Examples;
use crate::api::tfserving::error::ExampleError;
use crate::backend::{Backend, NamedTensor, Signature, TensorSpec};
use crate::proto::tensorflow::{feature, Example, Feature, Features};
use crate::tensor::{DataType, DecodeLimits};

fn floats(values: &[f32]) -> Feature {
    Feature {
        kind: Some(feature::Kind::FloatList(
            crate::proto::tensorflow::FloatList {
                value: values.to_vec(),
            },
        )),
    }
}

fn ints(values: &[i64]) -> Feature {
    Feature {
        kind: Some(feature::Kind::Int64List(
            crate::proto::tensorflow::Int64List {
                value: values.to_vec(),
            },
        )),
    }
}

fn example(features: &[(&str, Feature)]) -> Example {
    Example {
        features: Some(Features {
            feature: features
                .iter()
                .map(|(name, f)| ((*name).to_owned(), f.clone()))
                .collect(),
        }),
    }
}

fn sig(inputs: Vec<TensorSpec>) -> Signature {
    Signature {
        name: "serving_default".into(),
        inputs,
        outputs: vec![TensorSpec::new("outputs", DataType::F32, vec![-1])],
    }
}

fn regressor() -> Signature {
    sig(vec![
        TensorSpec::new("x", DataType::F32, vec![-1, 2]),
        TensorSpec::new("n", DataType::I64, vec![-1]),
    ])
}

fn build(
    examples: Vec<Example>,
    context: Option<Example>,
) -> Result<Vec<NamedTensor>, ExampleError> {
    Examples::new(examples, context.and_then(|c| c.features))?
        .inputs(&regressor(), &DecodeLimits::default())
}

#[test]
fn features_feed_inputs_of_their_name_one_row_per_example() -> Result<(), ExampleError> {
    let inputs = build(
        vec![
            example(&[
                ("x", floats(&[1.0, 2.0])),
                ("n", ints(&[1])),
                ("extra", ints(&[9])),
            ]),
            example(&[("x", floats(&[3.0, 4.0])), ("n", ints(&[0]))]),
        ],
        None,
    )?;
    let x = &inputs[0].1;
    assert_eq!(x.shape(), [2, 2]);
    assert_eq!(&*x.view::<f32>()?, &[1.0, 2.0, 3.0, 4.0]);
    let n = &inputs[1].1;
    assert_eq!(n.shape(), [2]);
    assert_eq!(&*n.view::<i64>()?, &[1, 0]);
    Ok(())
}

#[test]
fn context_fills_in_and_examples_win() -> Result<(), ExampleError> {
    let inputs = build(
        vec![
            example(&[("x", floats(&[1.0, 2.0]))]),
            example(&[("x", floats(&[3.0, 4.0])), ("n", ints(&[7]))]),
        ],
        Some(example(&[("n", ints(&[5]))])),
    )?;
    assert_eq!(&*inputs[1].1.view::<i64>()?, &[5, 7]);
    Ok(())
}

#[test]
fn each_mistake_is_named() {
    let message = |examples, context| match build(examples, context) {
        Ok(_) => String::new(),
        Err(err) => err.to_string(),
    };
    assert!(message(vec![example(&[("x", floats(&[1.0, 2.0]))])], None).contains("no feature 'n'"));
    assert!(message(
        vec![example(&[("x", ints(&[1, 2])), ("n", floats(&[1.0]))])],
        None
    )
    .contains("float_list"));
    assert!(message(
        vec![
            example(&[("x", floats(&[1.0, 2.0])), ("n", ints(&[1]))]),
            example(&[("x", floats(&[1.0])), ("n", ints(&[1]))]),
        ],
        None
    )
    .contains("every example"));
    assert!(message(
        vec![example(&[("x", floats(&[1.0, 2.0])), ("n", ints(&[1, 2]))])],
        None
    )
    .contains("one value per example"));
    assert!(Examples::new(Vec::new(), None).is_err());
    assert!(matches!(
        Examples::from_input(None),
        Err(ExampleError::NoInput)
    ));
}

#[test]
fn a_small_context_cannot_ask_for_a_large_tensor() {
    let big = floats(&vec![0.0; 1 << 16]);
    let examples = vec![example(&[("n", ints(&[1]))]); 1 << 12];
    let limits = DecodeLimits {
        max_tensor_bytes: 1 << 20,
        ..DecodeLimits::default()
    };
    let built = Examples::new(examples, example(&[("x", big)]).features)
        .and_then(|e| e.inputs(&regressor(), &limits));
    assert!(matches!(built, Err(ExampleError::TooLarge { .. })));
}

/// Signatures with the methods a SavedModel would declare for them.
struct Declared {
    signatures: Vec<Signature>,
    /// Parallel to `signatures`.
    methods: Vec<Option<&'static str>>,
}

impl Declared {
    fn new(declared: &[(&str, Option<&'static str>)]) -> Self {
        let signatures = declared
            .iter()
            .map(|(name, _)| Signature {
                name: (*name).to_owned(),
                ..sig(Vec::new())
            })
            .collect();
        let methods = declared.iter().map(|(_, method)| *method).collect();
        Self {
            signatures,
            methods,
        }
    }
}

impl Backend for Declared {
    fn platform(&self) -> &'static str {
        "test"
    }

    fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    fn signature_method(&self, signature: &str) -> Option<&str> {
        let at = self.signatures.iter().position(|s| s.name == signature)?;
        self.methods.get(at).copied().flatten()
    }

    fn run(
        &self,
        _: &Signature,
        _: Vec<NamedTensor>,
        _: &[String],
    ) -> Result<Vec<NamedTensor>, crate::backend::BackendError> {
        Ok(Vec::new())
    }
}

const CLASSIFY: &str = "tensorflow/serving/classify";
const REGRESS: &str = "tensorflow/serving/regress";

#[test]
fn an_unnamed_signature_is_the_one_declaring_the_method() {
    let exported = Declared::new(&[
        ("serving_default", Some("tensorflow/serving/predict")),
        ("classification", Some(CLASSIFY)),
        ("regression", Some(REGRESS)),
    ]);
    assert_eq!(route(&exported, "", CLASSIFY), "classification");
    assert_eq!(route(&exported, "", REGRESS), "regression");
    // A named signature is the one called, whatever it declares.
    assert_eq!(
        route(&exported, "serving_default", CLASSIFY),
        "serving_default"
    );
    assert_eq!(route(&exported, "regression", CLASSIFY), "regression");

    // A default that declares the method stays the default.
    let default_classifies = Declared::new(&[
        ("serving_default", Some(CLASSIFY)),
        ("other", Some(CLASSIFY)),
    ]);
    assert_eq!(route(&default_classifies, "", CLASSIFY), "");
    // Formats without methods (ONNX, TorchScript) keep their default.
    let onnx = Declared::new(&[("serving_default", None)]);
    assert_eq!(route(&onnx, "", REGRESS), "");
}

#[test]
fn a_method_signature_takes_serialized_examples_only_through_one_string_input() {
    let examples = Examples::new(vec![example(&[("x", floats(&[1.0]))])], None);
    let examples = examples.unwrap_or_default();
    let two = sig(vec![
        TensorSpec::new("a", DataType::String, vec![-1]),
        TensorSpec::new("b", DataType::String, vec![-1]),
    ]);
    let err = examples.serialized_inputs(&two, CLASSIFY, &DecodeLimits::default());
    assert!(matches!(
        err,
        Err(ExampleError::NotAnExampleSignature { .. })
    ));
    // A feature named after the input does not change what such a signature receives.
    let one = sig(vec![TensorSpec::new("x", DataType::String, vec![-1])]);
    let inputs = examples.serialized_inputs(&one, CLASSIFY, &DecodeLimits::default());
    let rows = inputs.map(|i| i[0].1.string_elements().map(crate::tensor::Strings::len));
    assert!(matches!(rows, Ok(Some(1))));
}

#[test]
fn a_lone_string_input_receives_serialized_examples() -> Result<(), ExampleError> {
    let sig = sig(vec![TensorSpec::new("inputs", DataType::String, vec![-1])]);
    let examples = Examples::new(
        vec![example(&[("x", floats(&[1.0]))])],
        example(&[("c", ints(&[2]))]).features,
    )?;
    let inputs = examples.inputs(&sig, &DecodeLimits::default())?;
    let rows = inputs[0].1.string_elements().unwrap_or_default();
    assert_eq!(rows.len(), 1);
    let decoded = rows
        .first()
        .map(Example::decode)
        .transpose()
        .ok()
        .flatten()
        .and_then(|e| e.features)
        .unwrap_or_default();
    assert!(decoded.feature.contains_key("x") && decoded.feature.contains_key("c"));
    Ok(())
}
