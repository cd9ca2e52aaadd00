//! `DIR/<model>/config.toml`: per-model settings.
//!
//! ```toml
//! [batching]                  # dynamic batching (off unless set here or by server flags)
//! max_batch_size = 32
//! max_queue_delay_us = 500
//!
//! [version_policy]            # one of: latest = N (default 1), all = true, specific = [..]
//! latest = 2
//!
//! [version_labels]            # names clients may use instead of numbers
//! stable = 1
//! canary = 2
//!
//! [warmup]                    # requests run before a version serves
//! requests = 3
//! batch_size = 4
//! shapes = { features = [4, 16] }
//!
//! [runtime]                   # threads of the model's runtime (default: the server flags)
//! intra_op_threads = 2
//!
//! [instances]                 # batches of one version that run at once (default:
//! count = 2                   # --instances; 0: automatic, see `Loader::instances`)
//!
//! [lifecycle]                 # with --model-memory-budget: keep this model resident
//! pinned = true               # (loaded at start, never evicted); reload = "unload-first"
//! reload = "side-by-side"     # drops the old version before the new one loads
//!
//! [[input]]                   # the signature, for formats whose files carry none
//! name = "features"           # (TorchScript); see `declared`
//! dtype = "FP32"
//! shape = ["batch", 16]
//! ```
//!
//! Top-level keys: `model_filename = "ranker.onnx"` (the file looked for in each version
//! folder, instead of `model.onnx`, `model.pt` or `saved_model.pb`) and `platform`.
//!
//! A Triton `config.pbtxt` in the same folder is read too (see [`super::triton_config`]);
//! where both set something, `config.toml` wins, section by section (`[batching]`,
//! `[version_policy]`, `[instances]`, `[[input]]`/`[[output]]` as a whole, each top-level key).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::declared::{self, DeclaredTensor, RuntimeConfig};
use super::triton_config::{TritonConfig, TRITON_CONFIG_FILE};
use crate::backend::Signature;
use crate::batcher::BatchSettings;

/// The name of the optional per-model settings file.
pub const MODEL_CONFIG_FILE: &str = "config.toml";

/// Settings of one model. Absent sections take the server-wide defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Dynamic batching (`[batching]`); off unless the model or the server enables it.
    pub batching: Option<BatchSettings>,
    #[serde(default)]
    pub version_policy: VersionPolicyTable,
    #[serde(default)]
    pub version_labels: BTreeMap<String, u64>,
    pub warmup: Option<WarmupConfig>,
    #[serde(default)]
    pub runtime: RuntimeConfig,
    /// `[instances]`: how many batches of one version may run at once.
    pub instances: Option<InstancesConfig>,
    /// `[lifecycle]`: residency under a memory budget, and how a new version replaces the old.
    #[serde(default)]
    pub lifecycle: LifecycleConfig,
    /// `[[input]]` tables: the declared signature's inputs, in the order the model takes them.
    #[serde(default)]
    pub input: Vec<DeclaredTensor>,
    /// `[[output]]` tables: its outputs, in the order the model returns them.
    #[serde(default)]
    pub output: Vec<DeclaredTensor>,
    /// The model file in each version folder, when it is not the default name.
    pub model_filename: Option<String>,
    /// The platform the model is for, in Triton's spelling (`onnxruntime_onnx`,
    /// `pytorch_libtorch`, `tensorflow_savedmodel`); checked against the file found.
    pub platform: Option<String>,
    /// Settings found but not applied (from `config.pbtxt`), to be logged when the model
    /// loads.
    #[serde(skip)]
    pub ignored: Vec<String>,
}

/// The most instances a version may have: each ONNX instance is a session with its own copy of
/// the weights, so a typo of a few zeros would exhaust memory instead of failing the load.
pub const MAX_INSTANCES: usize = 64;

/// `[instances]`, Triton's `instance_group { count }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstancesConfig {
    /// Instances of each loaded version; 0 picks automatically.
    pub count: usize,
}

/// `[lifecycle]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleConfig {
    /// Under `--model-memory-budget`: loaded at start and never evicted.
    #[serde(default)]
    pub pinned: bool,
    #[serde(default)]
    pub reload: ReloadMode,
}

/// How a new version of a model replaces the one serving.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReloadMode {
    /// Load and warm up the new version while the old one serves, then swap: no gap, but
    /// both versions are in memory for a while.
    #[default]
    SideBySide,
    /// Drain and drop the old version first, then load the new one: the model's memory never
    /// doubles, and its requests get UNAVAILABLE until the new version serves.
    UnloadFirst,
}

/// `[version_policy]` as written; [`ModelConfig::policy`] checks it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionPolicyTable {
    pub latest: Option<usize>,
    pub all: Option<bool>,
    pub specific: Option<Vec<u64>>,
}

/// Which versions on disk a model serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionPolicy {
    /// The N highest versions.
    Latest(usize),
    All,
    Specific(Vec<u64>),
}

