//! TF Serving's Regress: examples in, one value per example out.
//!
//! The value is the signature's only output, or else its output named `outputs`, or else the
//! one named `scores` (TensorFlow's regression signatures call it `outputs`); float32 or
//! float64, shaped `[n]` or `[n, 1]` for `n` examples.

use super::error::TaskError;
use super::examples::{self, float_rows, Examples};
use super::methods::REGRESS_METHOD;
use crate::backend::Signature;
use crate::error::Error;
use crate::infer::{InferService, ModelTarget, PredictionResult};
use crate::proto::tensorflow::serving::{Regression, RegressionResult};
use crate::request::RequestContext;

/// Runs a Regress and reads the answer back as TF Serving's result.
pub async fn run(
    infer: &InferService,
    target: ModelTarget<'_>,
    context: Option<&RequestContext>,
    examples: &Examples,
) -> Result<(PredictionResult, RegressionResult), Error> {
    let result = examples::run(infer, target, context, examples, REGRESS_METHOD, |sig| {
        Ok(vec![output(sig)?])
    })
    .await?;
    let regressions = regressions(&result, examples.len())?;
    Ok((result, regressions))
}

/// The output a Regress reads.
fn output(sig: &Signature) -> Result<String, Error> {
    if let [only] = sig.outputs.as_slice() {
        return Ok(only.name.clone());
    }
    ["outputs", "scores"]
        .into_iter()
        .find(|name| sig.output(name).is_some())
        .map(str::to_owned)
        .ok_or_else(|| {
            TaskError::CannotRegress {
                signature: sig.name.clone(),
                count: sig.outputs.len(),
                outputs: sig.output_names(),
            }
            .into()
        })
}

fn regressions(result: &PredictionResult, rows: usize) -> Result<RegressionResult, Error> {
    let Some((name, tensor)) = result.outputs.first() else {
        return Err(TaskError::NoRegressionOutput.into());
    };
    let (per_row, values) = float_rows(name, tensor, rows)?;
    if per_row != 1 {
        return Err(TaskError::NotOneValue {
            output: name.clone(),
            per_row,
        }
        .into());
    }
    Ok(RegressionResult {
        regressions: values
            .into_iter()
            .map(|value| Regression { value })
            .collect(),
    })
}
