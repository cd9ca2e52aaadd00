//! The model repository: which models exist, which of their versions serve, and why the
//! others do not.
//!
//! The serving state is an immutable [`Snapshot`] behind an `Arc`: a request takes the current
//! snapshot (a reference-count bump), resolves its model version there, and keeps that version
//! alive for as long as it runs. The lifecycle ([`ModelRepository`]) builds new snapshots as
//! versions load, warm up, and retire, and swaps them in atomically.
//!
//! Files import one way, from the work down to what it shares:
//! - `ModelRepository`, one `impl` block per concern: lifecycle.rs (the struct, its builders,
//!   publishing), reconcile.rs, admin.rs, load.rs, retire.rs, on_demand.rs (under a memory
//!   budget); none imports another but lifecycle.rs, for the struct.
//! - Below them: snapshot.rs (the serving state), control.rs (what the reconciler remembers),
//!   residency.rs (loads in progress, use order, refusals), loader.rs (folder -> backend),
//!   charge.rs, budget.rs, confine.rs, scan.rs, warmup.rs, warmup_log.rs, and repo_file.rs,
//!   which every file read from a model folder goes through (regular files only, capped,
//!   confined to the folder).
//! - Settings: config_files.rs reads config.toml over triton_config.rs's reading of a
//!   config.pbtxt, both into model_config.rs's one typed config (its `[runtime]` table in
//!   runtime_config.rs); mlserver_settings.rs reads
//!   MLServer's model-settings.json over those, and mlserver_layout.rs finds MLServer's model
//!   folders in a scanned directory; startup.rs, tfs_config.rs and
//!   tfs_batching.rs read TF Serving's start-up files.

mod admin;
mod budget;
mod charge;
mod config_files;
mod confine;
mod contract;
mod control;
mod declared;
mod ensemble;
mod error;
mod idle_trim;
mod lifecycle;
mod load;
mod loader;
mod log_roots;
mod mlserver_layout;
mod mlserver_settings;
mod model_config;
mod on_demand;
mod reconcile;
mod repo_file;
mod residency;
mod retire;
mod rollout;
mod runtime_config;
mod scan;
mod snapshot;
mod startup;
pub mod tfrecord;
mod tfs_batching;
mod tfs_config;
mod trim;
mod triton_config;
mod triton_runtime;
mod warmup;
mod warmup_log;

pub use crate::version::{VersionError, VersionSelector};
pub use budget::{
    files_size, parse_size, peak_resident_bytes, resident_bytes, LoadMeasure, MemoryMeter,
};
pub use charge::MemoryCharge;
pub use config_files::ModelConfigError;
pub use confine::{
    check_model_name, resolve_trusted, ConfineError, ModelRoots, MAX_MODEL_NAME_BYTES,
};
pub use control::ServedModel;
pub use declared::{DeclaredDim, DeclaredTensor, SIGNATURE_HELP};
pub use error::{RepositoryError, ResidencyError};
pub use idle_trim::return_memory_when_idle;
pub use lifecycle::{BackendDecorator, ModelRepository};
pub use loader::{Loader, MAX_AUTOMATIC_INSTANCES};
pub use mlserver_settings::{MlserverSettingsError, MLSERVER_SETTINGS_FILE};
pub use model_config::{
    InstancesConfig, LifecycleConfig, MlserverExtras, ModelConfig, ReloadMode, VersionPolicy,
    WarmupConfig, MAX_INSTANCES, MODEL_CONFIG_FILE,
};
pub use repo_file::{read_text_trusted, Limit, RepoFileError, OPERATOR_FILE};
pub use rollout::{
    MetricsConfig, Rollout, Shadow, ShadowConfig, Split, TrafficConfig, Weighted, MAX_WEIGHT,
};
pub use runtime_config::RuntimeConfig;
pub use scan::{
    holds_one_model, is_flat, model_file_in, parse_version, scan_model, subfolders, ScanError,
    VersionFolder, EXPECTED_LAYOUT, FLAT_VERSION, ONNX_MODEL_FILE, SAVED_MODEL_FILE,
    TORCH_MODEL_FILE, TRITON_SAVED_MODEL_DIR,
};
pub use snapshot::{LoadedModel, ModelRecord, Residence, Snapshot, VersionState};
pub use startup::{watch_model_config_file, ModelList, ModelSource, StartupError};
pub use tfs_batching::{TfsBatching, TfsBatchingError};
pub use tfs_config::{
    read_model_config_file, served_models, ListPaths, ModelConfigFileError, OperatorPaths,
};
pub use trim::{keep_freed_memory_for_reuse, KeptFreedMemory};
