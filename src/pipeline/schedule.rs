//! Running one request through a checked [`Ensemble`]: wave by wave, the steps of a wave
//! together, each step's outputs kept under their ensemble names for the steps after it.

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
///
/// The tensors so far are a short list searched by name: an ensemble has a handful, for which
/// comparing names costs less than hashing them, and nothing is allocated per tensor. A wave
/// of one step (a chain's every wave) is awaited as it is; only a wave of several is joined.
pub async fn run<R: StepRunner>(
    ensemble: &Ensemble,
    inputs: Vec<NamedTensor>,
    outputs: &[String],
    targets: &[OutputTarget],
    runner: &R,
) -> Result<Vec<NamedTensor>, PipelineError<R::Error>> {
    let (names, values): (Vec<String>, Vec<Tensor>) = inputs.into_iter().unzip();
    let mut tensors = Tensors(names.iter().map(String::as_str).zip(values).collect());
    let places = Places { outputs, targets };
    for wave in &ensemble.waves {
        match wave.as_slice() {
            [index] => {
                let Some(step) = ensemble.steps.get(*index) else {
                    continue;
                };
                let produced = run_one(*index, step, &tensors, &places, runner).await?;
                tensors.keep(*index + 1, step, produced)?;
            }
            _ => {
                let (tensors_now, places) = (&tensors, &places);
                let runs = wave.iter().filter_map(|&index| {
                    let step = ensemble.steps.get(index)?;
                    Some(async move {
                        let produced = run_one(index, step, tensors_now, places, runner).await?;
                        Ok::<_, PipelineError<R::Error>>((index + 1, step, produced))
                    })
                });
                for (number, step, produced) in try_join_all(runs).await? {
                    tensors.keep(number, step, produced)?;
                }
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

/// Runs step `index` on the tensors so far, its failure named after the step.
async fn run_one<R: StepRunner>(
    index: usize,
    step: &Step,
    tensors: &Tensors<'_>,
    places: &Places<'_>,
    runner: &R,
) -> Result<Vec<NamedTensor>, PipelineError<R::Error>> {
    let number = index + 1;
    let call =
        call(number, step, tensors, places).map_err(|output| PipelineError::MissingOutput {
            number,
            model: step.model.clone(),
            output,
        })?;
    runner
        .run_step(step, call)
        .await
        .map_err(|error| PipelineError::Step {
            number,
            model: step.model.clone(),
            error,
        })
}

/// The ensemble's tensors so far, by their ensemble names.
struct Tensors<'n>(Vec<(&'n str, Tensor)>);

impl<'n> Tensors<'n> {
    fn get(&self, name: &str) -> Option<&Tensor> {
        self.0
            .iter()
            .find_map(|(known, tensor)| (*known == name).then_some(tensor))
    }

    /// Keeps step `number`'s outputs under the ensemble names its output map gives them.
    fn keep<E>(
        &mut self,
        number: usize,
        step: &'n Step,
        mut produced: Vec<NamedTensor>,
    ) -> Result<(), PipelineError<E>> {
        for (output, tensor) in &step.outputs {
            let found = produced.iter().position(|(name, _)| name == output);
            let (_, value) = found.map(|at| produced.swap_remove(at)).ok_or_else(|| {
                PipelineError::MissingOutput {
                    number,
                    model: step.model.clone(),
                    output: output.clone(),
                }
            })?;
            self.0.push((tensor.as_str(), value));
        }
        Ok(())
    }
}

/// The places the ensemble request has for its outputs: `targets` aligned with `outputs`,
/// or empty.
struct Places<'r> {
    outputs: &'r [String],
    targets: &'r [OutputTarget],
}

impl Places<'_> {
    fn of(&self, tensor: &str) -> OutputTarget {
        let index = self.outputs.iter().position(|name| name == tensor)?;
        self.targets.get(index).cloned().flatten()
    }
}

/// The call for step `number`: its inputs from the tensors so far (reference counted, not
/// copied), and the places the request has for the ensemble outputs it produces. An `Err`
/// names an ensemble tensor that is missing (the graph check makes that impossible).
fn call(
    number: usize,
    step: &Step,
    tensors: &Tensors<'_>,
    places: &Places<'_>,
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
    let targets = if places.targets.is_empty() {
        Vec::new()
    } else {
        let targets: Vec<OutputTarget> = step
            .outputs
            .iter()
            .map(|(_, tensor)| places.of(tensor))
            .collect();
        if targets.iter().any(Option::is_some) {
            targets
        } else {
            Vec::new()
        }
    };
    Ok(StepCall {
        number,
        inputs,
        outputs,
        targets,
    })
}

#[cfg(test)]
mod tests;
