//! Seldon MLServer's `model-settings.json`, the file MLServer reads beside each model's
//! artifacts, read into the one typed [`ModelConfig`] and the folder the model file is in.
//!
//! ```json
//! {
//!   "name": "mnist-svm",
//!   "implementation": "mlserver_onnx.OnnxModel",
//!   "max_batch_size": 8,
//!   "max_batch_time": 0.005,
//!   "inputs": [{ "name": "input-0", "datatype": "FP32", "shape": [-1, 64] }],
//!   "parameters": { "uri": "./mnist-svm.onnx", "version": "v0.1.0" }
//! }
//! ```
//!
//! Applied: `name` (the served name; the folder's name when empty, as MLServer does),
//! `implementation` (checked against the file: MLServer's runtimes for formats this server does
//! not run, and Python classes of the user's own, are load errors saying so unless the folder
//! holds a model file this server runs), `parameters.uri` (the model file or folder, relative
//! to the settings file's folder and confined to it), `parameters.version` (a number is the
//! version number; a name such as `v0.1.0` serves as version 1 under that name),
//! `max_batch_size` / `max_batch_time` (MLServer's adaptive batching, its time in seconds,
//! as `[batching]`), `inputs` / `outputs` (a TorchScript file's signature; any other file
//! must agree with them). Every other field the file sets is named in one line when the
//! version loads. A `config.toml` beside it wins where both say something.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::confine::{check_model_name, refuse_control_characters, ConfineError};
use super::declared::{DeclaredDim, DeclaredTensor};
use super::model_config::{MlserverExtras, ModelConfig};
use super::repo_file::{read_text_inside, RepoFileError, SETTINGS};
use super::scan::{model_file_in, parse_version, VersionFolder, FLAT_VERSION, SAVED_MODEL_FILE};
use crate::backend::Signature;
use crate::batcher::BatchSettings;

/// The file MLServer reads in each model folder.
pub const MLSERVER_SETTINGS_FILE: &str = "model-settings.json";

/// The fields of `model-settings.json` this server applies; any other is named as ignored.
const APPLIED: [&str; 7] = [
    "name",
    "implementation",
    "parameters",
    "max_batch_size",
    "max_batch_time",
    "inputs",
    "outputs",
];

/// The keys of `parameters` this server applies.
const APPLIED_PARAMETERS: [&str; 2] = ["uri", "version"];

