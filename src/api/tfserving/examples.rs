//! `tf.Example` inputs of Classify, Regress and MultiInference, turned into a signature's
//! input tensors.
//!
//! Two ways in, chosen by the signature:
//! - **Features by name** (ONNX, TorchScript, any signature with named numeric inputs): each
//!   input is fed by the feature of the same name, one row per example: `float_list` to a
//!   float input, `int64_list` to an integer input, `bytes_list` to a string input. A feature
//!   of one value per example feeds an input of shape `[-1]` as `[n]`; `k` values per example
//!   feed `[n, k]`, and every example must then carry `k` values.
//! - **Serialized examples** (TensorFlow's classification and regression signatures): a
//!   signature whose only input is a string tensor that no feature is named after receives the
//!   examples themselves, serialized, one string per example, as TF Serving feeds them. A
//!   signature that declares the operation's method (a SavedModel's `method_name`) always does.
//!
//! Which signature: the one the request names; without a name, the model's default, unless the
//! default does not declare the operation's method and another signature does (a SavedModel
//! exported with `classification` / `regression` signatures beside a Predict `serving_default`),
//! which then answers.
//!
//! Context features (`example_list_with_context`) apply to every example; an example's own
//! feature of the same name wins.

use bytes::Bytes;
use prost::Message;

use crate::backend::{Backend, NamedTensor, Signature, TensorSpec};
use crate::error::Error;
use crate::infer::{Decoded, InferService, ModelTarget, PredictionResult};
use crate::proto::tensorflow::serving::{input, Input};
use crate::proto::tensorflow::{feature, Example, Feature, Features};
use crate::request::RequestContext;
use crate::tensor::{DataType, DecodeError, DecodeLimits, Tensor};

/// Why examples cannot feed a signature.
#[derive(Debug, thiserror::Error)]
pub enum ExampleError {
    #[error(transparent)]
    Tensor(#[from] DecodeError),
    #[error(
        "the request has no input; send input.example_list or input.example_list_with_context"
    )]
    NoInput,
    #[error("the request holds no examples; send at least one")]
    NoExamples,
    #[error("example {example} has no feature '{feature}', which feeds the signature's input of that name (inputs: {expected})")]
    MissingFeature {
        example: usize,
        feature: String,
        expected: String,
    },
    #[error("feature '{feature}' of example {example} holds no value list")]
    EmptyFeature { example: usize, feature: String },
    #[error("feature '{feature}' of example {example} is a {got}, but input '{feature}' is {dtype}; {rule}")]
    WrongKind {
        example: usize,
        feature: String,
        got: &'static str,
        dtype: DataType,
        rule: &'static str,
    },
    #[error("input '{name}' has dtype {dtype}, which no tf.Example feature can feed ({rule})")]
    UnfeedableDtype {
        name: String,
        dtype: DataType,
        rule: &'static str,
    },
    #[error("feature '{feature}' holds {first} values in example 0 but {got} in example {example}; every example must give an input the same number of values")]
    RaggedFeature {
        feature: String,
        first: usize,
        example: usize,
        got: usize,
    },
    #[error("feature '{feature}' holds {count} values per example, but input '{feature}' has shape {shape} (one value per example)")]
    NotScalar {
        feature: String,
        count: usize,
        shape: String,
    },
    #[error("feature '{feature}' value {value} is out of range for input '{feature}' ({dtype})")]
    OutOfRange {
        feature: String,
        value: i64,
        dtype: DataType,
    },
    #[error("signature '{signature}' declares {method}, so it must take serialized tf.Examples as its one string input; its inputs are: {inputs}")]
    NotAnExampleSignature {
        signature: String,
        method: String,
        inputs: String,
    },
    #[error("input '{feature}' would need {bytes} bytes for {examples} examples, over the limit of {limit}")]
    TooLarge {
        feature: String,
        examples: usize,
        bytes: usize,
        limit: usize,
    },
}

impl From<ExampleError> for Error {
    fn from(err: ExampleError) -> Self {
        Error::invalid(err.to_string())
    }
}

/// The feeding rule, repeated in messages so that a client sees it where it went wrong.
const RULE: &str = "float_list feeds float32/float64, int64_list feeds int64/int32 (and float32), bytes_list feeds string";

