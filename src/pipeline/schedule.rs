//! Running one request through a checked [`Ensemble`]: wave by wave, the steps of a wave
//! together, each step's outputs kept under their ensemble names for the steps after it.

use std::collections::HashMap;
use std::future::Future;

use futures::future::try_join_all;

use super::graph::{Ensemble, Step};
use crate::backend::{NamedTensor, OutputTarget};
use crate::tensor::Tensor;

/// What one step is asked to do, in the step model's own names.
pub struct StepCall {
    /// The step's number in the ensemble, from 1.
    pub number: usize,
    pub inputs: Vec<NamedTensor>,
    /// The outputs to return, in this order.
    pub outputs: Vec<String>,
    /// Where to write each of `outputs` (aligned with it), or empty: the places the ensemble
    /// request has for the ensemble outputs this step produces.
    pub targets: Vec<OutputTarget>,
}

/// Runs one step on its model. The request path implements it, so that the step goes
/// through the step model's batcher like any request.
pub trait StepRunner: Sync {
    type Error: Send;
    fn run_step(
        &self,
        step: &Step,
        call: StepCall,
    ) -> impl Future<Output = Result<Vec<NamedTensor>, Self::Error>> + Send;
}

/// Why an ensemble request failed.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError<E> {
    /// A step failed; `error` is the step's own.
    #[error("step {number} (model '{model}'): {error}")]
    Step {
        number: usize,
        model: String,
        error: E,
    },
    /// A step answered without an output the graph expects of it (its model changed its
    /// signature since the ensemble was checked).
    #[error("step {number} (model '{model}') returned no output '{output}'")]
    MissingOutput {
        number: usize,
        model: String,
        output: String,
    },
}

/// Runs `inputs` (checked against the ensemble's signature) through every step and returns
/// `outputs` in that order, each written to its place in `targets` (aligned, or empty) where
/// the step model's runtime can. Dropping the future drops the steps in flight, which
/// withdraws them from their batchers.
pub async fn run<R: StepRunner>(
    ensemble: &Ensemble,
    inputs: Vec<NamedTensor>,
    outputs: &[String],
    targets: &[OutputTarget],
    runner: &R,
) -> Result<Vec<NamedTensor>, PipelineError<R::Error>> {
    let mut tensors: HashMap<String, Tensor> = inputs.into_iter().collect();
    let target_of: HashMap<&str, &OutputTarget> =
        outputs.iter().map(String::as_str).zip(targets).collect();
    for wave in &ensemble.waves {
        let calls = wave.iter().filter_map(|&index| {
            let step = ensemble.steps.get(index)?;
            Some((index, step, call(index, step, &tensors, &target_of)))
        });
        let runs = calls.map(|(index, step, call)| async move {
            let number = index + 1;
            let call = call.map_err(|output| PipelineError::MissingOutput {
                number,
                model: step.model.clone(),
                output,
            })?;
            let produced =
                runner
                    .run_step(step, call)
                    .await
                    .map_err(|error| PipelineError::Step {
                        number,
                        model: step.model.clone(),
                        error,
                    })?;
            Ok::<_, PipelineError<R::Error>>((number, step, produced))
        });
        for (number, step, produced) in try_join_all(runs).await? {
            let mut produced: HashMap<String, Tensor> = produced.into_iter().collect();
            for (output, tensor) in &step.outputs {
                let value =
                    produced
                        .remove(output)
                        .ok_or_else(|| PipelineError::MissingOutput {
                            number,
                            model: step.model.clone(),
                            output: output.clone(),
                        })?;
                tensors.insert(tensor.clone(), value);
            }
        }
    }
    outputs
        .iter()
        .map(|name| match tensors.get(name) {
            Some(tensor) => Ok((name.clone(), tensor.clone())),
            None => Err(PipelineError::MissingOutput {
                number: 0,
                model: ensemble.name.clone(),
                output: name.clone(),
            }),
        })
        .collect()
}

/// The call for step `index`: its inputs from the tensors so far (reference counted, not
/// copied), and the places the request has for the ensemble outputs it produces. An `Err`
/// names an ensemble tensor that is missing (the graph check makes that impossible).
fn call(
    index: usize,
    step: &Step,
    tensors: &HashMap<String, Tensor>,
    target_of: &HashMap<&str, &OutputTarget>,
) -> Result<StepCall, String> {
    let inputs = step
        .inputs
        .iter()
        .map(|(input, tensor)| match tensors.get(tensor) {
            Some(value) => Ok((input.clone(), value.clone())),
            None => Err(tensor.clone()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = step
        .outputs
        .iter()
        .map(|(output, _)| output.clone())
        .collect();
    let targets: Vec<OutputTarget> = step
        .outputs
        .iter()
        .map(|(_, tensor)| target_of.get(tensor.as_str()).and_then(|t| (*t).clone()))
        .collect();
    let targets = if targets.iter().any(Option::is_some) {
        targets
    } else {
        Vec::new()
    };
    Ok(StepCall {
        number: index + 1,
        inputs,
        outputs,
        targets,
    })
}
