//! TF Serving's Classify: examples in, `(label, score)` pairs per example out.
//!
//! The signature must have an output named `classes` (labels: strings, or integers written
//! in decimal), one named `scores` (float32/float64), or both; each is `[n]` or `[n, k]` for
//! `n` examples and `k` classes. With only `scores`, labels are empty; with only `classes`,
//! scores are 0, as in TF Serving.

use super::error::TaskError;
use super::examples::{self, float_rows, Examples};
use super::methods::CLASSIFY_METHOD;
use crate::backend::Signature;
use crate::error::Error;
use crate::infer::{InferService, ModelTarget, PredictionResult};
use crate::proto::tensorflow::serving::{Class, ClassificationResult, Classifications};
use crate::request::RequestContext;
use crate::tensor::{DataType, Tensor};

const CLASSES: &str = "classes";
const SCORES: &str = "scores";

/// Runs a Classify and reads the answer back as TF Serving's result.
pub async fn run(
    infer: &InferService,
    target: ModelTarget<'_>,
    context: Option<&RequestContext>,
    examples: &Examples,
) -> Result<(PredictionResult, ClassificationResult), Error> {
    let result = examples::run(infer, target, context, examples, CLASSIFY_METHOD, outputs).await?;
    let classifications = classifications(&result, examples.len())?;
    Ok((result, classifications))
}

/// The outputs a Classify asks for: `classes` and `scores`, whichever the signature has.
fn outputs(sig: &Signature) -> Result<Vec<String>, Error> {
    let present: Vec<String> = [CLASSES, SCORES]
        .into_iter()
        .filter(|name| sig.output(name).is_some())
        .map(str::to_owned)
        .collect();
    if present.is_empty() {
        return Err(TaskError::CannotClassify {
            signature: sig.name.clone(),
            outputs: sig.output_names(),
        }
        .into());
    }
    Ok(present)
}

fn classifications(result: &PredictionResult, rows: usize) -> Result<ClassificationResult, Error> {
    let find = |name: &str| {
        result
            .outputs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
    };
    let scores = find(SCORES)
        .map(|tensor| float_rows(SCORES, tensor, rows))
        .transpose()?;
    let labels = find(CLASSES)
        .map(|tensor| label_rows(tensor, rows))
        .transpose()?;
    let per_row = match (&scores, &labels) {
        (Some((a, _)), Some((b, _))) if a != b => {
            return Err(TaskError::ClassCountsDisagree {
                scores: *a,
                classes: *b,
            }
            .into())
        }
        (Some((k, _)), _) | (None, Some((k, _))) => *k,
        (None, None) => 0,
    };
    let classifications = (0..rows)
        .map(|row| Classifications {
            classes: (0..per_row)
                .map(|i| {
                    let at = row * per_row + i;
                    Class {
                        label: labels
                            .as_ref()
                            .and_then(|(_, l)| l.get(at).cloned())
                            .unwrap_or_default(),
                        score: scores
                            .as_ref()
                            .and_then(|(_, s)| s.get(at).copied())
                            .unwrap_or_default(),
                    }
                })
                .collect(),
        })
        .collect();
    Ok(ClassificationResult { classifications })
}

/// The `classes` output as text labels, `per_row` per example.
fn label_rows(tensor: &Tensor, rows: usize) -> Result<(usize, Vec<String>), Error> {
    let per_row = match tensor.shape() {
        [n] if *n == rows => 1,
        [n, k] if *n == rows => *k,
        shape => {
            return Err(TaskError::LabelShape {
                shape: shape.to_vec(),
                rows,
            }
            .into())
        }
    };
    let labels = match tensor.dtype() {
        DataType::String => tensor
            .string_elements()
            .unwrap_or_default()
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect(),
        DataType::I64 => tensor.view::<i64>()?.iter().map(i64::to_string).collect(),
        DataType::I32 => tensor.view::<i32>()?.iter().map(i32::to_string).collect(),
        dtype => return Err(TaskError::LabelDtype(dtype).into()),
    };
    Ok((per_row, labels))
}
