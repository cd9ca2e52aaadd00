//! The Models heading of `serve --help`: where the models are, how often to look again, and
//! what each gets to run (runtime library, threads, instances, memory, CPU wake-up).

use std::path::PathBuf;

use clap::Args;

use super::aliases::spellings_of;

/// Where the models are, and the runtime threads, instances and memory they get.
#[derive(Debug, Clone, Args)]
pub struct ModelsArgs {
    /// Model repository: DIR/<model>/<version>/model.onnx (or model.pt, TorchScript, or
    /// saved_model.pb, TensorFlow). A folder holding one model (its version folders, or the
    /// model file directly) or a model file is served as that one model. Alias:
    /// --model-repository (Triton).
    #[arg(long, env = "TENSORPORT_MODEL_DIR", value_name = "DIR",
          aliases = spellings_of("model_dir"))]
    pub model_dir: Option<PathBuf>,

    /// Path to libonnxruntime.so; by default ORT_DYLIB_PATH, then the project's .venv.
    #[arg(long, env = "TENSORPORT_ORT_LIBRARY", value_name = "FILE")]
    pub ort_library: Option<PathBuf>,

    /// Threads a runtime uses inside one operator (0: one per core); config.toml's [runtime]
    /// overrides it per model.
    #[arg(long, env = "TENSORPORT_INTRA_OP_THREADS", default_value_t = 1)]
    pub intra_op_threads: usize,

    /// Threads a runtime uses to run independent operators (0: runtime default); config.toml's
    /// [runtime] overrides it per ONNX or TensorFlow model (LibTorch has one such pool per process).
    #[arg(long, env = "TENSORPORT_INTER_OP_THREADS", default_value_t = 1)]
    pub inter_op_threads: usize,

    /// Batches of one model version that may run at once, for models whose config.toml has no
    /// [instances] count (0: automatic, one per intra-op-threads cores, at most 4). The instances
    /// of an ONNX version share one session and one copy of the weights.
    #[arg(long, env = "TENSORPORT_INSTANCES", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(0..=(crate::repository::MAX_INSTANCES as u64)))]
    pub instances: u64,

    /// Hold the kernel's CPU wake-up latency cap (PM QoS, /dev/cpu_dma_latency) at this many
    /// microseconds while serving; 0 keeps idle CPUs polling instead of sleeping. Takes the
    /// wake-up of an idle CPU (tens of microseconds on virtual machines) out of each request
    /// at low concurrency, at the cost of idle CPUs staying busy, machine-wide. Needs write
    /// access to the device (root); the server does not start without it. Unset: the kernel's
    /// default.
    #[arg(long, env = "TENSORPORT_CPU_WAKEUP_LATENCY_US", value_name = "US")]
    pub cpu_wakeup_latency_us: Option<u32>,

    /// Memory the resident model versions may hold together, in bytes or with KiB, MiB, GiB
    /// (unset: every model loads at start and stays). With it, a version loads on its first
    /// request and the least recently used are evicted to make room; config.toml's
    /// [lifecycle] pinned = true keeps a model loaded.
    #[arg(long, env = "TENSORPORT_MODEL_MEMORY_BUDGET", value_name = "SIZE",
          value_parser = crate::repository::parse_size)]
    pub model_memory_budget: Option<u64>,

    /// The models to load at start, comma-separated (`*`: all); the others load when the
    /// load API (KServe repository load) asks. Empty: none at start. Triton's
    /// --model-control-mode=explicit with --load-model.
    #[arg(
        long,
        env = "TENSORPORT_STARTUP_MODELS",
        value_name = "NAMES",
        default_value = "*"
    )]
    pub startup_models: String,

    /// How often to look for new, changed or removed model versions, in seconds (0: only at
    /// start and on the load / reload APIs).
    /// Aliases: --file_system_poll_wait_seconds (TF Serving), --repository-poll-secs (Triton).
    #[arg(
        long,
        env = "TENSORPORT_MODEL_POLL_SECS",
        default_value_t = 2,
        aliases = spellings_of("model_poll_secs")
    )]
    pub model_poll_secs: u64,

    /// Whether clients may change which models are served: KServe's repository load and
    /// unload (HTTP /v2/repository/models/NAME/load and /unload, gRPC RepositoryModelLoad
    /// and RepositoryModelUnload) and TF Serving's HandleReloadConfigRequest. false answers
    /// them 503 / UNAVAILABLE, as Triton does outside --model-control-mode=explicit; the
    /// repository index stays readable. `tensorport tritonserver` sets it from
    /// --model-control-mode (true only for explicit).
    #[arg(long, env = "TENSORPORT_MODEL_CONTROL_API", value_name = "BOOL",
          num_args = 0..=1, default_value_t = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub model_control_api: bool,

    /// Require each model's configuration (config.pbtxt or config.toml) to declare every
    /// input and output; off, what is not declared is completed from the model file, as
    /// Triton's --strict-model-config=false does. What is declared is checked against the
    /// model file either way. Triton's --disable-auto-complete-config turns it on.
    #[arg(long, env = "TENSORPORT_STRICT_MODEL_CONFIG", value_name = "BOOL",
          num_args = 0..=1, default_value_t = false, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub strict_model_config: bool,

    /// The response cache, in Triton's spelling: `local,size=BYTES` (or with KiB, MiB, GiB)
    /// keeps up to that many bytes of answers, least recently used out, for the models whose
    /// config.pbtxt sets response_cache { enable: true } (config.toml: [response_cache]
    /// enable = true). Given again, the last size counts. Unset: nothing is cached.
    #[arg(long, env = "TENSORPORT_CACHE_CONFIG", value_name = "CONFIG",
          action = clap::ArgAction::Append, value_parser = parse_cache_config)]
    pub cache_config: Vec<u64>,
}

/// One `--cache-config` value: Triton's `CACHE,KEY=VALUE`, of which the local cache's `size`
/// is the one setting there is.
fn parse_cache_config(text: &str) -> Result<u64, String> {
    let (cache, setting) = text
        .split_once(',')
        .ok_or_else(|| format!("expected local,size=BYTES, got {text:?}"))?;
    if cache.trim() != "local" {
        return Err(format!(
            "cache {:?} is not available: the one cache is local (local,size=BYTES)",
            cache.trim()
        ));
    }
    match setting.split_once('=') {
        Some((key, size)) if key.trim() == "size" => crate::repository::parse_size(size.trim()),
        _ => Err(format!(
            "the local cache takes one setting, size=BYTES; got {setting:?}"
        )),
    }
}

impl ModelsArgs {
    /// The response cache's size, where `--cache-config` gives one.
    pub fn response_cache_bytes(&self) -> Option<u64> {
        self.cache_config.last().copied()
    }

    /// The models `--startup-models` names, or `None` for all of them.
    pub fn startup_models(&self) -> Option<Vec<String>> {
        if self.startup_models.trim() == "*" {
            return None;
        }
        Some(
            self.startup_models
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::parse_cache_config;

    #[test]
    fn cache_config_reads_tritons_local_size() {
        assert_eq!(parse_cache_config("local,size=1048576"), Ok(1 << 20));
        assert_eq!(parse_cache_config("local,size=64MiB"), Ok(64 << 20));
        for bad in [
            "local",
            "redis,host=h",
            "local,bytes=10",
            "local,size=0",
            "local,size=x",
        ] {
            assert!(parse_cache_config(bad).is_err(), "{bad}");
        }
    }
}
