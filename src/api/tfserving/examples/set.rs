//! The examples of one request, and how they feed a signature's inputs: by feature name,
//! or serialized whole (the module documentation of `examples` says which when).

use bytes::Bytes;
use prost::Message;

use super::column::{kind_len, Column, RULE};
use crate::api::tfserving::error::ExampleError;
use crate::backend::{NamedTensor, Signature, TensorSpec};
use crate::proto::tensorflow::serving::{input, Input};
use crate::proto::tensorflow::{Example, Feature, Features};
use crate::tensor::{DataType, DecodeLimits, Tensor};

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

    /// The signature's inputs, fed from the examples as the `examples` module documentation
    /// says.
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
