//! TF Serving gRPC `MultiInference`: several Classify and Regress tasks over the same examples.
//!
//! As in TF Serving, every task names the same model and `method_name` says which operation
//! the task is. TF Serving also wants a different signature per task, since it merges the
//! tasks into one TensorFlow run; here each task runs on its own, so one signature may serve
//! both a classify and a regress task (ONNX and TorchScript models have a single signature),
//! but not the same operation twice. The tasks run one after the other;
//! the first failure fails the request.

use std::collections::HashSet;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::support::{answered_spec, name_spec_model, spec_selector, TfServingGrpc};
use crate::api::tfserving::error::TaskError;
use crate::api::tfserving::examples::Examples;
use crate::api::tfserving::methods::{CLASSIFY_METHOD, REGRESS_METHOD};
use crate::api::tfserving::{classify, regress};
use crate::error::Error;
use crate::infer::{InferService, ModelTarget};
use crate::proto::tensorflow::serving::{
    inference_result, InferenceResult, InferenceTask, MultiInferenceRequest, MultiInferenceResponse,
};
use crate::request::RequestContext;

pub(super) async fn multi_inference(
    grpc: &TfServingGrpc,
    request: Request<MultiInferenceRequest>,
) -> Result<Response<MultiInferenceResponse>, Status> {
    let context = request.extensions().get::<Arc<RequestContext>>().cloned();
    let response = run(&grpc.infer, request.into_inner(), context.as_deref()).await?;
    Ok(Response::new(response))
}

/// Runs every task of `request`, each answered with the version and signature that ran it.
async fn run(
    infer: &InferService,
    request: MultiInferenceRequest,
    context: Option<&RequestContext>,
) -> Result<MultiInferenceResponse, Error> {
    let MultiInferenceRequest { tasks, input } = request;
    // Every task names the same model (`check_tasks`); the first names it for the log.
    if let Some(first) = tasks.first() {
        name_spec_model(context, first.model_spec.as_ref());
    }
    check_tasks(&tasks)?;
    let examples = Examples::from_input(input)?;
    let mut results = Vec::with_capacity(tasks.len());
    for task in &tasks {
        let spec = task.model_spec.as_ref().ok_or(TaskError::NoTaskSpec)?;
        let target = ModelTarget {
            model: &spec.name,
            version: spec_selector(spec)?,
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
            model_spec: Some(answered_spec(&answer.model, &answer.signature().name)),
            result: Some(result),
        });
    }
    Ok(MultiInferenceResponse { results })
}

/// The rules TF Serving applies before running anything.
fn check_tasks(tasks: &[InferenceTask]) -> Result<(), TaskError> {
    let Some(first) = tasks.first() else {
        return Err(TaskError::NoTasks);
    };
    let model = &first.model_spec.as_ref().ok_or(TaskError::NoTaskSpec)?.name;
    let mut signatures = HashSet::new();
    for task in tasks {
        let spec = task.model_spec.as_ref().ok_or(TaskError::NoTaskSpec)?;
        if &spec.name != model {
            return Err(TaskError::DifferentModels {
                first: model.clone(),
                other: spec.name.clone(),
            });
        }
        if !signatures.insert((spec.signature_name.as_str(), task.method_name.as_str())) {
            return Err(TaskError::RepeatedTask {
                signature: spec.signature_name.clone(),
                method: task.method_name.clone(),
            });
        }
        if task.method_name != CLASSIFY_METHOD && task.method_name != REGRESS_METHOD {
            return Err(TaskError::UnsupportedMethod(task.method_name.clone()));
        }
    }
    Ok(())
}
