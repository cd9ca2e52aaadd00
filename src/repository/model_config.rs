//! The one typed model configuration, spelled as `DIR/<model>/config.toml` writes it:
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
//! intra_op_threads = 2        # and ONNX Runtime's session options (default: its own):
//! graph_optimization = "basic"  # see `runtime_config` for every key
//! cpu_arena = false
//!
//! [instances]                 # batches of one version that run at once (default:
//! count = 2                   # --instances; 0: automatic, see `Loader::instances`)
//!
//! [lifecycle]                 # with --model-memory-budget: keep this model resident
//! pinned = true               # (loaded at start, never evicted); reload = "unload-first"
//! reload = "side-by-side"     # drops the old version before the new one loads
//!
//! [response_cache]            # answer identical requests from the server's cache
//! enable = true               # (--cache-config local,size=BYTES)
//!
//! [[input]]                   # the signature, for formats whose files carry none
//! name = "features"           # (TorchScript); see `declared`
//! dtype = "FP32"
//! shape = ["batch", 16]
//! ```
//!
//! An ensemble (Triton's `platform: "ensemble"`) names its steps instead of a model file; its
//! folder holds an empty version folder `1/`, and `[[input]]` / `[[output]]` declare what
//! clients call:
//!
//! ```toml
//! platform = "ensemble"
//! max_batch_size = 8
//!
//! [[ensemble.step]]
//! model = "transform"         # a model of the same repository
//! version = -1                # -1 (the default): the latest serving version
//! input_map = { raw = "RAW" } # the step model's input = the ensemble tensor feeding it
//! output_map = { features = "FEATURES" }  # the step model's output = the tensor it makes
//! ```
//! `[traffic]` (a split between versions, shadow copies) and `[metrics]` (score histograms)
//! are described in `rollout`; `[logging]` (answered requests written to files) in
//! `payload_log::config`.
//!
//! Top-level keys: `model_filename = "ranker.onnx"` (the file looked for in each version
//! folder, instead of `model.onnx`, `model.pt` or `saved_model.pb`), `platform` and
//! `max_batch_size` (Triton's: the largest batch a request may carry).
//!
//! Whichever file a setting came from, it ends here: config_files.rs reads `config.toml` into
//! this type and lays it over what triton_config.rs made of a Triton `config.pbtxt` in the same
//! folder; neither reader imports the other, both import this leaf.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::budget::parse_size;
use super::declared::{self, DeclaredTensor};
use super::rollout::{MetricsConfig, Rollout, TrafficConfig};
use super::runtime_config::RuntimeConfig;
use crate::backend::Signature;
use crate::batcher::BatchSettings;
use crate::payload_log::{LoggingTable, PayloadLogConfig};
use crate::pipeline::{EnsembleConfig, ENSEMBLE_PLATFORM};

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
    /// `[response_cache]`: whether answers are kept in the server's response cache.
    #[serde(default)]
    pub response_cache: ResponseCacheConfig,
    /// `[traffic]`: the split between versions and shadow copies (see `rollout`).
    #[serde(default)]
    pub traffic: TrafficConfig,
    /// `[metrics]`: per-model metrics beyond the defaults.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// `[logging]`: answered requests written to files (see `payload_log`).
    pub logging: Option<LoggingTable>,
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
    /// The largest batch (first dimension) one request may carry, as Triton's
    /// `max_batch_size`: above 0, every declared shape starts with a batch dimension and a
    /// larger request is refused; 0, the declared shapes are whole and nothing is batched.
    /// Unset: no limit beyond `[batching]`'s.
    pub max_batch_size: Option<usize>,
    /// `[ensemble]`: the steps of an ensemble (`platform = "ensemble"`).
    pub ensemble: Option<EnsembleConfig>,
    /// Whether the settings came (in part) from a Triton `config.pbtxt`, whose declared
    /// inputs and outputs are a contract the model file must keep.
    #[serde(skip)]
    pub from_triton: bool,
    /// Settings found but not applied (from `config.pbtxt`), to be logged when the model
    /// loads.
    #[serde(skip)]
    pub ignored: Vec<String>,
    /// What only an MLServer `model-settings.json` says (see `mlserver_settings`).
    #[serde(skip)]
    pub mlserver: MlserverExtras,
}

