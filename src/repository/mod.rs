//! The model repository: which models exist, which of their versions serve, and why the
//! others do not.
//!
//! The serving state is an immutable [`Snapshot`] behind an `Arc`: a request takes the current
//! snapshot (a reference-count bump), resolves its model version there, and keeps that version
//! alive for as long as it runs. The lifecycle ([`ModelRepository`]) builds new snapshots as
//! versions load, warm up, and retire, and swaps them in atomically.

mod budget;
mod charge;
mod confine;
mod declared;
mod error;
mod lifecycle;
mod model_config;
mod residency;
mod scan;
mod startup;
pub mod tfrecord;
mod tfs_batching;
mod tfs_config;
mod trim;
mod triton_config;
mod warmup;
mod warmup_log;

pub use crate::version::{VersionError, VersionSelector};
pub use budget::{
    files_size, parse_size, peak_resident_bytes, resident_bytes, LoadMeasure, MemoryMeter,
};
pub use charge::MemoryCharge;
pub use confine::{check_model_name, ConfineError, ModelRoots, MAX_MODEL_NAME_BYTES};
pub use declared::{DeclaredDim, DeclaredTensor, RuntimeConfig, SIGNATURE_HELP};
pub use error::{RepositoryError, ResidencyError};
pub use lifecycle::{BackendDecorator, ModelRepository, ServedModel};
pub use model_config::{
    InstancesConfig, LifecycleConfig, ModelConfig, ModelConfigError, ReloadMode, VersionPolicy,
    WarmupConfig, MAX_INSTANCES, MODEL_CONFIG_FILE,
};
pub use residency::Residence;
pub use scan::{
    holds_one_model, is_flat, model_file_in, parse_version, scan_model, subfolders, ScanError,
    VersionFolder, EXPECTED_LAYOUT, FLAT_VERSION, ONNX_MODEL_FILE, SAVED_MODEL_FILE,
    TORCH_MODEL_FILE, TRITON_SAVED_MODEL_DIR,
};
pub use startup::{watch_model_config_file, ModelList, ModelSource, StartupError};
pub use tfs_batching::{TfsBatching, TfsBatchingError};
pub use tfs_config::{read_model_config_file, served_models, ModelConfigFileError};

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::backend::onnx::OnnxRuntime;
use crate::backend::{Backend, BackendError, RuntimeThreads, Signature};
use crate::batcher::{BatchSettings, BatcherHandle};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::stats::ModelStats;

/// Turns a version folder into a running backend.
pub struct Loader {
    pub onnx: OnnxRuntime,
    /// Runtime threads for models whose config.toml has no `[runtime]` section.
    pub threads: RuntimeThreads,
    /// Batching for models whose config.toml has no `[batching]` section.
    pub default_batching: BatchSettings,
    pub metrics: Arc<Metrics>,
    /// Instances for models whose config.toml has no `[instances]` section; 0: automatic.
    pub instances: usize,
    /// Requests of a version whose runs take at most this long may run on the caller's
    /// thread when nothing is queued (see `batcher::Execution`); zero: never.
    pub inline_run_max: std::time::Duration,
}

/// The most instances the automatic choice gives a version: each ONNX instance holds its own
/// copy of the weights, so memory, not cores, bounds it on large machines.
pub const MAX_AUTOMATIC_INSTANCES: usize = 4;

impl Loader {
    /// How many batches of one version of a model with `config` run at once: its
    /// `[instances] count`, else `--instances`. 0 means automatic: one instance per
    /// `intra_op_threads` cores the process may use (so that the instances together use
    /// every core once), at least 1 and at most [`MAX_AUTOMATIC_INSTANCES`].
    pub fn instances(&self, config: &ModelConfig) -> usize {
        let count = config.instances.map_or(self.instances, |table| table.count);
        if count > 0 {
            return count;
        }
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let per_instance = config.runtime.threads(self.threads).intra_op.max(1);
        (cores / per_instance).clamp(1, MAX_AUTOMATIC_INSTANCES)
    }

