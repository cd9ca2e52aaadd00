//! The protocol-independent request path: resolve the model version a request names, check
//! the decoded request against its signature ([`InferService::prepare`]), run it through the
//! version's batcher ([`InferService::run`]; an ensemble's request through each of its steps,
//! every step by [`InferService::run_on`] like a request of its own), and return the
//! requested outputs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{NamedTensor, OutputTarget, Signature};
use crate::batcher::{Priority, ValidRequest};
use crate::cache::KeyParts;
use crate::error::Error;
use crate::metrics::{CopyStage, Metrics};
use crate::pipeline::{schedule, Ensemble, Step, StepCall, StepRunner};
use crate::repository::{LoadedModel, ModelRepository, VersionSelector};
use crate::request::RequestContext;
use crate::shm::ShmRegistry;
use crate::tensor::DecodeLimits;

/// What a request names before its tensors are decoded.
#[derive(Debug, Clone)]
pub struct ModelTarget<'r> {
    pub model: &'r str,
    pub version: VersionSelector,
    /// The signature to call; empty for the model's default one.
    pub signature: &'r str,
}

/// A request's body decoded in the terms of the signature it calls.
#[derive(Default)]
pub struct Decoded {
    pub inputs: Vec<NamedTensor>,
    /// Outputs to return, in this order; empty means all of the signature's outputs.
    pub output_filter: Vec<String>,
    /// Where to write each output of `output_filter`, if the caller has a place for it
    /// (aligned with it, or empty).
    pub output_targets: Vec<OutputTarget>,
    pub priority: Priority,
    /// A timeout the protocol carries in the body (KServe's `timeout` parameter); the
    /// request's deadline is the earlier of it and the transport's.
    pub timeout: Option<Duration>,
}

/// A request that resolved to a model version and passed validation: ready to run.
pub struct Prepared {
    pub model: Arc<LoadedModel>,
    pub request: ValidRequest,
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

    /// The serving version `model` names, for readiness: an ensemble's only while every
    /// step model serves too.
    pub fn resolve(
        &self,
        model: &str,
        version: VersionSelector,
    ) -> Result<Arc<LoadedModel>, Error> {
        if model.is_empty() {
            return Err(Error::invalid("the request names no model"));
        }
        let snapshot = self.repository.snapshot();
        let resolved = snapshot.resolve(model, &version)?;
        // An ensemble is ready when every step model is (as Triton reports it).
        if let Some(ensemble) = &resolved.ensemble {
            for (index, step) in ensemble.steps.iter().enumerate() {
                let selector = step
                    .version
                    .map_or(VersionSelector::Latest, VersionSelector::Specific);
                if let Err(err) = snapshot.resolve(&step.model, &selector) {
                    return Err(Error::EnsembleStep {
                        ensemble: resolved.name.to_string(),
                        number: index + 1,
                        model: step.model.clone(),
                        source: Box::new(err.into()),
                    });
                }
            }
        }
        Ok(resolved)
    }

    /// The serving version a metadata or configuration request names. Under a memory budget a
    /// version that is not resident loads first, as for an inference request, and the wait
    /// ends at the request's deadline: Triton's and TF Serving's clients read a model's
    /// metadata before they infer, so answering 404 would stop them before their first request.
    pub async fn resolve_loading(
        &self,
        model: &str,
        version: VersionSelector,
        context: Option<&RequestContext>,
    ) -> Result<Arc<LoadedModel>, Error> {
        if model.is_empty() {
            return Err(Error::invalid("the request names no model"));
        }
        if let Some(context) = context {
            context.name_model(model);
        }
        let deadline = context.and_then(|context| context.deadline_within(None));
        Ok(self
            .repository
            .resolve_serving(model, &version, deadline)
            .await?)
    }

    /// The one way into a model: resolves `target` to a serving version (under a memory
    /// budget, loading it first, within the request's deadline), names it in
    /// `context`, picks the signature, lets `decode` turn the body into tensors for it (a
    /// protocol may need the signature's dtypes to read its body), and checks the result
    /// against the signature. Protocol adapters only decode and encode around this.
    pub async fn prepare(
        &self,
        target: ModelTarget<'_>,
        context: Option<&RequestContext>,
        decode: impl FnOnce(&Signature) -> Result<Decoded, Error>,
    ) -> Result<Prepared, Error> {
        self.prepare_within(target, context, None, decode).await
    }

    /// [`Self::prepare`] for a protocol that reads the body's timeout before the signature is
    /// known (KServe's `timeout` parameter): the wait for a load then ends at the request's
    /// whole deadline, the earlier of that timeout and the transport's, counted from now.
    pub async fn prepare_within(
        &self,
        target: ModelTarget<'_>,
        context: Option<&RequestContext>,
        body_timeout: Option<Duration>,
        decode: impl FnOnce(&Signature) -> Result<Decoded, Error>,
    ) -> Result<Prepared, Error> {
        if target.model.is_empty() {
            return Err(Error::invalid("the request names no model"));
        }
        if let Some(context) = context {
            context.name_model(target.model);
        }
        let load_deadline = deadline_of(context, body_timeout);
        let model = self
            .repository
            .resolve_serving(target.model, &target.version, load_deadline)
            .await?;
        if let Some(context) = context {
            context.set_model(&model.name, model.version);
        }
        let (signature, sig) = model.signature(target.signature)?;
        let decoded = decode(sig)?;
        let deadline = earlier(load_deadline, deadline_of(context, decoded.timeout));
        let request = ValidRequest::new(
            model.backend.signatures(),
            signature,
            decoded.inputs,
            decoded.output_filter,
            decoded.output_targets,
        )?
        .within_batch_limit(model.backend.max_batch_size())?
        .with_deadline(deadline)
        .with_priority(decoded.priority);
        Ok(Prepared { model, request })
    }

