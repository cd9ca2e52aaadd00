//! Loading an ensemble: no file to load, but a graph to check against the step models
//! serving now. The reconcile pass loads ensembles after every other model, so that their
//! steps are there to be checked against.

use std::path::PathBuf;
use std::sync::Arc;

use super::control::Fingerprint;
use super::lifecycle::ModelRepository;
use super::model_config::ModelConfig;
use super::snapshot::{Snapshot, VersionState};
use crate::backend::{Backend, Signature};
use crate::pipeline::{self, Ensemble, EnsembleBackend, EnsembleConfig};
use crate::version::VersionSelector;

impl ModelRepository {
    /// Checks the ensemble `model`'s steps against the step models' default signatures in
    /// the current snapshot; the face it presents (its declared signature), and the graph.
    /// Under a memory budget a step that is known but not resident counts as present (it
    /// loads on the first request that reaches it), checked against the signature its
    /// settings declare.
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
            match snapshot.resolve(name, &selector) {
                Ok(step) => step.backend.signatures().first().cloned(),
                Err(_) => self.standby_signature(&snapshot, name, version),
            }
        })
        .map_err(|err| format!("ensemble '{model}': {err}"))?;
        let backend = EnsembleBackend::new(ensemble.signature.clone(), config.max_batch_size);
        Ok((Arc::new(backend), Arc::new(ensemble)))
    }

    /// The declared signature of step model `name` where the version the step names waits
    /// to load on demand (under `--model-memory-budget`); `None` where it does not, or where
    /// its settings declare no signature to check against.
    fn standby_signature(
        &self,
        snapshot: &Snapshot,
        name: &str,
        version: Option<u64>,
    ) -> Option<Signature> {
        let record = snapshot.model(name).ok()?;
        let standing_by = record.versions.iter().any(|(v, state)| {
            version.is_none_or(|wanted| wanted == *v)
                && matches!(state, VersionState::NotResident(_))
        });
        if !standing_by {
            return None;
        }
        let config = ModelConfig::load(&self.dir.join(name)).ok()?;
        config.signature().ok().flatten()
    }

    /// What an ensemble's load depends on besides its own files: which versions of each step
    /// model are known, and in what state. Part of a failed load's fingerprint, so that an
    /// ensemble refused for a missing step is tried again once the step appears or changes.
    pub(super) fn ensemble_steps_print(&self, steps: &EnsembleConfig) -> Fingerprint {
        let snapshot = self.snapshot();
        let mut print = Fingerprint::new();
        for step in &steps.step {
            let Ok(record) = snapshot.model(&step.model) else {
                print.push((
                    PathBuf::from(format!("step {} absent", step.model)),
                    0,
                    None,
                ));
                continue;
            };
            for (version, state) in &record.versions {
                let state = match state {
                    VersionState::Available(_) => "serving",
                    VersionState::NotResident(_) => "not resident",
                    VersionState::Loading => "loading",
                    _ => "other",
                };
                let entry = format!("step {} {state}", step.model);
                print.push((PathBuf::from(entry), *version, None));
            }
        }
        print
    }
}

/// Whether a model's settings make it an ensemble, which loads after the models it runs.
pub(super) fn is_ensemble(config: &Result<ModelConfig, String>) -> bool {
    config
        .as_ref()
        .is_ok_and(|config| config.ensemble.is_some())
}