    /// Loads the runtime for one version folder, with its model's settings. Blocks.
    pub fn load(
        &self,
        folder: &VersionFolder,
        config: &ModelConfig,
    ) -> Result<Arc<dyn Backend>, BackendError> {
        let threads = config.runtime.threads(self.threads);
        let load_error = |message: String| BackendError::load(&folder.path, message);
        let (format, path) = locate(&folder.path, config).map_err(load_error)?;
        if let Some(platform) = &config.platform {
            if platform != format.platform() {
                return Err(load_error(format!(
                    "the configuration names platform {platform}, but the model file is \
                     {} ({})",
                    format.platform(),
                    path.file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default()
                )));
            }
        }
        match format {
            ModelFormat::Onnx => {
                let instances = self.instances(config);
                Ok(Arc::new(self.onnx.load_model(&path, threads, instances)?))
            }
            ModelFormat::TorchScript => load_torch(&path, config, threads),
            ModelFormat::SavedModel => load_saved_model(&path, threads),
        }
    }
}

/// The kinds of model file a version folder may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelFormat {
    Onnx,
    TorchScript,
    SavedModel,
}

impl ModelFormat {
    /// The platform name Triton uses for it.
    fn platform(self) -> &'static str {
        match self {
            Self::Onnx => "onnxruntime_onnx",
            Self::TorchScript => "pytorch_libtorch",
            Self::SavedModel => "tensorflow_savedmodel",
        }
    }

    fn from_platform(platform: &str) -> Option<Self> {
        [Self::Onnx, Self::TorchScript, Self::SavedModel]
            .into_iter()
            .find(|format| format.platform() == platform)
    }
}

/// Finds the model in a version folder: the configured `model_filename`, else the default
/// names (`model.onnx`, `model.pt`, `saved_model.pb`, or Triton's `model.savedmodel/`).
fn locate(
    folder: &std::path::Path,
    config: &ModelConfig,
) -> Result<(ModelFormat, std::path::PathBuf), String> {
    let is_saved_model = |dir: &std::path::Path| dir.join(SAVED_MODEL_FILE).is_file();
    if let Some(name) = &config.model_filename {
        let path = folder.join(name);
        if path.is_dir() {
            return if is_saved_model(&path) {
                Ok((ModelFormat::SavedModel, path))
            } else {
                Err(format!("{name} is a folder without {SAVED_MODEL_FILE}"))
            };
        }
        if !path.is_file() {
            return Err(format!(
                "the configured model file {name} is not in the version folder"
            ));
        }
        let by_extension = match path.extension().and_then(|e| e.to_str()) {
            Some("onnx") => Some(ModelFormat::Onnx),
            Some("pt" | "pth" | "torchscript") => Some(ModelFormat::TorchScript),
            _ => None,
        };
        let format = by_extension
            .or_else(|| {
                config
                    .platform
                    .as_deref()
                    .and_then(ModelFormat::from_platform)
            })
            .ok_or_else(|| {
                format!(
                    "cannot tell the format of {name} from its name: set platform \
                     (onnxruntime_onnx or pytorch_libtorch)"
                )
            })?;
        return Ok((format, path));
    }
    let onnx = folder.join(ONNX_MODEL_FILE);
    if onnx.is_file() {
        return Ok((ModelFormat::Onnx, onnx));
    }
    let torch = folder.join(TORCH_MODEL_FILE);
    if torch.is_file() {
        return Ok((ModelFormat::TorchScript, torch));
    }
    if is_saved_model(folder) {
        return Ok((ModelFormat::SavedModel, folder.to_path_buf()));
    }
    let triton_saved_model = folder.join(TRITON_SAVED_MODEL_DIR);
    if is_saved_model(&triton_saved_model) {
        return Ok((ModelFormat::SavedModel, triton_saved_model));
    }
    // One model file under another name (a KServe storage URI naming the file, say).
    if let Some(path) = scan::model_file_in(folder) {
        let format = match path.extension().and_then(|e| e.to_str()) {
            Some("onnx") => ModelFormat::Onnx,
            _ => ModelFormat::TorchScript,
        };
        return Ok((format, path));
    }
    Err(format!(
        "no model file found (expected {ONNX_MODEL_FILE}, {TORCH_MODEL_FILE}, \
         {SAVED_MODEL_FILE} or {TRITON_SAVED_MODEL_DIR}/, one file ending in .onnx or .pt, or \
         the file model_filename names)"
    ))
}