/// The parts of an MLServer `model-settings.json` that have no place in the shared sections.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MlserverExtras {
    /// `parameters.version` when it is a name (`v0.1.0`) rather than a number: clients may
    /// ask for it in place of the version number, and answers report it as the version.
    pub version_name: Option<String>,
    /// `inputs` / `outputs` for a model file that carries its own signature: the file must
    /// agree with them (a TorchScript file takes them as its signature instead).
    pub inputs: Vec<DeclaredTensor>,
    pub outputs: Vec<DeclaredTensor>,
    /// Fields the file sets that this server does not apply, named when a version loads.
    pub ignored: Vec<String>,
}

/// The most instances a version may have: an ONNX instance with a session of its own holds
/// its own copy of the weights, so a typo of a few zeros would exhaust memory instead of
/// failing the load.
pub const MAX_INSTANCES: usize = 64;

/// `[instances]`, Triton's `instance_group { count }` and its ONNX Runtime backend's
/// `share_session_between_instances` parameter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstancesConfig {
    /// Instances of each loaded version; 0 picks automatically; unset: `--instances`.
    pub count: Option<usize>,
    /// Whether the instances of an ONNX version run one session, holding one copy of the
    /// weights (unset: they do); `false` gives each its own session.
    pub share_session: Option<bool>,
}

impl InstancesConfig {
    /// These settings over `base`'s, field by field.
    pub fn over(self, base: Self) -> Self {
        Self {
            count: self.count.or(base.count),
            share_session: self.share_session.or(base.share_session),
        }
    }
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

/// `[response_cache]`, Triton's `response_cache { enable: true }`: identical requests are
/// answered from the server's cache (`--cache-config`) instead of running the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseCacheConfig {
    /// Unset: as the other file says (config.toml's setting wins over config.pbtxt's either
    /// way, so `enable = false` turns off a cache the pbtxt enables).
    #[serde(default)]
    pub enable: Option<bool>,
}

impl ResponseCacheConfig {
    /// Whether the model's answers are cached: only where a file enables it.
    pub fn enabled(&self) -> bool {
        self.enable.unwrap_or(false)
    }
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

impl ModelConfig {
    /// Checks what no single file can: the sections together.
    pub(super) fn check(&self) -> Result<(), String> {
        if let Some(batching) = &self.batching {
            batching
                .validate()
                .map_err(|err| format!("[batching]: {err}"))?;
            if let Some(max) = self.max_batch_size {
                if batching.max_batch_size > max.max(1) {
                    return Err(format!(
                        "[batching] max_batch_size {} is larger than the model's                          max_batch_size {max}, the largest batch it takes",
                        batching.max_batch_size
                    ));
                }
            }
        }
        self.policy()?;
        self.signature()?;
        let is_ensemble = self.platform.as_deref() == Some(ENSEMBLE_PLATFORM);
        if is_ensemble != self.ensemble.is_some() {
            return Err(format!(
                "platform \"{ENSEMBLE_PLATFORM}\" and the ensemble's steps go together: \
                 give both (ensemble_scheduling, or [[ensemble.step]]) or neither"
            ));
        }
        if let Some((label, _)) = self.version_labels.iter().find(|(_, &v)| v == 0) {
            return Err(format!(
                "[version_labels]: label '{label}' must name a positive version"
            ));
        }
        self.rollout()?;
        self.payload_log()?;
        if let Some(name) = &self.model_filename {
            if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                return Err(format!(
                    "model_filename '{name}' must be a file name inside the version folder"
                ));
            }
        }
        if let Some(count) = self.instances.and_then(|table| table.count) {
            if count > MAX_INSTANCES {
                return Err(format!(
                    "[instances]: count must be at most {MAX_INSTANCES}, got {count}"
                ));
            }
        }
        Ok(())
    }

    /// `[logging]` checked; `None` when the model logs nothing.
    pub fn payload_log(&self) -> Result<Option<PayloadLogConfig>, String> {
        self.logging
            .as_ref()
            .map(|table| PayloadLogConfig::from_table(table, parse_size))
            .transpose()
    }

    /// `[traffic]` and `[metrics]` checked against the labels; `None` when they ask nothing.
    pub fn rollout(&self) -> Result<Option<Rollout>, String> {
        Rollout::from_config(&self.traffic, &self.metrics, &self.version_labels)
    }

    /// The signature `[[input]]` / `[[output]]` declare, as clients see it, if they do.
    pub fn signature(&self) -> Result<Option<Signature>, String> {
        declared::signature(&self.input, &self.output)
    }

    /// The declared signature as the runtime takes it (each `reshape` applied).
    pub fn runtime_signature(&self) -> Result<Option<Signature>, String> {
        declared::runtime_signature(&self.input, &self.output)
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