impl Default for VersionPolicy {
    fn default() -> Self {
        Self::Latest(1)
    }
}

impl VersionPolicy {
    /// The versions to serve out of `on_disk` (ascending).
    pub fn aspired(&self, on_disk: &[u64]) -> Vec<u64> {
        match self {
            Self::Latest(n) => on_disk.iter().rev().take(*n).rev().copied().collect(),
            Self::All => on_disk.to_vec(),
            Self::Specific(wanted) => on_disk
                .iter()
                .filter(|v| wanted.contains(v))
                .copied()
                .collect(),
        }
    }
}

/// `[warmup]`: generated requests a version runs before it serves, so its first real request
/// does not pay for lazy initialisation.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmupConfig {
    /// How many requests to run (0 disables warmup).
    #[serde(default = "one")]
    pub requests: usize,
    /// The size given to dynamic first dimensions.
    #[serde(default = "one")]
    pub batch_size: usize,
    /// Full shapes for inputs whose other dimensions are dynamic.
    #[serde(default)]
    pub shapes: BTreeMap<String, Vec<usize>>,
}

fn one() -> usize {
    1
}

/// Why a model's settings file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ModelConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl ModelConfig {
    /// Reads `model_dir/config.pbtxt` and `model_dir/config.toml` (which wins where both
    /// set something); a model with neither gets the defaults.
    pub fn load(model_dir: &Path) -> Result<Self, ModelConfigError> {
        let triton = Self::load_triton(model_dir)?;
        let own = Self::load_toml(model_dir)?;
        let config = match triton {
            Some(triton) => own.over(triton),
            None => own,
        };
        let shown = model_dir.display().to_string();
        config
            .check()
            .map_err(|message| ModelConfigError::Invalid {
                path: shown,
                message,
            })?;
        Ok(config)
    }

    fn load_triton(model_dir: &Path) -> Result<Option<TritonConfig>, ModelConfigError> {
        let path = model_dir.join(TRITON_CONFIG_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(ModelConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })
            }
        };
        let model = model_dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        TritonConfig::parse(&model, &text)
            .map(Some)
            .map_err(|err| ModelConfigError::Invalid {
                path: path.display().to_string(),
                message: err.to_string(),
            })
    }

    /// These settings (from config.toml) over those of a `config.pbtxt`.
    fn over(self, triton: TritonConfig) -> Self {
        let base = triton.config;
        let table_set = |t: &VersionPolicyTable| *t != VersionPolicyTable::default();
        let (input, output) = if self.input.is_empty() && self.output.is_empty() {
            (base.input, base.output)
        } else {
            (self.input, self.output)
        };
        Self {
            batching: self.batching.or(base.batching),
            version_policy: if table_set(&self.version_policy) {
                self.version_policy
            } else {
                base.version_policy
            },
            version_labels: self.version_labels,
            warmup: self.warmup,
            runtime: self.runtime,
            input,
            output,
            instances: self.instances.or(base.instances),
            lifecycle: self.lifecycle,
            model_filename: self.model_filename.or(base.model_filename),
            platform: self.platform.or(base.platform),
            ignored: triton.ignored,
        }
    }

    /// Checks what no single file can: the sections together.
    fn check(&self) -> Result<(), String> {
        if let Some(batching) = &self.batching {
            batching
                .validate()
                .map_err(|err| format!("[batching]: {err}"))?;
        }
        self.policy()?;
        self.signature()?;
        if let Some((label, _)) = self.version_labels.iter().find(|(_, &v)| v == 0) {
            return Err(format!(
                "[version_labels]: label '{label}' must name a positive version"
            ));
        }
        if let Some(name) = &self.model_filename {
            if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                return Err(format!(
                    "model_filename '{name}' must be a file name inside the version folder"
                ));
            }
        }
        if let Some(InstancesConfig { count }) = self.instances {
            if count > MAX_INSTANCES {
                return Err(format!(
                    "[instances]: count must be at most {MAX_INSTANCES}, got {count}"
                ));
            }
        }
        Ok(())
    }

    fn load_toml(model_dir: &Path) -> Result<Self, ModelConfigError> {
        let path = model_dir.join(MODEL_CONFIG_FILE);
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(ModelConfigError::Read {
                    path: shown,
                    source,
                })
            }
        };
        let invalid = |message: String| ModelConfigError::Invalid {
            path: shown.clone(),
            message,
        };
        toml::from_str(&text).map_err(|err| invalid(err.message().to_owned()))
    }

    /// The signature `[[input]]` / `[[output]]` declare, if they do.
    pub fn signature(&self) -> Result<Option<Signature>, String> {
        declared::signature(&self.input, &self.output)
    }

    /// The version policy, refusing a table that names none or several.
    pub fn policy(&self) -> Result<VersionPolicy, String> {
        let table = &self.version_policy;
        match (table.latest, table.all, &table.specific) {
            (None, None, None) => Ok(VersionPolicy::default()),
            (Some(0), None, None) => Err("[version_policy]: latest must be at least 1".into()),
            (Some(n), None, None) => Ok(VersionPolicy::Latest(n)),
            (None, Some(true), None) => Ok(VersionPolicy::All),
            (None, Some(false), None) => Ok(VersionPolicy::default()),
            (None, None, Some(list)) if !list.is_empty() => {
                Ok(VersionPolicy::Specific(list.clone()))
            }
            (None, None, Some(_)) => Err("[version_policy]: specific must list versions".into()),
            _ => Err("[version_policy]: give one of latest, all or specific".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_config(text: &str) -> Result<ModelConfig, String> {
        let dir = std::env::temp_dir().join(format!(
            "tensorport-model-config-{}-{}",
            std::process::id(),
            text.len()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join(MODEL_CONFIG_FILE), text).map_err(|e| e.to_string())?;
        let result = ModelConfig::load(&dir).map_err(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    #[test]
    fn a_model_without_settings_gets_defaults() -> Result<(), ModelConfigError> {
        let config = ModelConfig::load(Path::new("/nonexistent-model-folder"))?;
        assert_eq!(config, ModelConfig::default());
        assert_eq!(config.policy(), Ok(VersionPolicy::Latest(1)));
        Ok(())
    }

    #[test]
    fn reads_every_section() -> Result<(), String> {
        let config = with_config(
            "[batching]\nmax_batch_size = 32\nmax_queue_delay_us = 500\n\
             [version_policy]\nspecific = [1, 3]\n\
             [version_labels]\nstable = 1\n\
             [warmup]\nrequests = 2\nshapes = { x = [1, 4] }\n\
             [instances]\ncount = 3\n\
             [lifecycle]\npinned = true\nreload = \"unload-first\"\n",
        )?;
        assert_eq!(config.instances, Some(InstancesConfig { count: 3 }));
        assert_eq!(
            config.lifecycle,
            LifecycleConfig {
                pinned: true,
                reload: ReloadMode::UnloadFirst
            }
        );
        assert_eq!(config.batching.as_ref().map(|b| b.max_batch_size), Some(32));
        assert_eq!(config.policy(), Ok(VersionPolicy::Specific(vec![1, 3])));
        assert_eq!(config.version_labels.get("stable"), Some(&1));
        let warmup = config.warmup.ok_or("warmup section")?;
        assert_eq!((warmup.requests, warmup.batch_size), (2, 1));
        assert_eq!(warmup.shapes.get("x"), Some(&vec![1, 4]));
        Ok(())
    }

    #[test]
    fn refuses_what_it_cannot_mean() {
        for (text, needle) in [
            ("[batchign]\nmax_batch_size = 32\n", "batchign"),
            ("[version_policy]\nlatest = 1\nall = true\n", "one of"),
            ("[version_policy]\nlatest = 0\n", "at least 1"),
            ("[version_labels]\nstable = 0\n", "positive"),
            ("[instances]\ncount = -1\n", "expected usize"),
            ("[instances]\nkind = \"gpu\"\n", "kind"),
            ("[instances]\ncount = 1000\n", "at most 64"),
            ("[lifecycle]\nreload = \"swap\"\n", "unload-first"),
            ("[lifecycle]\npinned = \"yes\"\n", "bool"),
        ] {
            let err = with_config(text).err().unwrap_or_default();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn config_toml_wins_over_config_pbtxt_section_by_section() -> Result<(), String> {
        let dir = std::env::temp_dir().join(format!("tensorport-both-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(
            dir.join(TRITON_CONFIG_FILE),
            "max_batch_size: 8\ndynamic_batching { }\nversion_policy { all { } }\n\
             default_model_filename: \"m.onnx\"\ninstance_group [ { count: 3 } ]\n",
        )
        .map_err(|e| e.to_string())?;
        std::fs::write(
            dir.join(MODEL_CONFIG_FILE),
            "[batching]\nmax_batch_size = 2\n[instances]\ncount = 1\n",
        )
        .map_err(|e| e.to_string())?;
        let config = ModelConfig::load(&dir).map_err(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        let config = config?;
        assert_eq!(config.batching.as_ref().map(|b| b.max_batch_size), Some(2));
        assert_eq!(config.instances.map(|i| i.count), Some(1));
        assert_eq!(config.policy(), Ok(VersionPolicy::All));
        assert_eq!(config.model_filename.as_deref(), Some("m.onnx"));
        Ok(())
    }

    #[test]
    fn policies_pick_versions() {
        let on_disk = [1, 2, 5, 9];
        assert_eq!(VersionPolicy::Latest(1).aspired(&on_disk), vec![9]);
        assert_eq!(VersionPolicy::Latest(2).aspired(&on_disk), vec![5, 9]);
        assert_eq!(VersionPolicy::All.aspired(&on_disk), vec![1, 2, 5, 9]);
        assert_eq!(
            VersionPolicy::Specific(vec![2, 7]).aspired(&on_disk),
            vec![2]
        );
    }
}
