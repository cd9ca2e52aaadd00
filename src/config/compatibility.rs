//! The Compatibility heading of `serve --help`: TF Serving's own ways of naming the models
//! (models.config, one base path) and batching, and its Predict answer encoding. Peers'
//! spellings of every flag are in `aliases`.

use std::path::PathBuf;

use clap::Args;

use super::aliases::spellings_of;

/// TF Serving's ways of naming models and batching, and its Predict answer encoding.
#[derive(Debug, Clone, Args)]
pub struct CompatibilityArgs {
    /// Answer TF Serving Predict with packed `tensor_content` (the runtime's bytes as they are)
    /// instead of the typed fields TF Serving fills by default (`float_val`, `int64_val`, ...);
    /// clients must then read `tensor_content`.
    #[arg(long, env = "TENSORPORT_PREDICT_RESPONSE_TENSOR_CONTENT")]
    pub predict_response_tensor_content: bool,

    /// TF Serving's models.config (a ModelServerConfig text proto): serve exactly the models it
    /// lists (name, base_path, model_platform, model_version_policy, version_labels). Relative
    /// base paths start at --model-dir (default: the file's folder); absolute ones may lie
    /// anywhere, as the file is the operator's. Alias: --model_config_file.
    #[arg(
        long,
        env = "TENSORPORT_MODEL_CONFIG_FILE",
        value_name = "FILE",
        aliases = spellings_of("model_config_file"),
        conflicts_with = "model_base_path"
    )]
    pub model_config_file: Option<PathBuf>,

    /// How often to re-read --model-config-file and apply its changes, in seconds (0: read at
    /// start only). Alias: --model_config_file_poll_wait_seconds.
    #[arg(
        long,
        env = "TENSORPORT_MODEL_CONFIG_FILE_POLL_SECS",
        default_value_t = 0,
        aliases = spellings_of("model_config_file_poll_secs")
    )]
    pub model_config_file_poll_secs: u64,

    /// Name of the one model --model-base-path serves (default: the folder's name); also the
    /// name of a --model-dir that holds a single model. Alias: --model_name.
    #[arg(
        long,
        env = "TENSORPORT_MODEL_NAME",
        value_name = "NAME",
        aliases = spellings_of("model_name")
    )]
    pub model_name: Option<String>,

    /// Serve one model from this folder (its version folders, or the model file directly) or
    /// this model file, as TF Serving's --model_base_path. Alias: --model_base_path.
    #[arg(
        long,
        env = "TENSORPORT_MODEL_BASE_PATH",
        value_name = "PATH",
        aliases = spellings_of("model_base_path")
    )]
    pub model_base_path: Option<PathBuf>,

    /// Turn dynamic batching on for models without batching settings of their own, with TF
    /// Serving's defaults (max_batch_size 1000) or --batching-parameters-file. Alias:
    /// --enable_batching.
    #[arg(long, env = "TENSORPORT_ENABLE_BATCHING", aliases = spellings_of("enable_batching"),
          num_args = 0..=1, default_missing_value = "true", default_value_t = false,
          action = clap::ArgAction::Set)]
    pub enable_batching: bool,

    /// TF Serving's BatchingParameters text proto (max_batch_size, batch_timeout_micros,
    /// max_enqueued_batches, num_batch_threads, allowed_batch_sizes), applied with
    /// --enable-batching. Alias: --batching_parameters_file.
    #[arg(
        long,
        env = "TENSORPORT_BATCHING_PARAMETERS_FILE",
        value_name = "FILE",
        aliases = spellings_of("batching_parameters_file")
    )]
    pub batching_parameters_file: Option<PathBuf>,

    /// TF Serving's MonitoringConfig text proto (`prometheus_config { enable: true path:
    /// "/my/metrics" }`): the exposition is served at that path on the HTTP port (and
    /// --metrics-port) instead of /monitoring/prometheus/metrics; `enable: false` serves it
    /// at /metrics only. Alias: --monitoring_config_file.
    #[arg(
        long,
        env = "TENSORPORT_MONITORING_CONFIG_FILE",
        value_name = "FILE",
        aliases = spellings_of("monitoring_config_file")
    )]
    pub monitoring_config_file: Option<PathBuf>,

    /// TF Serving's PlatformConfigMap text proto: the "tensorflow" platform's session
    /// threads (session_config.intra_op_parallelism_threads, inter_op_parallelism_threads)
    /// replace --intra-op-threads and --inter-op-threads, and its batching_parameters turn
    /// batching on as --batching-parameters-file does (--enable-batching is then ignored, as
    /// in TF Serving); other fields are named in a warning. Alias: --platform_config_file.
    #[arg(
        long,
        env = "TENSORPORT_PLATFORM_CONFIG_FILE",
        value_name = "FILE",
        aliases = spellings_of("platform_config_file")
    )]
    pub platform_config_file: Option<PathBuf>,
}