/// MLServer's own runtimes (SeldonIO/MLServer `runtimes/`, and opendatahub-io/MLServer's
/// `mlserver_onnx`), with the kind of model file each serves.
const RUNTIMES: [(&str, Runtime); 10] = [
    ("mlserver_onnx.OnnxModel", Runtime::Onnx),
    (
        "mlserver_sklearn.SKLearnModel",
        Runtime::Other("scikit-learn"),
    ),
    ("mlserver_xgboost.XGBoostModel", Runtime::Other("XGBoost")),
    (
        "mlserver_lightgbm.LightGBMModel",
        Runtime::Other("LightGBM"),
    ),
    (
        "mlserver_catboost.CatboostModel",
        Runtime::Other("CatBoost"),
    ),
    ("mlserver_mlflow.MLflowRuntime", Runtime::Other("MLflow")),
    (
        "mlserver_huggingface.HuggingFaceRuntime",
        Runtime::Other("Hugging Face"),
    ),
    (
        "mlserver_alibi_detect.AlibiDetectRuntime",
        Runtime::Other("Alibi Detect"),
    ),
    (
        "mlserver_alibi_explain.AlibiExplainRuntime",
        Runtime::Other("Alibi Explain"),
    ),
    ("mlserver_mllib.MLlibModel", Runtime::Other("Spark MLlib")),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runtime {
    Onnx,
    /// One of MLServer's runtimes for a format this server does not run.
    Other(&'static str),
}

/// Why a `model-settings.json` was refused. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum MlserverSettingsError {
    /// Not a regular file inside the model's folder, over the cap, or unreadable.
    #[error(transparent)]
    Read(#[from] RepoFileError),
    /// Malformed JSON or a field of the wrong type; serde_json's message names the line and
    /// column.
    #[error("{path}: {message}")]
    Malformed { path: PathBuf, message: String },
    #[error("{path}: name: {source}")]
    Name {
        path: PathBuf,
        #[source]
        source: ConfineError,
    },
    #[error("{path}: parameters.uri '{uri}' {why}")]
    Uri {
        path: PathBuf,
        uri: String,
        why: &'static str,
    },
    #[error("{path}: parameters.version '{version}' {why}")]
    Version {
        path: PathBuf,
        version: String,
        why: &'static str,
    },
    /// `implementation` says what the file names to run the model with.
    #[error(
        "{path}: {implementation}, and {file} is no model file this server runs (ONNX, \
         TorchScript or a TensorFlow SavedModel): convert the model (to ONNX, say) and point \
         parameters.uri at the converted file"
    )]
    NotServed {
        path: PathBuf,
        implementation: String,
        file: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// `model-settings.json` as MLServer spells it; fields this server does not apply are found
/// in the raw value instead.
#[derive(Debug, Default, Deserialize)]
struct SettingsFile {
    #[serde(default)]
    name: String,
    implementation: Option<String>,
    parameters: Option<Parameters>,
    #[serde(default)]
    max_batch_size: i64,
    #[serde(default)]
    max_batch_time: f64,
    #[serde(default)]
    inputs: Vec<MetadataTensor>,
    #[serde(default)]
    outputs: Vec<MetadataTensor>,
}

#[derive(Debug, Default, Deserialize)]
struct Parameters {
    uri: Option<String>,
    version: Option<String>,
}

/// MLServer's `MetadataTensor` (the KServe metadata tensor).
#[derive(Debug, Deserialize)]
struct MetadataTensor {
    name: String,
    datatype: String,
    shape: Vec<i64>,
}

/// One MLServer model folder as this server serves it.
#[derive(Debug, Clone, PartialEq)]
pub struct MlserverModel {
    /// The served name.
    pub name: String,
    /// Its one version: the folder the model file is in, under the version number.
    pub version: VersionFolder,
    pub config: ModelConfig,
}

/// Reads `folder/model-settings.json` (`None` when there is none) over the folder's
/// `config.toml` / `config.pbtxt`.
pub fn read(folder: &Path) -> Result<Option<MlserverModel>, MlserverSettingsError> {
    let path = folder.join(MLSERVER_SETTINGS_FILE);
    let text = match read_text_inside(folder, Path::new(MLSERVER_SETTINGS_FILE), SETTINGS) {
        Ok(text) => text,
        Err(err) if err.is_not_found() => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    let malformed = |err: serde_json::Error| MlserverSettingsError::Malformed {
        path: path.clone(),
        message: err.to_string(),
    };
    let raw: Map<String, Value> = serde_json::from_str(&text).map_err(malformed)?;
    let file: SettingsFile = serde_json::from_str(&text).map_err(malformed)?;
    let invalid = |message: String| MlserverSettingsError::Invalid {
        path: path.clone(),
        message,
    };

    let name = if file.name.is_empty() {
        folder_name(folder)
    } else {
        file.name.clone()
    };
    check_model_name(&name).map_err(|source| MlserverSettingsError::Name {
        path: path.clone(),
        source,
    })?;
    let mut config =
        ModelConfig::load(folder).map_err(|err| invalid(format!("beside it: {err}")))?;
    let parameters = file.parameters.unwrap_or_default();
    let (version_dir, model_file) = locate(folder, &path, parameters.uri.as_deref())?;
    let runs = runnable(&version_dir, model_file.as_deref());
    let mut ignored = ignored_fields(&raw);
    let implementation = file.implementation.as_deref().filter(|i| !i.is_empty());
    let runtime = implementation.map(runtime_of);
    match (runs, implementation) {
        (None, _) => {
            let implementation = match (implementation, runtime.flatten()) {
                (None, _) => "no implementation is given".to_owned(),
                (Some(name), Some(Runtime::Onnx)) => {
                    format!("implementation {name} is MLServer's ONNX runtime")
                }
                (Some(name), Some(Runtime::Other(kind))) => format!(
                    "implementation {name} is MLServer's {kind} runtime, which this server \
                     does not have"
                ),
                (Some(name), None) => format!(
                    "implementation {name} is Python code of its own, which this server does \
                     not run"
                ),
            };
            let file = match &model_file {
                Some(file) => file.clone(),
                None => format!("{} (the folder)", parameters.uri.as_deref().unwrap_or(".")),
            };
            return Err(MlserverSettingsError::NotServed {
                path: path.clone(),
                implementation,
                file,
            });
        }
        (Some(_), Some(_)) if runtime == Some(Some(Runtime::Onnx)) => {
            // The loader then refuses a file of another format, naming both.
            config
                .platform
                .get_or_insert_with(|| "onnxruntime_onnx".into());
        }
        (Some(kind), Some(name)) => ignored.push(format!(
            "implementation ({name}: the {kind} file is served instead)"
        )),
        (Some(_), None) => {}
    }
    if config.model_filename.is_none() {
        config.model_filename = model_file;
    }

    let (version, version_name) = match parameters.version.filter(|v| !v.is_empty()) {
        None => (FLAT_VERSION, None),
        Some(text) => match version_number(&path, &text)? {
            Some(number) => (number, None),
            None => (FLAT_VERSION, Some(text)),
        },
    };
    if let Some(name) = &version_name {
        config
            .version_labels
            .entry(name.clone())
            .or_insert(FLAT_VERSION);
    }
    config.mlserver.version_name = version_name;

    if config.batching.is_none() {
        config.batching =
            batching(file.max_batch_size, file.max_batch_time, &mut ignored).map_err(invalid)?;
    }
    let inputs = declared(&file.inputs);
    let outputs = declared(&file.outputs);
    if runs == Some("TorchScript") && config.input.is_empty() && config.output.is_empty() {
        config.input = inputs;
        config.output = outputs;
    } else {
        config.mlserver.inputs = inputs;
        config.mlserver.outputs = outputs;
    }
    config.mlserver.ignored = ignored;
    config.check().map_err(invalid)?;
    Ok(Some(MlserverModel {
        name,
        version: VersionFolder {
            version,
            path: version_dir,
        },
        config,
    }))
}

/// The name `folder`'s settings give the model even when they are refused for another reason,
/// so that the refusal is reported under the name clients use; `None` when the file cannot
/// be read or its name is not a plain name.
pub fn claimed_name(folder: &Path) -> Option<String> {
    let text = read_text_inside(folder, Path::new(MLSERVER_SETTINGS_FILE), SETTINGS).ok()?;
    let name = match serde_json::from_str::<Value>(&text).ok()?.get("name") {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        _ => folder_name(folder),
    };
    check_model_name(&name).ok().map(|()| name)
}

/// The name MLServer gives a model whose settings name none: its folder's.
pub fn folder_name(folder: &Path) -> String {
    folder
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn runtime_of(implementation: &str) -> Option<Runtime> {
    RUNTIMES
        .iter()
        .find(|(name, _)| *name == implementation)
        .map(|(_, runtime)| *runtime)
}

/// The folder the model is in and its file name there (`None`: the folder itself is the
/// model, or holds it under a default name). A `uri` is relative to the settings file's
/// folder, as MLServer takes it, and must resolve (through every `..` and symlink) inside it:
/// a model folder copied from elsewhere must not reach other files on the server.
fn locate(
    folder: &Path,
    settings: &Path,
    uri: Option<&str>,
) -> Result<(PathBuf, Option<String>), MlserverSettingsError> {
    let Some(uri) = uri.filter(|uri| !uri.is_empty()) else {
        return Ok((folder.to_path_buf(), None));
    };
    let refuse = |why: &'static str| MlserverSettingsError::Uri {
        path: settings.to_path_buf(),
        uri: uri.escape_default().to_string(),
        why,
    };
    let local = uri.strip_prefix("file://").unwrap_or(uri);
    if local.contains("://") {
        return Err(refuse(
            "names remote storage: copy the model into the folder and name it relative to it",
        ));
    }
    if local.contains('\0') {
        return Err(refuse("is not a path"));
    }
    let outside = "does not name a file or folder inside the model folder";
    let root = std::fs::canonicalize(folder).map_err(|_| refuse(outside))?;
    let target = std::fs::canonicalize(folder.join(local)).map_err(|_| refuse(outside))?;
    if !target.starts_with(&root) {
        return Err(refuse(outside));
    }
    if target.is_dir() {
        return Ok((target, None));
    }
    // SavedModel's own file names its folder.
    let file_name = target.file_name().map(|n| n.to_string_lossy().into_owned());
    let parent = target.parent().map(Path::to_path_buf).unwrap_or(root);
    match file_name {
        Some(name) if name == SAVED_MODEL_FILE => Ok((parent, None)),
        Some(name) => Ok((parent, Some(name))),
        None => Err(refuse(outside)),
    }
}

/// The kind of model file this server would run there, if any.
fn runnable(dir: &Path, file: Option<&str>) -> Option<&'static str> {
    let path = match file {
        Some(file) => dir.join(file),
        None => model_file_in(dir)?,
    };
    if path.is_dir() {
        return path
            .join(SAVED_MODEL_FILE)
            .is_file()
            .then_some("TensorFlow SavedModel");
    }
    match path.extension().and_then(|e| e.to_str()) {
        Some("onnx") => Some("ONNX"),
        Some("pt" | "pth" | "torchscript") => Some("TorchScript"),
        _ => None,
    }
}

/// A number is the version number (`Some`); anything else is a version name (`None`), which
/// must be one a URL path can carry.
fn version_number(settings: &Path, text: &str) -> Result<Option<u64>, MlserverSettingsError> {
    let refuse = |why: &'static str| MlserverSettingsError::Version {
        path: settings.to_path_buf(),
        version: text.escape_default().to_string(),
        why,
    };
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return parse_version(text)
            .map(Some)
            .ok_or_else(|| refuse("is no positive version number"));
    }
    refuse_control_characters(text).map_err(|_| refuse("holds a control character"))?;
    if text.contains(['/', '?', '#', '%', ' ']) {
        return Err(refuse(
            "cannot stand in a URL path: use letters, digits, '.', '-' or '_'",
        ));
    }
    Ok(None)
}

