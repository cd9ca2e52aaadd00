//! The protocol-independent request path: resolve the model version a request names, check
//! the decoded request against its signature ([`InferService::prepare`]), run it through the
//! version's batcher ([`InferService::run`]; an ensemble's request through each of its steps,
//! every step by [`InferService::run_on`] like a request of its own), and return the
//! requested outputs.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{NamedTensor, OutputTarget, Signature};
use crate::batcher::{Priority, ValidRequest};
use crate::error::Error;
use crate::metrics::{CopyStage, Metrics};
use crate::payload_log::PayloadWriter;
use crate::repository::{LoadedModel, ModelRepository, Rollout, VersionSelector};
use crate::request::RequestContext;
use crate::shm::ShmRegistry;
use crate::tensor::DecodeLimits;
use crate::traffic::{ShadowDispatcher, ShadowInputs, Traffic};

mod cached_run;
mod ensemble;
mod payload;
mod sequence;

pub use cached_run::run_validated;
pub use sequence::{Sequence, SequenceId};

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
    /// Whether an input is a view of the client's shared memory, which the client may reuse
    /// once answered: such a request gets no shadow copy.
    pub client_memory: bool,
    /// The sequence the request says it belongs to (KServe's sequence extension), if any.
    pub sequence: Option<Sequence>,
}

/// A request that resolved to a model version and passed validation: ready to run.
pub struct Prepared {
    pub model: Arc<LoadedModel>,
    pub request: ValidRequest,
    /// The model's `[traffic]` and `[metrics]`, as its record had them.
    pub rollout: Option<Arc<Rollout>>,
    /// The inputs of a request sampled for a shadow copy.
    pub shadow: Option<ShadowInputs>,
    /// The inputs of a request sampled for the payload log.
    pub payload: Option<payload::Capture>,
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
    traffic: Traffic,
}

impl InferService {
    pub fn new(
        repository: Arc<ModelRepository>,
        limits: DecodeLimits,
        metrics: Arc<Metrics>,
        shm: Arc<ShmRegistry>,
    ) -> Self {
        Self {
            traffic: Traffic::new(repository.clone(), metrics.clone()),
            repository,
            limits,
            metrics,
            shm,
        }
    }

    /// Sets up the shadow queue (`--max-concurrent-requests`, a test's small queue).
    pub fn with_shadow(
        mut self,
        configure: impl FnOnce(ShadowDispatcher) -> ShadowDispatcher,
    ) -> Self {
        self.traffic = self.traffic.with_shadow(configure);
        self
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
        let (rollout, writer) = self.settings_of(target.model);
        let model = self
            .resolve_routed(&target, rollout.as_deref(), context, load_deadline)
            .await?;
        if let Some(context) = context {
            context.set_model(&model.name, model.version);
        }
        let trace = context.and_then(|context| context.start_trace(&model.name, model.version));
        let (signature, sig) = model.signature(target.signature)?;
        let decoded = decode(sig)?;
        sequence::admit(&model, decoded.sequence.as_ref())?;
        let client_memory = decoded.client_memory;
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
        .with_priority(decoded.priority)
        .with_trace(trace);
        if let Some(trace) = request.trace() {
            trace.decoded();
        }
        let copy = self.traffic.sample(rollout.as_deref(), &model, context);
        let shadow = self
            .traffic
            .keep_inputs(copy, client_memory, &model, &request);
        let signatures = model.backend.signatures();
        let payload = payload::capture(writer, signatures, &request, client_memory);
        Ok(Prepared {
            model,
            request,
            rollout,
            shadow,
            payload,
        })
    }

    /// The model's rollout settings and payload-log writer in the current snapshot.
    fn settings_of(&self, model: &str) -> (Option<Arc<Rollout>>, Option<Arc<PayloadWriter>>) {
        let snapshot = self.repository.snapshot();
        match snapshot.model(model) {
            Ok(record) => (record.rollout.clone(), record.payload_log.clone()),
            Err(_) => (None, None),
        }
    }

    /// The serving version for `target`: the split's choice when it names none and the model
    /// has a split, else the one it names. A split target that does not serve (yet) leaves
    /// the request to the version it names, so a weight never fails a request.
    async fn resolve_routed(
        &self,
        target: &ModelTarget<'_>,
        rollout: Option<&Rollout>,
        context: Option<&RequestContext>,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Arc<LoadedModel>, Error> {
        let routed = self.traffic.route(rollout, &target.version, context);
        if let Some(chosen) = routed {
            let resolved = self
                .repository
                .resolve_serving(target.model, &chosen, deadline);
            if let Ok(model) = resolved.await {
                self.traffic.routed(&model);
                return Ok(model);
            }
        }
        Ok(self
            .repository
            .resolve_serving(target.model, &target.version, deadline)
            .await?)
    }

    /// Runs a prepared request: through its version's batcher, or for an ensemble through
    /// each of its steps.
    pub async fn run(&self, prepared: Prepared) -> Result<PredictionResult, Error> {
        let Prepared {
            model,
            request,
            rollout,
            shadow,
            payload,
        } = prepared;
        let result = match model.ensemble.clone() {
            Some(ensemble) => self.run_ensemble(model, &ensemble, request).await,
            None => self.run_on(model, request).await,
        }?;
        let model = &result.model;
        let shadow_log = payload::offer(payload, &model.name, model.version, &result.outputs);
        self.traffic.after_run(
            rollout.as_deref(),
            &result.model,
            &result.outputs,
            shadow.map(|shadow| shadow.logged_by(shadow_log)),
        );
        Ok(result)
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
