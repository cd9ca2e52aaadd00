//! Checking an ensemble's steps into a graph that can run: which step produces each tensor,
//! which steps read it, and the waves of steps that can run together.

use std::collections::BTreeMap;

use super::config::{EnsembleConfig, StepConfig};
use crate::backend::{Signature, TensorSpec};
use crate::error_kind::ErrorKind;

/// Why an ensemble's steps do not make a graph that can run. Steps are numbered from 1, in
/// the order the configuration lists them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error("an ensemble needs at least one step")]
    NoSteps,
    #[error(
        "an ensemble declares its inputs and outputs (input / output, or [[input]] / [[output]])"
    )]
    NoSignature,
    #[error(
        "step {step}: model_version {version} is neither -1 (the latest) nor a version number"
    )]
    BadVersion { step: usize, version: i64 },
    #[error(
        "step {step}: model '{model}' is not serving (an ensemble loads after its step models)"
    )]
    StepModelMissing { step: usize, model: String },
    #[error("step {step} (model '{model}'): input_map names input '{input}', which the model does not have (it has: {available})")]
    UnknownStepInput {
        step: usize,
        model: String,
        input: String,
        available: String,
    },
    #[error("step {step} (model '{model}'): input '{input}' is not in input_map")]
    UnmappedStepInput {
        step: usize,
        model: String,
        input: String,
    },
    #[error("step {step} (model '{model}'): output_map names output '{output}', which the model does not have (it has: {available})")]
    UnknownStepOutput {
        step: usize,
        model: String,
        output: String,
        available: String,
    },
    #[error("tensor '{tensor}' is produced twice: by {first} and by {second}")]
    ProducedTwice {
        tensor: String,
        first: String,
        second: String,
    },
    #[error("tensor '{tensor}', read by {reader}, is never produced (neither an ensemble input nor a step's output)")]
    NeverProduced { tensor: String, reader: String },
    #[error("the steps form a cycle: steps {steps} each wait for another's output")]
    Cycle { steps: String },
    #[error("tensor '{tensor}': {producer} gives {produced}, but {reader} takes {taken}")]
    Disagree {
        tensor: String,
        producer: String,
        produced: String,
        reader: String,
        taken: String,
    },
}

impl GraphError {
    /// A configuration that does not hold together is the caller's to fix.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}

/// One checked step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub model: String,
    /// `None`: the latest serving version when the step runs.
    pub version: Option<u64>,
    /// (step model input, ensemble tensor), in the model's input order.
    pub inputs: Vec<(String, String)>,
    /// (step model output, ensemble tensor), in the model's output order.
    pub outputs: Vec<(String, String)>,
}

/// A checked ensemble: its steps, and the order in which they run.
#[derive(Debug, Clone, PartialEq)]
pub struct Ensemble {
    pub name: String,
    /// As configured (numbered from 1 in messages).
    pub steps: Vec<Step>,
    /// Indexes into `steps`: each wave's steps read only ensemble inputs and tensors of
    /// earlier waves, so they may run at the same time.
    pub waves: Vec<Vec<usize>>,
    /// What clients call: the declared inputs and outputs.
    pub signature: Signature,
}

/// Who makes a tensor.
#[derive(Clone, Copy)]
enum Producer {
    Input,
    Step(usize),
}

/// Checks `config`'s steps against `signature` (the ensemble's declared one) and the default
/// signature `step_signature` gives for each step model (`None`: not serving).
pub fn check(
    name: &str,
    config: &EnsembleConfig,
    signature: Option<Signature>,
    step_signature: impl Fn(&str, Option<u64>) -> Option<Signature>,
) -> Result<Ensemble, GraphError> {
    let signature = signature.ok_or(GraphError::NoSignature)?;
    if config.step.is_empty() {
        return Err(GraphError::NoSteps);
    }
    let mut steps = Vec::with_capacity(config.step.len());
    let mut step_signatures = Vec::with_capacity(config.step.len());
    for (index, configured) in config.step.iter().enumerate() {
        let (step, sig) = check_step(index + 1, configured, &step_signature)?;
        steps.push(step);
        step_signatures.push(sig);
    }

    let mut producers: BTreeMap<&str, (Producer, &TensorSpec)> = BTreeMap::new();
    for spec in &signature.inputs {
        producers.insert(&spec.name, (Producer::Input, spec));
    }
    for (index, step) in steps.iter().enumerate() {
        for (output, tensor) in &step.outputs {
            let Some(spec) = step_signatures[index].output(output) else {
                continue;
            };
            if let Some((first, _)) = producers.insert(tensor, (Producer::Step(index), spec)) {
                return Err(GraphError::ProducedTwice {
                    tensor: tensor.clone(),
                    first: describe(first, &steps),
                    second: describe(Producer::Step(index), &steps),
                });
            }
        }
    }

    // Every read tensor has a producer that agrees with the reader.
    for (index, step) in steps.iter().enumerate() {
        let reader = describe(Producer::Step(index), &steps);
        for (input, tensor) in &step.inputs {
            let Some(&(producer, produced)) = producers.get(tensor.as_str()) else {
                return Err(GraphError::NeverProduced {
                    tensor: tensor.clone(),
                    reader,
                });
            };
            if let Some(taken) = step_signatures[index].input(input) {
                agree(tensor, producer, produced, &reader, taken, &steps)?;
            }
        }
    }
    for spec in &signature.outputs {
        let reader = "the ensemble's output".to_owned();
        let Some(&(producer, produced)) = producers.get(spec.name.as_str()) else {
            return Err(GraphError::NeverProduced {
                tensor: spec.name.clone(),
                reader,
            });
        };
        agree(&spec.name, producer, produced, &reader, spec, &steps)?;
    }

    let waves = waves(&steps, &producers)?;
    Ok(Ensemble {
        name: name.to_owned(),
        steps,
        waves,
        signature,
    })
}