/// MLServer batches only when both limits are set (`mlserver/batching/hooks.py`); its time
/// is in seconds.
fn batching(
    max_batch_size: i64,
    max_batch_time: f64,
    ignored: &mut Vec<String>,
) -> Result<Option<BatchSettings>, String> {
    if max_batch_size < 0 || max_batch_time < 0.0 {
        return Err("max_batch_size and max_batch_time must not be negative".into());
    }
    if max_batch_size <= 1 {
        if max_batch_time > 0.0 {
            ignored.push("max_batch_time (batching is off without max_batch_size > 1)".into());
        }
        return Ok(None);
    }
    if max_batch_time <= 0.0 {
        ignored.push("max_batch_size (MLServer batches nothing without max_batch_time)".into());
        return Ok(None);
    }
    let max_batch_size = usize::try_from(max_batch_size)
        .map_err(|_| format!("max_batch_size {max_batch_size} is too large"))?;
    // One hour bounds it: past that a typo, not a latency budget.
    if max_batch_time > 3600.0 {
        return Err(format!(
            "max_batch_time {max_batch_time} is in seconds and at most 3600"
        ));
    }
    Ok(Some(BatchSettings {
        max_batch_size,
        max_queue_delay_us: (max_batch_time * 1_000_000.0).round() as u64,
        ..BatchSettings::default()
    }))
}

