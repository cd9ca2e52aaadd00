//! The model repository: which models exist, which of their versions serve, and why the
//! others do not.

mod model_config;
mod scan;

pub use model_config::{ModelConfig, ModelConfigError, MODEL_CONFIG_FILE};

pub use scan::{parse_version, scan, ModelFolder, ScanError, VersionFolder, ONNX_MODEL_FILE};

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::backend::onnx::{OnnxRuntime, OnnxThreads};
use crate::backend::{Backend, BackendError, Signature};
use crate::batcher::{BatchSettings, Batcher, BatcherHandle, Telemetry};
use crate::error::Error;
use crate::metrics::{Metrics, ModelEvent};
use crate::stats::ModelStats;

/// Turns a version folder into a running backend.
pub struct Loader {
    pub onnx: OnnxRuntime,
    pub onnx_threads: OnnxThreads,
    /// Batching for models whose config.toml has no `[batching]` section.
    pub default_batching: BatchSettings,
    pub metrics: Arc<Metrics>,
}

impl Loader {
    pub fn load(&self, folder: &VersionFolder) -> Result<Arc<dyn Backend>, BackendError> {
        let onnx = folder.path.join(ONNX_MODEL_FILE);
        if onnx.is_file() {
            return Ok(Arc::new(self.onnx.load_model(&onnx, self.onnx_threads)?));
        }
        Err(BackendError::Load {
            path: folder.path.display().to_string(),
            message: format!("no model file found (expected {ONNX_MODEL_FILE})"),
        })
    }
}

/// A model version that loaded and serves.
pub struct LoadedModel {
    pub name: String,
    pub version: u64,
    pub backend: Arc<dyn Backend>,
    /// Every request to this version goes through its batcher, which owns the runs.
    pub batcher: BatcherHandle,
    pub stats: Arc<ModelStats>,
}

impl LoadedModel {
    /// The signature `name` names, or the default one when `name` is empty.
    pub fn signature(&self, name: &str) -> Result<(usize, &Signature), Error> {
        let signatures = self.backend.signatures();
        let found = if name.is_empty() {
            signatures.first().map(|sig| (0, sig))
        } else {
            signatures
                .iter()
                .enumerate()
                .find(|(_, sig)| sig.name == name)
        };
        found.ok_or_else(|| Error::SignatureNotFound {
            model: self.name.clone(),
            signature: name.to_owned(),
            available: signatures
                .iter()
                .map(|sig| sig.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// The state of one version the repository manages.
#[derive(Clone)]
pub enum VersionRecord {
    Available(Arc<LoadedModel>),
    /// Loading failed; the message says why.
    Failed(String),
}

/// Which version a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSelector {
    Latest,
    Specific(u64),
}

/// One model and the versions the repository manages for it.
pub struct ModelRecord {
    pub name: String,
    pub versions: BTreeMap<u64, VersionRecord>,
}

impl ModelRecord {
    /// The serving model for `selector`: the newest available version, or the one named.
    pub fn resolve(&self, selector: VersionSelector) -> Result<Arc<LoadedModel>, Error> {
        match selector {
            VersionSelector::Latest => self
                .versions
                .values()
                .rev()
                .find_map(|record| match record {
                    VersionRecord::Available(model) => Some(model.clone()),
                    VersionRecord::Failed(_) => None,
                })
                .ok_or_else(|| Error::NoAvailableVersion {
                    model: self.name.clone(),
                    reason: self
                        .versions
                        .values()
                        .rev()
                        .find_map(|record| match record {
                            VersionRecord::Failed(reason) => Some(reason.clone()),
                            VersionRecord::Available(_) => None,
                        }),
                }),
            VersionSelector::Specific(version) => match self.versions.get(&version) {
                Some(VersionRecord::Available(model)) => Ok(model.clone()),
                _ => Err(Error::VersionNotFound {
                    model: self.name.clone(),
                    version,
                }),
            },
        }
    }
}

/// All models found in the model directory, loaded at start.
pub struct ModelRepository {
    models: BTreeMap<String, ModelRecord>,
}

impl ModelRepository {
    /// Scans `dir` and loads each model's latest version. A model that fails to load is
    /// recorded with its error and logged; the others serve. Must run inside a Tokio runtime:
    /// each loaded version starts its batcher task.
    pub fn load(dir: &Path, loader: &Loader) -> Result<Self, ScanError> {
        let mut models = BTreeMap::new();
        for folder in scan(dir)? {
            let mut versions = BTreeMap::new();
            match folder.latest() {
                None => {
                    tracing::warn!(model = %folder.name, "model folder has no numeric version folder; skipped")
                }
                Some(latest) => {
                    let record = match load_version(&folder, latest, loader) {
                        Ok(model) => {
                            loader
                                .metrics
                                .record_model_event(&folder.name, ModelEvent::Loaded);
                            tracing::info!(model = %folder.name, version = latest.version, "model loaded");
                            VersionRecord::Available(Arc::new(model))
                        }
                        Err(reason) => {
                            loader
                                .metrics
                                .record_model_event(&folder.name, ModelEvent::LoadFailed);
                            tracing::error!(model = %folder.name, version = latest.version, error = %reason, "model failed to load; skipped");
                            VersionRecord::Failed(reason)
                        }
                    };
                    versions.insert(latest.version, record);
                }
            }
            models.insert(
                folder.name.clone(),
                ModelRecord {
                    name: folder.name,
                    versions,
                },
            );
        }
        Ok(Self { models })
    }

    pub fn model(&self, name: &str) -> Result<&ModelRecord, Error> {
        self.models
            .get(name)
            .ok_or_else(|| Error::ModelNotFound(name.to_owned()))
    }

    pub fn resolve(
        &self,
        name: &str,
        selector: VersionSelector,
    ) -> Result<Arc<LoadedModel>, Error> {
        self.model(name)?.resolve(selector)
    }

    pub fn models(&self) -> impl Iterator<Item = &ModelRecord> {
        self.models.values()
    }
}

/// Loads one version: its settings, its backend, and the batcher in front of it.
fn load_version(
    folder: &ModelFolder,
    version: &VersionFolder,
    loader: &Loader,
) -> Result<LoadedModel, String> {
    let config = ModelConfig::load(&folder.path).map_err(|err| err.to_string())?;
    let backend = loader.load(version).map_err(|err| err.to_string())?;
    let batching = config
        .batching
        .unwrap_or_else(|| loader.default_batching.clone());
    let stats = Arc::new(ModelStats::default());
    let telemetry = Telemetry {
        stats: stats.clone(),
        metrics: loader.metrics.clone(),
        version: version.version,
    };
    let batcher = Batcher::spawn(folder.name.clone(), backend.clone(), &batching, telemetry);
    Ok(LoadedModel {
        name: folder.name.clone(),
        version: version.version,
        backend,
        batcher,
        stats,
    })
}