/// The examples of one request, with their shared context.
#[derive(Debug, Clone, Default)]
pub struct Examples {
    examples: Vec<Example>,
    context: Option<Features>,
}

impl Examples {
    /// The examples of a request's `input`, refusing a request without any.
    pub fn from_input(input: Option<Input>) -> Result<Self, ExampleError> {
        let (examples, context) = match input.and_then(|input| input.kind) {
            None => return Err(ExampleError::NoInput),
            Some(input::Kind::ExampleList(list)) => (list.examples, None),
            Some(input::Kind::ExampleListWithContext(list)) => {
                (list.examples, list.context.and_then(|c| c.features))
            }
        };
        Self::new(examples, context)
    }

    pub fn new(examples: Vec<Example>, context: Option<Features>) -> Result<Self, ExampleError> {
        if examples.is_empty() {
            return Err(ExampleError::NoExamples);
        }
        Ok(Self { examples, context })
    }

    /// How many examples, and so how many results the answer holds.
    pub fn len(&self) -> usize {
        self.examples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.examples.is_empty()
    }

    fn feature<'a>(&'a self, example: &'a Example, name: &str) -> Option<&'a Feature> {
        example
            .features
            .as_ref()
            .and_then(|f| f.feature.get(name))
            .or_else(|| self.context.as_ref().and_then(|c| c.feature.get(name)))
    }

    /// The signature's inputs, fed from the examples as the module documentation says.
    pub fn inputs(
        &self,
        sig: &Signature,
        limits: &DecodeLimits,
    ) -> Result<Vec<NamedTensor>, ExampleError> {
        if let [spec] = sig.inputs.as_slice() {
            let named_after = self
                .examples
                .iter()
                .any(|e| self.feature(e, &spec.name).is_some());
            if spec.dtype == DataType::String && !named_after {
                return Ok(vec![(spec.name.clone(), self.serialized(spec, limits)?)]);
            }
        }
        sig.inputs
            .iter()
            .map(|spec| Ok((spec.name.clone(), self.column(sig, spec, limits)?)))
            .collect()
    }

    /// The one string input of a signature that declares `method`: the examples, serialized.
    pub fn serialized_inputs(
        &self,
        sig: &Signature,
        method: &str,
        limits: &DecodeLimits,
    ) -> Result<Vec<NamedTensor>, ExampleError> {
        match sig.inputs.as_slice() {
            [spec] if spec.dtype == DataType::String => {
                Ok(vec![(spec.name.clone(), self.serialized(spec, limits)?)])
            }
            _ => Err(ExampleError::NotAnExampleSignature {
                signature: sig.name.clone(),
                method: method.to_owned(),
                inputs: sig.input_names(),
            }),
        }
    }

    /// Each example serialized, with the context's features added where it lacks them.
    fn serialized(&self, spec: &TensorSpec, limits: &DecodeLimits) -> Result<Tensor, ExampleError> {
        let mut total = 0usize;
        let mut rows = Vec::with_capacity(self.examples.len());
        for example in &self.examples {
            let bytes = match &self.context {
                None => example.encode_to_vec(),
                Some(context) => {
                    let mut merged = example.clone();
                    let features = merged.features.get_or_insert_with(Features::default);
                    for (name, feature) in &context.feature {
                        features
                            .feature
                            .entry(name.clone())
                            .or_insert_with(|| feature.clone());
                    }
                    merged.encode_to_vec()
                }
            };
            total = total.saturating_add(bytes.len());
            if total > limits.max_tensor_bytes {
                return Err(too_large(spec, self.examples.len(), total, limits));
            }
            rows.push(Bytes::from(bytes));
        }
        // A shape of one entry per example cannot disagree with the row count.
        Ok(Tensor::strings(vec![rows.len()], rows)?)
    }