fn declared(tensors: &[MetadataTensor]) -> Vec<DeclaredTensor> {
    tensors
        .iter()
        .map(|tensor| DeclaredTensor {
            name: tensor.name.clone(),
            dtype: tensor.datatype.clone(),
            shape: tensor.shape.iter().map(|&d| DeclaredDim::Size(d)).collect(),
            reshape: None,
            label_filename: None,
        })
        .collect()
}

/// Every field set that this server does not apply: top-level keys, keys of `parameters`,
/// and the `parameters` of inputs and outputs (MLServer's content types).
fn ignored_fields(raw: &Map<String, Value>) -> Vec<String> {
    let mut ignored: Vec<String> = raw
        .keys()
        .filter(|key| !APPLIED.contains(&key.as_str()))
        .cloned()
        .collect();
    if let Some(Value::Object(parameters)) = raw.get("parameters") {
        ignored.extend(
            parameters
                .keys()
                .filter(|key| !APPLIED_PARAMETERS.contains(&key.as_str()))
                .map(|key| format!("parameters.{key}")),
        );
    }
    for list in ["inputs", "outputs"] {
        if let Some(Value::Array(tensors)) = raw.get(list) {
            let with_parameters = tensors
                .iter()
                .any(|tensor| tensor.get("parameters").is_some_and(|p| !p.is_null()));
            if with_parameters {
                ignored.push(format!("{list}[].parameters"));
            }
        }
    }
    ignored
}

/// Whether the model file agrees with the `inputs` / `outputs` its settings describe: each
/// named tensor exists with that datatype and rank, and fixed sizes on both sides match (a
/// `-1` on either side matches any size).
pub fn check_signature(signatures: &[Signature], extras: &MlserverExtras) -> Result<(), String> {
    let Some(signature) = signatures.first() else {
        return Ok(());
    };
    for (kind, declared, specs) in [
        ("input", &extras.inputs, &signature.inputs),
        ("output", &extras.outputs, &signature.outputs),
    ] {
        for tensor in declared {
            let disagree = |what: String| {
                format!(
                    "{MLSERVER_SETTINGS_FILE} describes {kind} '{}' {what}",
                    tensor.name
                )
            };
            let Some(spec) = specs.iter().find(|spec| spec.name == tensor.name) else {
                let names: Vec<&str> = specs.iter().map(|spec| spec.name.as_str()).collect();
                return Err(disagree(format!(
                    "but the model file has no such {kind} (it has {})",
                    names.join(", ")
                )));
            };
            if spec.dtype.kserve_name() != tensor.dtype {
                return Err(disagree(format!(
                    "as {}, but the model file's is {}",
                    tensor.dtype,
                    spec.dtype.kserve_name()
                )));
            }
            let sizes: Vec<i64> = tensor
                .shape
                .iter()
                .map(|dim| match dim {
                    DeclaredDim::Size(size) => *size,
                    DeclaredDim::Named(_) => -1,
                })
                .collect();
            let agree = sizes.len() == spec.shape.len()
                && sizes
                    .iter()
                    .zip(&spec.shape)
                    .all(|(&want, &have)| want == -1 || have == -1 || want == have);
            if !agree {
                return Err(disagree(format!(
                    "with shape {sizes:?}, but the model file's is {:?}",
                    spec.shape
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