fn check_step(
    number: usize,
    configured: &StepConfig,
    step_signature: &impl Fn(&str, Option<u64>) -> Option<Signature>,
) -> Result<(Step, Signature), GraphError> {
    let version = match configured.version {
        -1 => None,
        v if v > 0 => Some(v.unsigned_abs()),
        version => {
            return Err(GraphError::BadVersion {
                step: number,
                version,
            })
        }
    };
    let model = configured.model.clone();
    let sig = step_signature(&model, version).ok_or_else(|| GraphError::StepModelMissing {
        step: number,
        model: model.clone(),
    })?;
    for input in configured.input_map.keys() {
        if sig.input(input).is_none() {
            return Err(GraphError::UnknownStepInput {
                step: number,
                model,
                input: input.clone(),
                available: sig.input_names(),
            });
        }
    }
    for output in configured.output_map.keys() {
        if sig.output(output).is_none() {
            return Err(GraphError::UnknownStepOutput {
                step: number,
                model,
                output: output.clone(),
                available: sig.output_names(),
            });
        }
    }
    let mut inputs = Vec::with_capacity(sig.inputs.len());
    for spec in &sig.inputs {
        let Some(tensor) = configured.input_map.get(&spec.name) else {
            return Err(GraphError::UnmappedStepInput {
                step: number,
                model,
                input: spec.name.clone(),
            });
        };
        inputs.push((spec.name.clone(), tensor.clone()));
    }
    // Outputs the map leaves out are not asked of the step model.
    let outputs = sig
        .outputs
        .iter()
        .filter_map(|spec| {
            let tensor = configured.output_map.get(&spec.name)?;
            Some((spec.name.clone(), tensor.clone()))
        })
        .collect();
    let step = Step {
        model,
        version,
        inputs,
        outputs,
    };
    Ok((step, sig))
}

/// Steps grouped into waves (Kahn's order): a step joins the first wave after every step
/// whose output it reads.
fn waves(
    steps: &[Step],
    producers: &BTreeMap<&str, (Producer, &TensorSpec)>,
) -> Result<Vec<Vec<usize>>, GraphError> {
    let depends_on: Vec<Vec<usize>> = steps
        .iter()
        .map(|step| {
            let mut on: Vec<usize> = step
                .inputs
                .iter()
                .filter_map(|(_, tensor)| match producers.get(tensor.as_str()) {
                    Some((Producer::Step(index), _)) => Some(*index),
                    _ => None,
                })
                .collect();
            on.sort_unstable();
            on.dedup();
            on
        })
        .collect();
    let mut wave_of: Vec<Option<usize>> = vec![None; steps.len()];
    let mut waves: Vec<Vec<usize>> = Vec::new();
    let mut placed = 0;
    while placed < steps.len() {
        let ready: Vec<usize> = (0..steps.len())
            .filter(|&index| wave_of[index].is_none())
            .filter(|&index| {
                depends_on[index]
                    .iter()
                    .all(|&on| wave_of[on].is_some_and(|wave| wave < waves.len()))
            })
            .collect();
        if ready.is_empty() {
            let steps = (0..steps.len())
                .filter(|&index| wave_of[index].is_none())
                .map(|index| (index + 1).to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(GraphError::Cycle { steps });
        }
        for &index in &ready {
            wave_of[index] = Some(waves.len());
        }
        placed += ready.len();
        waves.push(ready);
    }
    Ok(waves)
}

/// Whether what `producer` gives for `tensor` is what `reader` takes: the same dtype, the
/// same rank, and equal sizes where both fix one.
fn agree(
    tensor: &str,
    producer: Producer,
    produced: &TensorSpec,
    reader: &str,
    taken: &TensorSpec,
    steps: &[Step],
) -> Result<(), GraphError> {
    let shapes_fit = produced.any_shape
        || taken.any_shape
        || (produced.shape.len() == taken.shape.len()
            && produced
                .shape
                .iter()
                .zip(&taken.shape)
                .all(|(&a, &b)| a < 0 || b < 0 || a == b));
    if produced.dtype == taken.dtype && shapes_fit {
        return Ok(());
    }
    Err(GraphError::Disagree {
        tensor: tensor.to_owned(),
        producer: describe(producer, steps),
        produced: format!("{} {}", produced.dtype, produced.shape_text()),
        reader: reader.to_owned(),
        taken: format!("{} {}", taken.dtype, taken.shape_text()),
    })
}

fn describe(producer: Producer, steps: &[Step]) -> String {
    match producer {
        Producer::Input => "the ensemble's input".to_owned(),
        Producer::Step(index) => match steps.get(index) {
            Some(step) => format!("step {} (model '{}')", index + 1, step.model),
            None => format!("step {}", index + 1),
        },
    }
}

#[cfg(test)]
mod tests;
