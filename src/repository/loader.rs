//! Turning a version folder into a running backend: which runtime its files need, how many
//! instances it gets, and the runtime threads (and, for ONNX Runtime, session options) it is
//! given.

use std::sync::Arc;

use super::contract::contract;
#[cfg(feature = "torch")]
use super::declared::SIGNATURE_HELP;
use super::model_config::ModelConfig;
use super::scan::{
    self, VersionFolder, ONNX_MODEL_FILE, SAVED_MODEL_FILE, TORCH_MODEL_FILE,
    TRITON_SAVED_MODEL_DIR,
};
use crate::backend::onnx::OnnxRuntime;
use crate::backend::{Backend, BackendError, RuntimeThreads};
use crate::batcher::BatchSettings;
use crate::metrics::Metrics;

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
    /// Triton's `--strict-model-config`: a model must declare every input and output in its
    /// configuration instead of having them completed from the model file.
    pub strict_model_config: bool,
}

/// The most instances the automatic choice gives a version: past a few, more batches at once
/// only add queues' worth of memory (and, for separate ONNX sessions, copies of the weights)
/// for cores the instances must then share.
pub const MAX_AUTOMATIC_INSTANCES: usize = 4;

impl Loader {
    /// How many batches of one version of a model with `config` run at once: its
    /// `[instances] count`, else `--instances`. 0 means automatic: one instance per
    /// `intra_op_threads` cores the process may use (so that the instances together use
    /// every core once), at least 1 and at most [`MAX_AUTOMATIC_INSTANCES`].
    pub fn instances(&self, config: &ModelConfig) -> usize {
        let count = config
            .instances
            .and_then(|table| table.count)
            .unwrap_or(self.instances);
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
        if let Some(platform) = &config.platform {
            if ModelFormat::from_platform(platform).is_none() {
                return Err(load_error(format!(
                    "the configuration names platform or backend '{platform}', which is not \
                     served here: tensorport runs onnxruntime_onnx (onnxruntime), \
                     pytorch_libtorch (pytorch) and tensorflow_savedmodel (tensorflow) models"
                )));
            }
        }
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
        let onnx_only = config.runtime.onnx_keys();
        if format != ModelFormat::Onnx && !onnx_only.is_empty() {
            // Not refused: config.pbtxt's `optimization { graph }` means something to Triton's
            // other backends too, and a repository Triton serves should serve here.
            tracing::warn!(
                folder = %folder.path.display(),
                keys = %onnx_only.join(", "),
                "[runtime] settings for ONNX Runtime do not apply to a {} model; it loads \
                 without them",
                format.platform()
            );
        }
        let backend: Arc<dyn Backend> = match format {
            ModelFormat::Onnx => {
                let instances = self.instances(config);
                let shared = config
                    .instances
                    .and_then(|table| table.share_session)
                    .unwrap_or(true);
                let options = config
                    .runtime
                    .onnx_options(&folder.path, &path, config.model_filename.is_some())
                    .map_err(load_error)?;
                Arc::new(
                    self.onnx
                        .load_model(&path, threads, &options, instances, shared)?,
                )
            }
            ModelFormat::TorchScript => load_torch(&path, config, threads)?,
            ModelFormat::SavedModel => load_saved_model(&path, threads)?,
        };
        let Some(file_signature) = backend.signatures().first() else {
            return Err(load_error("the model file states no signature".into()));
        };
        // The version folder's parent is the model's folder, where labels files live.
        let model_dir = folder.path.parent().unwrap_or(&folder.path);
        let contract = contract(config, file_signature, model_dir, self.strict_model_config)
            .map_err(load_error)?;
        Ok(contract.bind(backend))
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
    // The runtime takes each declared `reshape`; the contract presents the clients' shapes.
    let signature = config
        .runtime_signature()
        .map_err(load_error)?
        .ok_or_else(|| {
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