#[cfg(feature = "torch")]
fn load_torch(
    path: &std::path::Path,
    config: &ModelConfig,
    threads: RuntimeThreads,
) -> Result<Arc<dyn Backend>, BackendError> {
    let load_error = |message: String| BackendError::load(path, message);
    let signature = config.signature().map_err(load_error)?.ok_or_else(|| {
        load_error(format!(
            "a TorchScript file has no signature: {SIGNATURE_HELP}"
        ))
    })?;
    Ok(Arc::new(crate::backend::torch::TorchModel::load(
        path, signature, threads,
    )?))
}

#[cfg(not(feature = "torch"))]
fn load_torch(
    path: &std::path::Path,
    _config: &ModelConfig,
    _threads: RuntimeThreads,
) -> Result<Arc<dyn Backend>, BackendError> {
    Err(BackendError::load(
        path,
        "this build serves no TorchScript: build with `--features torch` \
         (`FEATURES=torch make serve`)"
            .into(),
    ))
}

#[cfg(feature = "tensorflow")]
fn load_saved_model(
    dir: &std::path::Path,
    threads: RuntimeThreads,
) -> Result<Arc<dyn Backend>, BackendError> {
    Ok(Arc::new(crate::backend::tf::TfModel::load(dir, threads)?))
}

#[cfg(not(feature = "tensorflow"))]
fn load_saved_model(
    dir: &std::path::Path,
    _threads: RuntimeThreads,
) -> Result<Arc<dyn Backend>, BackendError> {
    Err(BackendError::load(
        dir,
        "this build serves no TensorFlow SavedModels: build with \
         `--features tensorflow` (`FEATURES=tensorflow make serve`)"
            .into(),
    ))
}

/// A model version that loaded, warmed up, and serves.
pub struct LoadedModel {
    /// Shared with each request's context and metrics labels, which name the version that
    /// answered without copying the name.
    pub name: Arc<str>,
    pub version: u64,
    /// Tells the lifecycle, when the last holder (the batcher included) drops it, that the
    /// version's session is gone (see `charge::Charged`).
    pub backend: Arc<dyn Backend>,
    /// Every request to this version goes through its batcher, which owns the runs. When the
    /// version retires and its last request finishes, dropping the handle lets the batcher
    /// drain its queue and stop.
    pub batcher: BatcherHandle,
    pub stats: Arc<ModelStats>,
    /// The memory it is charged against `--model-memory-budget`: its load, plus what its
    /// runtime has grown by since (see `charge`).
    pub memory: Arc<MemoryCharge>,
    /// `[lifecycle] pinned`: never evicted.
    pub pinned: bool,
    /// When it last served a request, in the repository's ticks: the eviction order.
    pub last_used: std::sync::atomic::AtomicU64,
}

impl LoadedModel {
    /// The bytes it is charged now.
    pub fn memory_bytes(&self) -> u64 {
        self.memory.bytes()
    }

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
            model: self.name.to_string(),
            signature: name.to_owned(),
            available: signatures
                .iter()
                .map(|sig| sig.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// Where one version is in its life, as TF Serving's status and Triton's index report it.
#[derive(Clone)]
pub enum VersionState {
    /// Being loaded and warmed up; not serving yet.
    Loading,
    Available(Arc<LoadedModel>),
    /// Retiring: no new requests; requests already running finish.
    Unloading,
    /// Known, not in memory: loads on its first request (`--model-memory-budget`).
    NotResident(Residence),
    /// Not serving: unloaded (`error` is `None`) or failed to load or warm up.
    End {
        error: Option<String>,
    },
}

/// One model and the versions the repository manages for it.
#[derive(Clone)]
pub struct ModelRecord {
    pub name: String,
    pub versions: BTreeMap<u64, VersionState>,
    pub labels: BTreeMap<String, u64>,
}

impl ModelRecord {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            versions: BTreeMap::new(),
            labels: BTreeMap::new(),
        }
    }

