//! Loading an ensemble: no file to load, but a graph to check against the step models
//! serving now. The reconcile pass loads ensembles after every other model, so that their
//! steps are there to be checked against.

use std::sync::Arc;

use super::lifecycle::ModelRepository;
use super::model_config::ModelConfig;
use crate::backend::Backend;
use crate::pipeline::{self, Ensemble, EnsembleBackend, EnsembleConfig};
use crate::version::VersionSelector;

impl ModelRepository {
    /// Checks the ensemble `model`'s steps against the step models' default signatures in
    /// the current snapshot; the face it presents (its declared signature), and the graph.
    pub(super) fn check_ensemble(
        &self,
        model: &str,
        steps: &EnsembleConfig,
        config: &ModelConfig,
    ) -> Result<(Arc<dyn Backend>, Arc<Ensemble>), String> {
        let signature = config.signature()?;
        let snapshot = self.snapshot();
        let ensemble = pipeline::check(model, steps, signature, |name, version| {
            let selector = version.map_or(VersionSelector::Latest, VersionSelector::Specific);
            let step = snapshot.resolve(name, &selector).ok()?;
            step.backend.signatures().first().cloned()
        })
        .map_err(|err| format!("ensemble '{model}': {err}"))?;
        let backend = EnsembleBackend::new(ensemble.signature.clone(), config.max_batch_size);
        Ok((Arc::new(backend), Arc::new(ensemble)))
    }
}

/// Whether a model's settings make it an ensemble, which loads after the models it runs.
pub(super) fn is_ensemble(config: &Result<ModelConfig, String>) -> bool {
    config
        .as_ref()
        .is_ok_and(|config| config.ensemble.is_some())
}
