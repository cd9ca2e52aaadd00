//! An ensemble's request: each step run on its step model like a request of its own, through
//! [`InferService::run_on`], with the ensemble request's deadline, priority and trace; the
//! ensemble's statistics count the whole, as Triton counts an ensemble's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{InferService, PredictionResult};
use crate::backend::NamedTensor;
use crate::batcher::{Priority, RunTime, ValidRequest};
use crate::error::Error;
use crate::pipeline::{schedule, Ensemble, Step, StepCall, StepRunner};
use crate::repository::{LoadedModel, VersionSelector};
use crate::trace::span::ENSEMBLE_STEP;
use crate::trace::{SpanDetail, TraceHandle};

impl InferService {
    /// Runs an ensemble's request through its steps, each on the step model's version
    /// serving when the step starts; the ensemble's own statistics count the whole.
    pub(super) async fn run_ensemble(
        &self,
        model: Arc<LoadedModel>,
        ensemble: &Ensemble,
        request: ValidRequest,
    ) -> Result<PredictionResult, Error> {
        let arrived = Instant::now();
        let signature = request.signature();
        let rows = request.inferences();
        let steps = Steps {
            service: self,
            deadline: request.deadline(),
            priority: request.priority(),
            trace: request.trace().cloned(),
            run_time: Arc::default(),
        };
        let outputs = request.outputs().to_vec();
        let targets = request.targets().to_vec();
        let ran = schedule::run(ensemble, request.into_inputs(), &outputs, &targets, &steps).await;
        match ran {
            Ok(outputs) => {
                // As Triton counts an ensemble: one execution of the request's rows, no queue
                // of its own, and its steps' runs as its compute time.
                let stats = &model.stats;
                stats.success.record(arrived.elapsed());
                stats.queue.record(Duration::ZERO);
                stats.record_execution(rows);
                let ran = steps.run_time.total();
                stats.record_compute(rows, Duration::ZERO, ran, Duration::ZERO);
                Ok(PredictionResult {
                    model,
                    signature,
                    outputs,
                })
            }
            Err(err) => {
                model.stats.fail.record(arrived.elapsed());
                Err(Error::from_pipeline(&model.name, err))
            }
        }
    }
}

/// How an ensemble request's steps run: each as a request of its own to the step model, with
/// the ensemble request's deadline and priority.
struct Steps<'s> {
    service: &'s InferService,
    deadline: Option<tokio::time::Instant>,
    priority: Priority,
    /// The ensemble request's trace, under which each step gets a span.
    trace: Option<TraceHandle>,
    /// Where every step's run adds its time.
    run_time: Arc<RunTime>,
}

impl StepRunner for Steps<'_> {
    type Error = Error;

    async fn run_step(&self, step: &Step, call: StepCall) -> Result<Vec<NamedTensor>, Error> {
        let selector = step
            .version
            .map_or(VersionSelector::Latest, VersionSelector::Specific);
        // The snapshot of now: a step model that reloaded since the ensemble did serves its
        // new version; a request already in it keeps the version it holds.
        let model = self
            .service
            .repository
            .resolve_serving(&step.model, &selector, self.deadline)
            .await?;
        let request = ValidRequest::new(
            model.backend.signatures(),
            0,
            call.inputs,
            call.outputs,
            call.targets,
        )?
        .within_batch_limit(model.backend.max_batch_size())?
        .with_deadline(self.deadline)
        .with_priority(self.priority);
        let model_name = model.name.clone();
        let step = (self.trace.as_ref())
            .map(|trace| trace.open(ENSEMBLE_STEP, SpanDetail::Step { model: model_name }));
        let request = request
            .with_trace(step.as_ref().map(|step| step.handle().clone()))
            .with_run_time(Some(self.run_time.clone()));
        Ok(self.service.run_on(model, request).await?.outputs)
    }
}