    /// One input built from the feature of its name in every example.
    fn column(
        &self,
        sig: &Signature,
        spec: &TensorSpec,
        limits: &DecodeLimits,
    ) -> Result<Tensor, ExampleError> {
        let element = spec.dtype.size().unwrap_or(std::mem::size_of::<Bytes>());
        if !matches!(
            spec.dtype,
            DataType::F32 | DataType::F64 | DataType::I64 | DataType::I32 | DataType::String
        ) {
            return Err(ExampleError::UnfeedableDtype {
                name: spec.name.clone(),
                dtype: spec.dtype,
                rule: RULE,
            });
        }
        let mut per_example = None;
        let mut column = Column::for_dtype(spec.dtype);
        for (i, example) in self.examples.iter().enumerate() {
            let feature =
                self.feature(example, &spec.name)
                    .ok_or_else(|| ExampleError::MissingFeature {
                        example: i,
                        feature: spec.name.clone(),
                        expected: sig.input_names(),
                    })?;
            let kind = feature
                .kind
                .as_ref()
                .ok_or_else(|| ExampleError::EmptyFeature {
                    example: i,
                    feature: spec.name.clone(),
                })?;
            let count = kind_len(kind);
            let first = *per_example.get_or_insert(count);
            if count != first {
                return Err(ExampleError::RaggedFeature {
                    feature: spec.name.clone(),
                    first,
                    example: i,
                    got: count,
                });
            }
            // Checked before the first value is copied: context features repeat for every
            // example, so a small request could otherwise ask for a large tensor.
            let bytes = self
                .examples
                .len()
                .saturating_mul(count)
                .saturating_mul(element);
            if i == 0 && bytes > limits.max_tensor_bytes {
                return Err(too_large(spec, self.examples.len(), bytes, limits));
            }
            column.push(kind, &spec.name, i)?;
        }
        let count = per_example.unwrap_or(0);
        let rows = self.examples.len();
        let shape = if spec.shape.len() == 1 {
            if count != 1 {
                return Err(ExampleError::NotScalar {
                    feature: spec.name.clone(),
                    count,
                    shape: spec.shape_text(),
                });
            }
            vec![rows]
        } else {
            vec![rows, count]
        };
        Ok(column.into_tensor(shape)?)
    }
}

fn too_large(
    spec: &TensorSpec,
    examples: usize,
    bytes: usize,
    limits: &DecodeLimits,
) -> ExampleError {
    ExampleError::TooLarge {
        feature: spec.name.clone(),
        examples,
        bytes,
        limit: limits.max_tensor_bytes,
    }
}

fn kind_len(kind: &feature::Kind) -> usize {
    match kind {
        feature::Kind::FloatList(list) => list.value.len(),
        feature::Kind::Int64List(list) => list.value.len(),
        feature::Kind::BytesList(list) => list.value.len(),
    }
}

fn kind_name(kind: &feature::Kind) -> &'static str {
    match kind {
        feature::Kind::FloatList(_) => "float_list",
        feature::Kind::Int64List(_) => "int64_list",
        feature::Kind::BytesList(_) => "bytes_list",
    }
}

/// The values of one input, gathered example by example.
enum Column {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    Strings(Vec<Bytes>),
}

impl Column {
    fn for_dtype(dtype: DataType) -> Self {
        match dtype {
            DataType::F64 => Self::F64(Vec::new()),
            DataType::I64 => Self::I64(Vec::new()),
            DataType::I32 => Self::I32(Vec::new()),
            DataType::String => Self::Strings(Vec::new()),
            _ => Self::F32(Vec::new()),
        }
    }

    fn dtype(&self) -> DataType {
        match self {
            Self::F32(_) => DataType::F32,
            Self::F64(_) => DataType::F64,
            Self::I64(_) => DataType::I64,
            Self::I32(_) => DataType::I32,
            Self::Strings(_) => DataType::String,
        }
    }

    fn push(
        &mut self,
        kind: &feature::Kind,
        name: &str,
        example: usize,
    ) -> Result<(), ExampleError> {
        use feature::Kind::{BytesList, FloatList, Int64List};
        let dtype = self.dtype();
        match (self, kind) {
            (Self::F32(out), FloatList(list)) => out.extend_from_slice(&list.value),
            // JSON has one number type: `1` in a REST example arrives as an int64_list.
            (Self::F32(out), Int64List(list)) => out.extend(list.value.iter().map(|&v| v as f32)),
            (Self::F64(out), FloatList(list)) => {
                out.extend(list.value.iter().map(|&v| f64::from(v)))
            }
            (Self::F64(out), Int64List(list)) => out.extend(list.value.iter().map(|&v| v as f64)),
            (Self::I64(out), Int64List(list)) => out.extend_from_slice(&list.value),
            (Self::I32(out), Int64List(list)) => {
                for &value in &list.value {
                    let narrow = i32::try_from(value).map_err(|_| ExampleError::OutOfRange {
                        feature: name.to_owned(),
                        value,
                        dtype,
                    })?;
                    out.push(narrow);
                }
            }
            (Self::Strings(out), BytesList(list)) => out.extend(list.value.iter().cloned()),
            (_, kind) => {
                return Err(ExampleError::WrongKind {
                    example,
                    feature: name.to_owned(),
                    got: kind_name(kind),
                    dtype,
                    rule: RULE,
                })
            }
        }
        Ok(())
    }