    /// Runs a prepared request: through its version's batcher, or for an ensemble through
    /// each of its steps.
    pub async fn run(&self, prepared: Prepared) -> Result<PredictionResult, Error> {
        let Prepared { model, request } = prepared;
        match model.ensemble.clone() {
            Some(ensemble) => self.run_ensemble(model, &ensemble, request).await,
            None => self.run_on(model, request).await,
        }
    }

    /// Runs a valid request on one model version through its batcher: what every request
    /// and every ensemble step comes down to.
    pub async fn run_on(
        &self,
        model: Arc<LoadedModel>,
        request: ValidRequest,
    ) -> Result<PredictionResult, Error> {
        if model.ensemble.is_some() {
            return Err(Error::Unimplemented(format!(
                "model '{}' is an ensemble, which does not run as a step of another",
                model.name
            )));
        }
        let signature = request.signature();
        let misaligned = request
            .inputs()
            .iter()
            .map(|(_, t)| t.misaligned_bytes())
            .sum();
        self.metrics
            .record_copy(CopyStage::InputAlignment, misaligned);

        let outputs = run_validated(&model, request).await?;
        Ok(PredictionResult {
            model,
            signature,
            outputs,
        })
    }

    /// Runs an ensemble's request through its steps, each on the step model's version
    /// serving when the step starts; the ensemble's own statistics count the whole.
    async fn run_ensemble(
        &self,
        model: Arc<LoadedModel>,
        ensemble: &Ensemble,
        request: ValidRequest,
    ) -> Result<PredictionResult, Error> {
        let arrived = Instant::now();
        let signature = request.signature();
        let steps = Steps {
            service: self,
            deadline: request.deadline(),
            priority: request.priority(),
        };
        let outputs = request.outputs().to_vec();
        let targets = request.targets().to_vec();
        let ran = schedule::run(ensemble, request.into_inputs(), &outputs, &targets, &steps).await;
        match ran {
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
                Err(Error::from_pipeline(&model.name, err))
            }
        }
    }
}

/// Runs a validated request on `model`: answered from the response cache where the model has
/// a share of it and the same request was answered before, else through its batcher (and the
/// answer stored). Every way into a model's runs goes through here, an ensemble's steps too,
/// so that each is counted and cached alike.
///
/// A request that may be cached runs on the key's copy of its inputs, never on a client's
/// shared memory directly, and returns its outputs in the runtime's buffers rather than
/// writing them into the client's regions: the client could rewrite either while the model
/// runs, and the stored answer would then not be the answer to its key. The protocol copies
/// outputs into the regions afterwards, for a hit and a miss alike.
pub async fn run_validated(
    model: &Arc<LoadedModel>,
    request: ValidRequest,
) -> Result<Vec<NamedTensor>, Error> {
    let arrived = Instant::now();
    let Some(scope) = &model.response_cache else {
        return submit(model, request, arrived).await;
    };
    let parts = KeyParts {
        model: &model.name,
        load: scope.id(),
        signature: request.signature(),
        inputs: request.inputs(),
        outputs: request.outputs(),
    };
    let Some((key, copied_inputs)) = scope.store().key(&parts) else {
        return submit(model, request, arrived).await;
    };
    if let Some(answer) = scope.store().get(&key) {
        let outputs = answer.to_vec();
        model
            .stats
            .record_cache_hit(request.inferences(), arrived.elapsed());
        return Ok(outputs);
    }
    let looked_up = arrived.elapsed();
    let outputs = submit(model, request.over_copied_inputs(copied_inputs), arrived).await?;
    let storing = Instant::now();
    scope.store().insert(scope.id(), key, &outputs);
    model.stats.cache_miss.record(looked_up + storing.elapsed());
    Ok(outputs)
}

/// Runs `request` through `model`'s batcher, counting its success or failure since `arrived`.
async fn submit(
    model: &LoadedModel,
    request: ValidRequest,
    arrived: Instant,
) -> Result<Vec<NamedTensor>, Error> {
    match model.batcher.submit(request).await {
        Ok(outputs) => {
            model.stats.success.record(arrived.elapsed());
            Ok(outputs)
        }
        Err(err) => {
            model.stats.fail.record(arrived.elapsed());
            Err(err.into())
        }
    }
}

/// How an ensemble request's steps run: each as a request of its own to the step model, with
/// the ensemble request's deadline and priority.
struct Steps<'s> {
    service: &'s InferService,
    deadline: Option<tokio::time::Instant>,
    priority: Priority,
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
        Ok(self.service.run_on(model, request).await?.outputs)
    }
}

/// The request's deadline: the earlier of the transport's (in `context`) and `timeout` from now.
fn deadline_of(
    context: Option<&RequestContext>,
    timeout: Option<Duration>,
) -> Option<tokio::time::Instant> {
    match context {
        Some(context) => context.deadline_within(timeout),
        None => timeout.and_then(|timeout| tokio::time::Instant::now().checked_add(timeout)),
    }
}

fn earlier(
    a: Option<tokio::time::Instant>,
    b: Option<tokio::time::Instant>,
) -> Option<tokio::time::Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
