//! TF Serving's MultiInference: several Classify and Regress tasks over the same examples.
//!
//! As in TF Serving, every task names the same model and `method_name` says which operation
//! the task is. TF Serving also wants a different signature per task, since it merges the
//! tasks into one TensorFlow run; here each task runs on its own, so one signature may serve
//! both a classify and a regress task (ONNX and TorchScript models have a single signature),
//! but not the same operation twice. The tasks run one after the other;
//! the first failure fails the request.

use std::collections::HashSet;

use crate::api::tfserving::classify::{self, CLASSIFY_METHOD};
use crate::api::tfserving::examples::Examples;
use crate::api::tfserving::regress::{self, REGRESS_METHOD};
use crate::error::Error;
use crate::infer::{InferService, ModelTarget, PredictionResult};
use crate::proto::tensorflow::serving::{
    inference_result, InferenceResult, InferenceTask, ModelSpec, MultiInferenceRequest,
    MultiInferenceResponse,
};
use crate::repository::VersionSelector;
use crate::request::RequestContext;

/// Runs every task of `request`; `selector` reads the version a task's model spec asks for
/// and `answered` names the version and signature that answered.
pub async fn run(
    infer: &InferService,
    request: MultiInferenceRequest,
    context: Option<&RequestContext>,
    selector: impl Fn(&ModelSpec) -> Result<VersionSelector, Error>,
    answered: impl Fn(&PredictionResult) -> ModelSpec,
) -> Result<MultiInferenceResponse, Error> {
    let MultiInferenceRequest { tasks, input } = request;
    check_tasks(&tasks)?;
    let examples = Examples::from_input(input)?;
    let mut results = Vec::with_capacity(tasks.len());
    for task in &tasks {
        let spec = task.model_spec.as_ref().ok_or_else(no_spec)?;
        let target = ModelTarget {
            model: &spec.name,
            version: selector(spec)?,
            signature: &spec.signature_name,
        };
        let (answer, result) = match task.method_name.as_str() {
            CLASSIFY_METHOD => {
                let (answer, result) = classify::run(infer, target, context, &examples).await?;
                (
                    answer,
                    inference_result::Result::ClassificationResult(result),
                )
            }
            // `check_tasks` allowed only these two.
            _ => {
                let (answer, result) = regress::run(infer, target, context, &examples).await?;
                (answer, inference_result::Result::RegressionResult(result))
            }
        };
        results.push(InferenceResult {
            model_spec: Some(answered(&answer)),
            result: Some(result),
        });
    }
    Ok(MultiInferenceResponse { results })
}

fn no_spec() -> Error {
    Error::invalid("a task has no model_spec")
}

/// The rules TF Serving applies before running anything.
fn check_tasks(tasks: &[InferenceTask]) -> Result<(), Error> {
    let Some(first) = tasks.first() else {
        return Err(Error::invalid("the request has no tasks"));
    };
    let model = &first.model_spec.as_ref().ok_or_else(no_spec)?.name;
    let mut signatures = HashSet::new();
    for task in tasks {
        let spec = task.model_spec.as_ref().ok_or_else(no_spec)?;
        if &spec.name != model {
            return Err(Error::invalid(format!(
                "every task must name the same model; got '{model}' and '{}'",
                spec.name
            )));
        }
        if !signatures.insert((spec.signature_name.as_str(), task.method_name.as_str())) {
            return Err(Error::invalid(format!(
                "signature '{}' is asked for {} by more than one task",
                spec.signature_name, task.method_name
            )));
        }
        if task.method_name != CLASSIFY_METHOD && task.method_name != REGRESS_METHOD {
            return Err(Error::invalid(format!(
                "task method_name '{}' is not supported; use \"{CLASSIFY_METHOD}\" or \"{REGRESS_METHOD}\"",
                task.method_name
            )));
        }
    }
    Ok(())
}
