//! A model's rollout on the request path: the split between its versions for requests that
//! name none (`split`), shadow copies of sampled requests to another version (`shadow`), and
//! the score distribution of each version (`scores`). The settings are the repository's
//! [`Rollout`], published with the model's record; [`Traffic`] holds what requests share.
//!
//! `crate::infer` calls in at three points: [`Traffic::route`] when it resolves a version,
//! [`Traffic::sample`] before a run, and [`Traffic::after_run`] once the outputs are ready.

mod headroom;
mod held;
mod scores;
mod shadow;
mod split;
mod values;

pub use held::SHADOW_QUEUE_BYTES;
pub use shadow::{ShadowCopy, ShadowDispatcher, ShadowInputs, ShadowJob, SHADOW_QUEUE};
pub use split::{choose, Draws};
pub use values::{max_abs_difference, values};

use std::sync::Arc;

use crate::backend::NamedTensor;
use crate::batcher::ValidRequest;
use crate::metrics::{Metrics, ShadowDropReason};
use crate::repository::{LoadedModel, ModelRepository, Rollout};
use crate::request::{AnswerSent, RequestContext};
use crate::version::VersionSelector;

/// What every request's rollout shares: the draws and the shadow queue.
pub struct Traffic {
    draws: Draws,
    shadow: ShadowDispatcher,
    metrics: Arc<Metrics>,
}

impl Traffic {
    pub fn new(repository: Arc<ModelRepository>, metrics: Arc<Metrics>) -> Self {
        Self {
            draws: Draws::from_clock(),
            shadow: ShadowDispatcher::new(repository, metrics.clone()),
            metrics,
        }
    }

    pub fn with_shadow(
        mut self,
        configure: impl FnOnce(ShadowDispatcher) -> ShadowDispatcher,
    ) -> Self {
        self.shadow = configure(self.shadow);
        self
    }

    /// The version a request for `selector` goes to under `rollout`'s split: `None` to
    /// resolve `selector` itself (it names a version or label, or there is no split).
    pub fn route(
        &self,
        rollout: Option<&Rollout>,
        selector: &VersionSelector,
        context: Option<&RequestContext>,
    ) -> Option<VersionSelector> {
        let split = rollout?.split.as_ref()?;
        if *selector != VersionSelector::Latest {
            return None;
        }
        let sticky = split
            .sticky_header
            .as_ref()
            .and_then(|name| context?.sticky_value(name));
        Some(choose(split, sticky, &self.draws).clone())
    }

    /// Counts a request the split sent to `model`.
    pub fn routed(&self, model: &LoadedModel) {
        self.metrics
            .traffic()
            .record_split(&model.name, model.version);
        model
            .stats
            .split_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether this request gets a shadow copy; decided before it runs, so that the copy can
    /// wait for the answer through `context`.
    pub fn sample(
        &self,
        rollout: Option<&Rollout>,
        model: &LoadedModel,
        context: Option<&RequestContext>,
    ) -> Option<ShadowCopy> {
        let shadow = rollout?.shadow.as_ref()?;
        if !self.draws.percent(shadow.percent) {
            return None;
        }
        // A copy of a request to the target itself would compare the version with itself.
        if shadow.target_version == Some(model.version) {
            return None;
        }
        Some(ShadowCopy {
            target: shadow.target.clone(),
            answer: context.map_or_else(AnswerSent::now, RequestContext::after_answer),
            memory: context.and_then(RequestContext::memory_pool),
        })
    }

    /// Keeps the inputs of a sampled request for its copy, unless one is in the client's
    /// shared memory.
    pub fn keep_inputs(
        &self,
        copy: Option<ShadowCopy>,
        client_memory: bool,
        model: &LoadedModel,
        request: &ValidRequest,
    ) -> Option<ShadowInputs> {
        let copy = copy?;
        if client_memory {
            self.shadow
                .dropped(&model.name, ShadowDropReason::SharedMemoryInput);
            return None;
        }
        Some(ShadowInputs::of(copy, model, request))
    }

    /// After a successful run: observes the scores and offers the shadow copy.
    pub fn after_run(
        &self,
        rollout: Option<&Rollout>,
        model: &LoadedModel,
        outputs: &[NamedTensor],
        shadow: Option<ShadowInputs>,
    ) {
        if let Some(rollout) = rollout {
            scores::observe(self.metrics.traffic(), rollout, model, outputs);
        }
        if let Some(shadow) = shadow {
            let job = shadow.with_answer(&model.name, outputs);
            self.shadow.offer(job, model);
        }
    }
}