    /// The serving model for `selector`: the newest available version, the one named, or the
    /// one a label points to.
    pub fn resolve(&self, selector: &VersionSelector) -> Result<Arc<LoadedModel>, Error> {
        let version = match selector {
            VersionSelector::Latest => return self.latest(),
            VersionSelector::Specific(version) => *version,
            VersionSelector::Label(label) => {
                *self
                    .labels
                    .get(label)
                    .ok_or_else(|| RepositoryError::UnknownLabel {
                        model: self.name.clone(),
                        label: label.clone(),
                        labels: self.labels.keys().cloned().collect(),
                    })?
            }
        };
        match self.versions.get(&version) {
            Some(VersionState::Available(model)) => Ok(model.clone()),
            _ => Err(Error::VersionNotFound {
                model: self.name.clone(),
                version,
            }),
        }
    }

    /// The version number `selector` stands for in this model, without requiring it to be
    /// available: `None` for the latest (every version, in status listings).
    pub fn version_of(&self, selector: &VersionSelector) -> Result<Option<u64>, Error> {
        match selector {
            VersionSelector::Latest => Ok(None),
            VersionSelector::Specific(version) => Ok(Some(*version)),
            label @ VersionSelector::Label(_) => Ok(Some(self.resolve(label)?.version)),
        }
    }

    /// Whether `version` of this model is one `selector` picks (every version for latest).
    pub fn selects(&self, selector: &VersionSelector, version: u64) -> bool {
        match selector {
            VersionSelector::Latest => true,
            VersionSelector::Specific(want) => *want == version,
            VersionSelector::Label(label) => self.labels.get(label) == Some(&version),
        }
    }

    /// The newest available version.
    pub fn latest(&self) -> Result<Arc<LoadedModel>, Error> {
        self.versions
            .values()
            .rev()
            .find_map(|state| match state {
                VersionState::Available(model) => Some(model.clone()),
                _ => None,
            })
            .ok_or_else(|| Error::NoAvailableVersion {
                model: self.name.clone(),
                reason: self.versions.values().rev().find_map(|state| match state {
                    VersionState::End { error } => error.clone(),
                    VersionState::Loading => Some("a version is still loading".to_owned()),
                    VersionState::NotResident(residence) => Some(format!(
                        "the newest version is not in memory ({}); an inference or metadata request loads it",
                        residence.reason()
                    )),
                    _ => None,
                }),
            })
    }

    /// Whether any version serves.
    pub fn is_available(&self) -> bool {
        self.versions
            .values()
            .any(|state| matches!(state, VersionState::Available(_)))
    }
}

/// The serving state at one moment.
#[derive(Clone, Default)]
pub struct Snapshot {
    models: BTreeMap<String, ModelRecord>,
}

impl Snapshot {
    /// The model `name`. A name with a control character is refused as a bad name rather than
    /// reported missing: no model has one, and the message must not carry it raw.
    pub fn model(&self, name: &str) -> Result<&ModelRecord, Error> {
        self.models
            .get(name)
            .ok_or_else(|| match confine::refuse_control_characters(name) {
                Err(refused) => Error::from(refused),
                Ok(()) => Error::ModelNotFound(name.to_owned()),
            })
    }

    pub fn resolve(
        &self,
        name: &str,
        selector: &VersionSelector,
    ) -> Result<Arc<LoadedModel>, Error> {
        self.model(name)?.resolve(selector)
    }

    pub fn models(&self) -> impl Iterator<Item = &ModelRecord> {
        self.models.values()
    }
}