    fn into_tensor(self, shape: Vec<usize>) -> Result<Tensor, DecodeError> {
        match self {
            Self::F32(values) => Tensor::from_vec(shape, values),
            Self::F64(values) => Tensor::from_vec(shape, values),
            Self::I64(values) => Tensor::from_vec(shape, values),
            Self::I32(values) => Tensor::from_vec(shape, values),
            Self::Strings(values) => Tensor::strings(shape, values),
        }
    }
}

/// Runs `examples` through the signature `target` names (or the one the module documentation
/// picks for `method`), asking for the outputs `outputs` picks from it (an operation's rule,
/// checked before anything runs). Goes through [`InferService::prepare`] like every other
/// request, so the built inputs meet the same validation as a Predict's.
pub async fn run(
    infer: &InferService,
    target: ModelTarget<'_>,
    context: Option<&RequestContext>,
    examples: &Examples,
    method: &str,
    outputs: impl FnOnce(&Signature) -> Result<Vec<String>, Error>,
) -> Result<PredictionResult, Error> {
    let limits = infer.limits().clone();
    let model = infer
        .resolve_loading(target.model, target.version.clone(), context)
        .await?;
    let signature = route(model.backend.as_ref(), target.signature, method);
    let target = ModelTarget {
        signature: &signature,
        ..target
    };
    let prepared = infer
        .prepare(target, context, |sig| {
            let output_filter = outputs(sig)?;
            let declares_method = model.backend.signature_method(&sig.name) == Some(method);
            let inputs = if declares_method {
                examples.serialized_inputs(sig, method, &limits)?
            } else {
                examples.inputs(sig, &limits)?
            };
            // TF Serving's API has no priority, and no timeout but the transport's.
            Ok(Decoded {
                inputs,
                output_filter,
                ..Decoded::default()
            })
        })
        .await?;
    infer.run(prepared).await
}

/// The signature an operation of `method` calls when the request names `requested` (empty:
/// none), as the module documentation says.
fn route(backend: &dyn Backend, requested: &str, method: &str) -> String {
    if !requested.is_empty() {
        return requested.to_owned();
    }
    let signatures = backend.signatures();
    let declares = |sig: &&Signature| backend.signature_method(&sig.name) == Some(method);
    match signatures.first() {
        Some(default) if !declares(&default) => signatures
            .iter()
            .find(declares)
            .map(|sig| sig.name.clone())
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// The values of an output as one `f32` per entry, checking it holds `rows` rows of `per_row`
/// values (a 1-D output is one value per row).
pub fn float_rows(name: &str, tensor: &Tensor, rows: usize) -> Result<(usize, Vec<f32>), Error> {
    let per_row = match tensor.shape() {
        [n] if *n == rows => 1,
        [n, k] if *n == rows => *k,
        shape => {
            return Err(Error::invalid(format!(
                "output '{name}' has shape {shape:?}; for {rows} examples it must be [{rows}] or [{rows}, k]"
            )))
        }
    };
    let values = match tensor.dtype() {
        DataType::F32 => tensor.view::<f32>().map(|v| v.to_vec()),
        DataType::F64 => tensor
            .view::<f64>()
            .map(|v| v.iter().map(|&x| x as f32).collect()),
        dtype => {
            return Err(Error::invalid(format!(
                "output '{name}' has dtype {dtype}; scores and regression values must be float32 or float64"
            )))
        }
    }
    .map_err(Error::from)?;
    Ok((per_row, values))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(
            message(vec![example(&[("x", floats(&[1.0, 2.0]))])], None).contains("no feature 'n'")
        );
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
}
