//! The protocol-independent request path: check a decoded request against the model's
//! signature, run it off the async reactor, and return the requested outputs.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use crate::backend::{NamedTensor, OutputTarget, Signature};
use crate::batcher::{BatchRequest, Priority};
use crate::error::Error;
use crate::metrics::{CopyStage, Metrics};
use crate::repository::{LoadedModel, ModelRepository, VersionSelector};
use crate::shm::ShmRegistry;
use crate::tensor::DecodeLimits;

/// A decoded request for one model version and signature.
pub struct Prediction {
    pub model: Arc<LoadedModel>,
    /// Index into the model's signatures.
    pub signature: usize,
    pub inputs: Vec<NamedTensor>,
    /// Outputs to return, in this order; empty means all of the signature's outputs.
    pub output_filter: Vec<String>,
    /// Where to write each output of `output_filter`, if the caller has a place for it.
    pub output_targets: Vec<OutputTarget>,
    /// When the client stops waiting; the batcher drops the request unrun after it.
    pub deadline: Option<tokio::time::Instant>,
    pub priority: Priority,
}

/// The outputs of a prediction and the version that produced them.
pub struct PredictionResult {
    pub model: Arc<LoadedModel>,
    pub signature: usize,
    pub outputs: Vec<NamedTensor>,
}

impl PredictionResult {
    pub fn signature(&self) -> &Signature {
        &self.model.backend.signatures()[self.signature]
    }
}

/// Shared by every protocol adapter.
pub struct InferService {
    repository: Arc<ModelRepository>,
    limits: DecodeLimits,
    metrics: Arc<Metrics>,
    shm: Arc<ShmRegistry>,
}

impl InferService {
    pub fn new(
        repository: Arc<ModelRepository>,
        limits: DecodeLimits,
        metrics: Arc<Metrics>,
        shm: Arc<ShmRegistry>,
    ) -> Self {
        Self {
            repository,
            limits,
            metrics,
            shm,
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The metrics handle itself, for layers that outlive a borrow.
    pub fn shared_metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    pub fn shm(&self) -> &ShmRegistry {
        &self.shm
    }

    pub fn repository(&self) -> &ModelRepository {
        &self.repository
    }

    pub fn limits(&self) -> &DecodeLimits {
        &self.limits
    }

    pub fn resolve(
        &self,
        model: &str,
        version: VersionSelector,
    ) -> Result<Arc<LoadedModel>, Error> {
        if model.is_empty() {
            return Err(Error::invalid("the request names no model"));
        }
        self.repository.snapshot().resolve(model, &version)
    }

    /// Validates `request` against its signature and runs it on a blocking thread.
    pub async fn predict(&self, request: Prediction) -> Result<PredictionResult, Error> {
        let Prediction {
            model,
            signature,
            inputs,
            output_filter,
            output_targets,
            deadline,
            priority,
        } = request;
        let sig = model
            .backend
            .signatures()
            .get(signature)
            .ok_or_else(|| Error::Internal("signature index out of range".into()))?;
        check_inputs(sig, &inputs)?;
        let outputs = select_outputs(sig, output_filter)?;
        let misaligned = inputs.iter().map(|(_, t)| t.misaligned_bytes()).sum();
        self.metrics
            .record_copy(CopyStage::InputAlignment, misaligned);

        let arrived = Instant::now();
        let result = model
            .batcher
            .submit(BatchRequest {
                signature,
                inputs,
                outputs,
                deadline,
                targets: output_targets,
                priority,
            })
            .await;
        match result {
            Ok(outputs) => {
                model.stats.success.record(arrived.elapsed());
                Ok(PredictionResult {
                    model,
                    signature,
                    outputs,
                })
            }
            Err(err) => {
                model.stats.fail.record(arrived.elapsed());
                Err(err)
            }
        }
    }
}

/// Every input of the signature present once, none unknown, dtype and shape compatible.
fn check_inputs(sig: &Signature, inputs: &[NamedTensor]) -> Result<(), Error> {
    let mut seen = HashSet::new();
    for (name, tensor) in inputs {
        let spec = sig
            .input(name)
            .ok_or_else(|| Error::unknown_input(sig, name))?;
        if !seen.insert(name.as_str()) {
            return Err(Error::invalid(format!("input '{name}' is given twice")));
        }
        if tensor.dtype() != spec.dtype {
            return Err(Error::invalid(format!(
                "input '{name}' must have dtype {}, got {}",
                spec.dtype,
                tensor.dtype()
            )));
        }
        if !spec.accepts_shape(tensor.shape()) {
            return Err(Error::invalid(format!(
                "input '{name}' has shape {:?}, the signature expects {} (-1: any size)",
                tensor.shape(),
                spec.shape_text()
            )));
        }
    }
    if let Some(missing) = sig
        .inputs
        .iter()
        .find(|spec| !seen.contains(spec.name.as_str()))
    {
        return Err(Error::missing_input(sig, &missing.name));
    }
    Ok(())
}

/// The outputs to return: the filter, checked, or every output of the signature.
fn select_outputs(sig: &Signature, filter: Vec<String>) -> Result<Vec<String>, Error> {
    if filter.is_empty() {
        return Ok(sig.outputs.iter().map(|spec| spec.name.clone()).collect());
    }
    let mut seen = HashSet::new();
    for name in &filter {
        if sig.output(name).is_none() {
            return Err(Error::invalid(format!(
                "unknown output '{name}' in the output filter; the signature's outputs are: {}",
                sig.output_names()
            )));
        }
        if !seen.insert(name.as_str()) {
            return Err(Error::invalid(format!(
                "output '{name}' is requested twice"
            )));
        }
    }
    Ok(filter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::TensorSpec;
    use crate::tensor::{DataType, Tensor};

    fn sig() -> Signature {
        Signature {
            name: "serving_default".into(),
            inputs: vec![TensorSpec::new("x", DataType::F32, vec![-1, 2])],
            outputs: vec![TensorSpec::new("y", DataType::F32, vec![-1])],
        }
    }

    fn input(name: &str, shape: Vec<usize>) -> NamedTensor {
        let count = shape.iter().product();
        let tensor = Tensor::from_vec(shape, vec![0f32; count]).expect("valid tensor");
        (name.to_owned(), tensor)
    }

    #[test]
    fn accepts_matching_inputs() {
        assert!(check_inputs(&sig(), &[input("x", vec![3, 2])]).is_ok());
    }

    #[test]
    fn names_the_problem() {
        let message = |inputs: &[NamedTensor]| match check_inputs(&sig(), inputs) {
            Err(err) => err.to_string(),
            Ok(()) => String::new(),
        };
        assert!(message(&[input("z", vec![1, 2])]).contains("unknown input 'z'"));
        assert!(message(&[]).contains("missing input 'x'"));
        assert!(message(&[input("x", vec![1, 3])]).contains("shape"));
        assert!(message(&[input("x", vec![1, 2]), input("x", vec![1, 2])]).contains("twice"));
        let ints = Tensor::from_vec(vec![1, 2], vec![0i32; 2]).expect("valid tensor");
        assert!(message(&[("x".into(), ints)]).contains("dtype"));
    }

    #[test]
    fn output_filter_is_checked() {
        assert_eq!(
            select_outputs(&sig(), vec![]).ok(),
            Some(vec!["y".to_owned()])
        );
        assert!(select_outputs(&sig(), vec!["nope".into()]).is_err());
        assert!(select_outputs(&sig(), vec!["y".into(), "y".into()]).is_err());
    }
}
