//! Command-line configuration. Every `serve` flag can also come from the environment
//! (`TENSORPORT_<FLAG>`) or from a TOML file given with `--config`; a flag beats the
//! environment, which beats the file, which beats the default.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use http::HeaderName;

use crate::api::health::Readiness;
use crate::batcher::BatchSettings;
use crate::overload::{AccessLogFormat, ApiKeys, ApiKeysError, OverloadSettings, RateSettings};
use crate::server::ServerOptions;
use crate::shm::{ShmLimits, ShmPolicy};
use crate::tensor::tensor_proto::ResponseEncoding;
use crate::transport::{TlsFiles, TransportSettings};

#[derive(Debug, Parser)]
#[command(
    name = "tensorport",
    version = crate::build_info::VERSION,
    about = crate::build_info::ABOUT
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load the models in --model-dir and serve them.
    Serve(ServeArgs),
}

/// Settings of `tensorport serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML file with defaults for any of these flags (keys are flag names, e.g. `grpc_port = 9000`).
    #[arg(long, env = "TENSORPORT_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Model repository: DIR/<model>/<version>/model.onnx (or model.pt, TorchScript, or
    /// saved_model.pb, TensorFlow). A folder holding one model (its version folders, or the
    /// model file directly) or a model file is served as that one model. Alias:
    /// --model-repository (Triton).
    #[arg(long, env = "TENSORPORT_MODEL_DIR", value_name = "DIR",
          aliases = ["model-repository", "model_repository"])]
    pub model_dir: Option<PathBuf>,

    /// Address to listen on.
    #[arg(long, env = "TENSORPORT_HOST", default_value = "0.0.0.0")]
    pub host: IpAddr,

    /// gRPC port (TF Serving and KServe gRPC); 0 picks a free port.
    /// Alias: --port (TF Serving).
    #[arg(
        long,
        env = "TENSORPORT_GRPC_PORT",
        default_value_t = 8500,
        alias = "port"
    )]
    pub grpc_port: u16,

    /// HTTP port (TF Serving REST, KServe HTTP); 0 picks a free port.
    /// Aliases: --rest_api_port (TF Serving), --http-port (Triton).
    #[arg(long, env = "TENSORPORT_REST_PORT", default_value_t = 8501,
          aliases = ["rest_api_port", "http-port"])]
    pub rest_port: u16,

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
    /// [instances] section (0: automatic, one per intra-op-threads cores, at most 4). Each ONNX
    /// instance is a session with its own copy of the weights.
    #[arg(long, env = "TENSORPORT_INSTANCES", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(0..=(crate::repository::MAX_INSTANCES as u64)))]
    pub instances: u64,

    /// A request that finds its model version's queue empty and an instance free runs on the
    /// network thread, skipping the hand-off to the batcher, when the version's runs have
    /// averaged at most this many microseconds (measured from its real runs; an unmeasured or
    /// slower model always queues). 0: never.
    #[arg(long, env = "TENSORPORT_INLINE_RUN_MAX_US", default_value_t = 50,
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub inline_run_max_us: u64,

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

    /// Async worker threads for the network side (0: one per core).
    #[arg(long, env = "TENSORPORT_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,

    /// How often to look for new, changed or removed model versions, in seconds (0: only at
    /// start and on the load / reload APIs).
    /// Aliases: --file_system_poll_wait_seconds (TF Serving), --repository-poll-secs (Triton).
    #[arg(
        long,
        env = "TENSORPORT_MODEL_POLL_SECS",
        default_value_t = 2,
        aliases = ["file_system_poll_wait_seconds", "repository-poll-secs"]
    )]
    pub model_poll_secs: u64,

    /// Dynamic batching for models whose config.toml has no [batching] section: the most rows
    /// merged into one run (0 or 1: off).
    #[arg(long, env = "TENSORPORT_MAX_BATCH_SIZE", default_value_t = 0)]
    pub max_batch_size: usize,

    /// With batching on, how long the oldest queued request may wait for others, in microseconds.
    #[arg(long, env = "TENSORPORT_MAX_QUEUE_DELAY_US", default_value_t = 0)]
    pub max_queue_delay_us: u64,

    /// Requests a model version may hold waiting before it refuses more with RESOURCE_EXHAUSTED / 429.
    #[arg(long, env = "TENSORPORT_MAX_QUEUE_SIZE", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=(crate::batcher::MAX_QUEUE_SIZE as u64)))]
    pub max_queue_size: u64,

    /// Who may use system shared memory: off, local (peers on loopback only; each sees only
    /// regions registered from loopback) or any (every peer sees every region, as in Triton).
    #[arg(long, env = "TENSORPORT_SHM", value_enum, default_value_t = ShmPolicy::Local)]
    pub shm: ShmPolicy,

    /// Shared-memory regions that may be registered at once (each holds a file descriptor).
    #[arg(long, env = "TENSORPORT_SHM_MAX_REGIONS", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=(crate::shm::MAX_GUARDED as u64 / 2)))]
    pub shm_max_regions: u64,

    /// Bytes of all registered shared-memory regions together.
    #[arg(long, env = "TENSORPORT_SHM_MAX_BYTES", default_value_t = 64 << 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub shm_max_bytes: u64,

    /// Largest request body or gRPC message, in bytes, counted after gzip is inflated (a gzip
    /// body or message that would inflate past it is refused); also the largest tensor a
    /// request may expand to.
    #[arg(long, env = "TENSORPORT_MAX_REQUEST_BYTES", default_value_t = 64 << 20,
          value_parser = clap::value_parser!(u64).range(1024..=(4u64 << 30)))]
    pub max_request_bytes: u64,

    /// Requests per second each client may send (0: no rate limit). A client is one of the
    /// API keys listed in --rate-limit-keys-file when it sends one, else its IP address.
    #[arg(long, env = "TENSORPORT_RATE_LIMIT_PER_SEC", default_value_t = 0)]
    pub rate_limit_per_sec: u32,

    /// Requests a client may send in a burst above its rate (0: one second's worth).
    #[arg(long, env = "TENSORPORT_RATE_LIMIT_BURST", default_value_t = 0)]
    pub rate_limit_burst: u32,

    /// Request header holding a client's API key, to rate-limit listed keys on their own
    /// rather than by IP address (needs --rate-limit-keys-file).
    #[arg(
        long,
        env = "TENSORPORT_RATE_LIMIT_KEY_HEADER",
        value_name = "HEADER",
        requires = "rate_limit_keys_file"
    )]
    pub rate_limit_key_header: Option<HeaderName>,

    /// File of API keys (one a line, # comments) that get a rate-limit bucket of their own;
    /// a key not listed counts against its IP address.
    #[arg(
        long,
        env = "TENSORPORT_RATE_LIMIT_KEYS_FILE",
        value_name = "FILE",
        requires = "rate_limit_key_header"
    )]
    pub rate_limit_keys_file: Option<PathBuf>,

    /// Requests in flight across both ports; more are refused at once with 429 /
    /// RESOURCE_EXHAUSTED (0: no limit).
    #[arg(
        long,
        env = "TENSORPORT_MAX_CONCURRENT_REQUESTS",
        default_value_t = 512
    )]
    pub max_concurrent_requests: usize,

    /// Bytes the requests in flight may take once decoded, across both ports (0: no limit).
    /// Each request's decoded size is estimated from its body before it is decoded (strings
    /// and JSON values are charged per element as well as per byte); one that would go over
    /// what is left is refused at once with 429 / RESOURCE_EXHAUSTED. Answers count too,
    /// from when they are built until their bytes are written to the socket.
    #[arg(long, env = "TENSORPORT_MAX_INFLIGHT_REQUEST_BYTES", value_name = "BYTES",
          default_value_t = crate::overload::DEFAULT_MAX_INFLIGHT_REQUEST_BYTES)]
    pub max_inflight_request_bytes: u64,

    /// Deadline in milliseconds for requests that set none (grpc-timeout, the
    /// x-request-timeout-ms header, or KServe's timeout parameter); 0: none.
    #[arg(long, env = "TENSORPORT_REQUEST_TIMEOUT_MS", default_value_t = 0)]
    pub request_timeout_ms: u64,

    /// On SIGTERM / SIGINT, how long requests in flight and queued may take to finish.
    #[arg(long, env = "TENSORPORT_DRAIN_SECS", default_value_t = 30)]
    pub drain_secs: u64,

    /// On SIGTERM / SIGINT, how long readiness is false before the listeners close, so that
    /// load balancers stop sending work first.
    #[arg(long, env = "TENSORPORT_SHUTDOWN_DELAY_MS", default_value_t = 0)]
    pub shutdown_delay_ms: u64,

    /// TLS on the HTTP and gRPC ports: the server's certificate chain (PEM, leaf first).
    #[arg(
        long,
        env = "TENSORPORT_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        env = "TENSORPORT_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// Require client certificates issued by this CA (PEM) on the HTTP and gRPC ports (mTLS).
    #[arg(
        long,
        env = "TENSORPORT_TLS_CLIENT_CA",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,

    /// Open connections on the HTTP and gRPC ports together; beyond it, new connections wait
    /// in the listen backlog. Default: the descriptor limit less a reserve for model files
    /// and shared-memory regions (a quarter, at least 512, at most half), at most 65536.
    #[arg(long, env = "TENSORPORT_MAX_CONNECTIONS", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: Option<u64>,

    /// Seconds a client has to finish its TLS handshake, and over HTTP/1 to send the rest of
    /// a request head once its first byte has arrived.
    #[arg(long, env = "TENSORPORT_HEADER_READ_TIMEOUT_SECS", default_value_t = 10, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_read_timeout_secs: u64,

    /// Seconds a client has to send a request body once its head has arrived; slower
    /// requests are answered 408 / DEADLINE_EXCEEDED. Bodies are read before a request takes
    /// one of --max-concurrent-requests.
    #[arg(long, env = "TENSORPORT_BODY_READ_TIMEOUT_SECS", default_value_t = 60, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub body_read_timeout_secs: u64,

    /// Seconds a connection may stay open with no request in flight before it is closed.
    #[arg(long, env = "TENSORPORT_IDLE_TIMEOUT_SECS", default_value_t = 60, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_secs: u64,

    /// Seconds an answer may wait for its client to take any of its bytes (over HTTP/2, its
    /// next 64 KiB); then its HTTP/2 stream is reset, or its connection closed when the
    /// socket takes nothing at all. Until sent, answers count against
    /// --max-inflight-request-bytes.
    #[arg(long, env = "TENSORPORT_SEND_TIMEOUT_SECS", value_name = "SECS",
          default_value_t = crate::transport::DEFAULT_SEND_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub send_timeout_secs: u64,

    /// Bytes of request bodies being read, before their requests are admitted, across all
    /// connections of both ports; a body that would go over waits (its sender is slowed)
    /// until others are done or --body-read-timeout-secs ends it. At least one
    /// --max-request-bytes body always fits.
    #[arg(long, env = "TENSORPORT_MAX_RECEIVING_BYTES", value_name = "BYTES",
          default_value_t = crate::transport::DEFAULT_MAX_RECEIVING_BYTES as u64)]
    pub max_receiving_bytes: u64,

    /// Seconds between HTTP/2 keep-alive pings on an open connection (0: none).
    #[arg(
        long,
        env = "TENSORPORT_HTTP2_KEEPALIVE_INTERVAL_SECS",
        default_value_t = 30,
        value_name = "SECS"
    )]
    pub http2_keepalive_interval_secs: u64,

    /// Seconds an HTTP/2 keep-alive ping may go unanswered before the connection is closed.
    #[arg(long, env = "TENSORPORT_HTTP2_KEEPALIVE_TIMEOUT_SECS", default_value_t = 20, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub http2_keepalive_timeout_secs: u64,

    /// Also serve /metrics and the health probes on this port (0 picks a free one).
    #[arg(long, env = "TENSORPORT_METRICS_PORT")]
    pub metrics_port: Option<u16>,

    /// Bearer tokens and the API groups each may use, one `TOKEN GROUPS [NAME]` a line (see
    /// the README's Security section); without it every API is open to anyone.
    #[arg(long, env = "TENSORPORT_AUTH_TOKEN_FILE", value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,

    /// Folders besides --model-dir that a TF Serving reload-config base_path may name
    /// (comma-separated: DIR[,DIR]).
    #[arg(
        long,
        env = "TENSORPORT_ALLOW_MODEL_PATHS",
        value_name = "DIRS",
        value_delimiter = ','
    )]
    pub allow_model_paths: Vec<PathBuf>,

    /// When the server reports ready (/readyz, KServe server ready, gRPC health): any (some
    /// model serves) or all (every model serves, as Triton's strict readiness). Never while
    /// the models found at start-up are still loading, nor while no model serves.
    #[arg(long, env = "TENSORPORT_READINESS", value_enum, default_value_t = Readiness::Any)]
    pub readiness: Readiness,

    /// One line per request on stdout (time, client, method, path or RPC, model, version,
    /// status, outcome, duration, request id, bytes in and out): off, text (key=value) or json.
    #[arg(long, env = "TENSORPORT_ACCESS_LOG", value_enum, default_value_t = AccessLogFormat::Off)]
    pub access_log: AccessLogFormat,

    /// Log lines as human-readable text or as JSON objects, one per line.
    #[arg(long, env = "TENSORPORT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Answer TF Serving Predict with packed `tensor_content` (the runtime's bytes as they are)
    /// instead of the typed fields TF Serving fills by default (`float_val`, `int64_val`, ...);
    /// clients must then read `tensor_content`.
    #[arg(long, env = "TENSORPORT_PREDICT_RESPONSE_TENSOR_CONTENT")]
    pub predict_response_tensor_content: bool,

    /// TF Serving's models.config (a ModelServerConfig text proto): serve exactly the models it
    /// lists (name, base_path, model_platform, model_version_policy, version_labels). Relative
    /// base paths start at --model-dir (default: the file's folder); others need
    /// --allow-model-paths. Alias: --model_config_file.
    #[arg(
        long,
        env = "TENSORPORT_MODEL_CONFIG_FILE",
        value_name = "FILE",
        alias = "model_config_file",
        conflicts_with = "model_base_path"
    )]
    pub model_config_file: Option<PathBuf>,

    /// How often to re-read --model-config-file and apply its changes, in seconds (0: read at
    /// start only). Alias: --model_config_file_poll_wait_seconds.
    #[arg(
        long,
        env = "TENSORPORT_MODEL_CONFIG_FILE_POLL_SECS",
        default_value_t = 0,
        alias = "model_config_file_poll_wait_seconds"
    )]
    pub model_config_file_poll_secs: u64,

    /// Name of the one model --model-base-path serves (default: the folder's name); also the
    /// name of a --model-dir that holds a single model. Alias: --model_name.
    #[arg(
        long,
        env = "TENSORPORT_MODEL_NAME",
        value_name = "NAME",
        alias = "model_name"
    )]
    pub model_name: Option<String>,

    /// Serve one model from this folder (its version folders, or the model file directly) or
    /// this model file, as TF Serving's --model_base_path. Alias: --model_base_path.
    #[arg(
        long,
        env = "TENSORPORT_MODEL_BASE_PATH",
        value_name = "PATH",
        alias = "model_base_path"
    )]
    pub model_base_path: Option<PathBuf>,

    /// Turn dynamic batching on for models without batching settings of their own, with TF
    /// Serving's defaults (max_batch_size 1000) or --batching-parameters-file. Alias:
    /// --enable_batching.
    #[arg(long, env = "TENSORPORT_ENABLE_BATCHING", alias = "enable_batching",
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
        alias = "batching_parameters_file"
    )]
    pub batching_parameters_file: Option<PathBuf>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Clap(#[from] clap::Error),
    #[error("--config: cannot read {path}: {source}")]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--config: {path} is not valid TOML: {message}")]
    ParseFile { path: PathBuf, message: String },
    #[error(
        "--config: {path}: unknown setting '{key}' (settings are flag names, such as grpc_port)"
    )]
    UnknownKey { path: PathBuf, key: String },
    #[error("--config: {path}: setting '{key}' must be a string, number or boolean")]
    BadValue { path: PathBuf, key: String },
    #[error(
        "--model-dir is required (or TENSORPORT_MODEL_DIR, or model_dir in --config), unless \
         --model-config-file or --model-base-path names the models"
    )]
    MissingModelDir,
    #[error("--model-dir: {0} is neither a directory nor a model file")]
    ModelDirNotADirectory(PathBuf),
    #[error(transparent)]
    ApiKeys(#[from] ApiKeysError),
}

impl ServeArgs {
    /// The server's transport, overload and shutdown settings (reads the files they name).
    pub fn server_options(&self) -> Result<ServerOptions, ConfigError> {
        let api_keys = match (&self.rate_limit_key_header, &self.rate_limit_keys_file) {
            (Some(header), Some(path)) => Some(ApiKeys::read(header.clone(), path)?),
            _ => None,
        };
        let rate_limit = (self.rate_limit_per_sec > 0).then(|| RateSettings {
            per_second: self.rate_limit_per_sec,
            burst: if self.rate_limit_burst == 0 {
                self.rate_limit_per_sec
            } else {
                self.rate_limit_burst
            },
            api_keys,
        });
        Ok(ServerOptions {
            max_request_bytes: usize::try_from(self.max_request_bytes).unwrap_or(usize::MAX),
            overload: OverloadSettings {
                rate_limit,
                max_concurrent_requests: self.max_concurrent_requests,
                max_inflight_request_bytes: self.max_inflight_request_bytes,
                request_timeout: (self.request_timeout_ms > 0)
                    .then(|| Duration::from_millis(self.request_timeout_ms)),
                access_log: self.access_log,
            },
            shutdown_delay: Duration::from_millis(self.shutdown_delay_ms),
            drain: Duration::from_secs(self.drain_secs),
            // Read from --auth-token-file by `main`, which can report a bad file.
            auth: crate::auth::Access::open(),
            transport: self.transport_settings(),
            background: crate::background::Background::new(),
            readiness: self.readiness,
            predict_response: if self.predict_response_tensor_content {
                ResponseEncoding::TensorContent
            } else {
                ResponseEncoding::TypedFields
            },
        })
    }

    /// TLS, the connection cap and the connection timeouts.
    fn transport_settings(&self) -> TransportSettings {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
            }),
            _ => None,
        };
        TransportSettings {
            tls,
            max_connections: self
                .max_connections
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            header_read_timeout: Duration::from_secs(self.header_read_timeout_secs),
            body_read_timeout: Duration::from_secs(self.body_read_timeout_secs),
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            send_timeout: Duration::from_secs(self.send_timeout_secs),
            max_receiving_bytes: usize::try_from(self.max_receiving_bytes).unwrap_or(usize::MAX),
            http2_keepalive_interval: (self.http2_keepalive_interval_secs > 0)
                .then(|| Duration::from_secs(self.http2_keepalive_interval_secs)),
            http2_keepalive_timeout: Duration::from_secs(self.http2_keepalive_timeout_secs),
        }
    }

    /// The shared-memory registry's limits these flags describe.
    pub fn shm_limits(&self) -> ShmLimits {
        ShmLimits {
            // At most MAX_GUARDED / 2, checked by clap.
            max_regions: usize::try_from(self.shm_max_regions).unwrap_or(usize::MAX),
            max_bytes: self.shm_max_bytes,
        }
    }

    /// The server-wide batching defaults these flags describe.
    pub fn batch_settings(&self) -> BatchSettings {
        BatchSettings {
            max_batch_size: self.max_batch_size,
            max_queue_delay_us: self.max_queue_delay_us,
            preferred_batch_sizes: Vec::new(),
            max_queue_size: usize::try_from(self.max_queue_size)
                .unwrap_or(crate::batcher::MAX_QUEUE_SIZE),
        }
    }
}

/// A hint for a command line that gives `serve`'s flags without `serve` (as TF Serving's and
/// Triton's binaries, which have no subcommand, are run): `None` when `serve` or a help or
/// version request comes first, or when no flag was given at all.
pub fn missing_serve_hint(args: &[OsString]) -> Option<String> {
    let given: Vec<String> = args
        .iter()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let first = given.first()?;
    let not_for_serve = ["serve", "help", "-h", "--help", "-V", "--version"];
    if not_for_serve.contains(&first.as_str()) || !given.iter().any(|arg| arg.starts_with("--")) {
        return None;
    }
    Some(format!(
        "hint: the server runs as a subcommand: tensorport serve {}",
        given.join(" ")
    ))
}

impl Cli {
    /// Parses `args` (including the program name), filling gaps from the `--config` file.
    pub fn parse_from_args(args: Vec<OsString>) -> Result<Self, ConfigError> {
        let command = Self::command();
        let matches = command.clone().try_get_matches_from(&args)?;
        let Some(("serve", serve)) = matches.subcommand() else {
            return Ok(Self::from_arg_matches(&matches)?);
        };
        let Some(path) = serve.get_one::<PathBuf>("config").cloned() else {
            return Self::validated(Self::from_arg_matches(&matches)?);
        };
        let mut args = args;
        args.extend(file_arguments(&path, serve, &command)?);
        let matches = command.try_get_matches_from(&args)?;
        Self::validated(Self::from_arg_matches(&matches)?)
    }

    fn validated(self) -> Result<Self, ConfigError> {
        let Command::Serve(serve) = &self.command;
        let Some(dir) = serve.model_dir.as_ref() else {
            if serve.model_config_file.is_some() || serve.model_base_path.is_some() {
                return Ok(self);
            }
            return Err(ConfigError::MissingModelDir);
        };
        if !dir.is_dir() && !dir.is_file() {
            return Err(ConfigError::ModelDirNotADirectory(dir.clone()));
        }
        Ok(self)
    }
}

/// The file's settings as extra `--flag value` arguments, for flags neither given on the
/// command line nor set in the environment.
fn file_arguments(
    path: &Path,
    serve: &clap::ArgMatches,
    command: &clap::Command,
) -> Result<Vec<OsString>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: path.to_path_buf(),
        source,
    })?;
    let table: toml::Table =
        text.parse()
            .map_err(|err: toml::de::Error| ConfigError::ParseFile {
                path: path.to_path_buf(),
                message: err.message().to_owned(),
            })?;
    let serve_command = command
        .find_subcommand("serve")
        .ok_or_else(|| ConfigError::MissingModelDir)?;
    let mut extra = Vec::new();
    for (key, value) in table {
        let id = key.replace('-', "_");
        let known = serve_command
            .get_arguments()
            .any(|arg| arg.get_id().as_str() == id && id != "config");
        if !known {
            return Err(ConfigError::UnknownKey {
                path: path.to_path_buf(),
                key,
            });
        }
        let explicit = matches!(
            serve.value_source(&id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if explicit {
            continue;
        }
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            _ => {
                return Err(ConfigError::BadValue {
                    path: path.to_path_buf(),
                    key,
                })
            }
        };
        extra.push(OsString::from(format!("--{}={text}", id.replace('_', "-"))));
    }
    Ok(extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn serve(cli: Cli) -> ServeArgs {
        let Command::Serve(serve) = cli.command;
        serve
    }

    #[test]
    fn flags_parse_with_defaults() -> Result<(), ConfigError> {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let cli = Cli::parse_from_args(args(&["tensorport", "serve", "--model-dir", &dir]))?;
        let serve = serve(cli);
        assert_eq!(serve.grpc_port, 8500);
        assert_eq!(serve.rest_port, 8501);
        let options = serve.server_options()?;
        assert!(options.overload.rate_limit.is_none());
        assert_eq!(options.overload.max_concurrent_requests, 512);
        assert_eq!(options.overload.request_timeout, None);
        assert_eq!(options.drain, Duration::from_secs(30));
        Ok(())
    }

    #[test]
    fn overload_flags_build_the_settings() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir();
        let keys = dir.join(format!("tensorport-keys-{}.txt", std::process::id()));
        std::fs::write(&keys, "alpha\nbeta\n")?;
        let keys_file = keys.to_string_lossy();
        let dir = dir.to_string_lossy();
        let cli = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
            "--rate-limit-per-sec",
            "50",
            "--rate-limit-key-header",
            "x-api-key",
            "--rate-limit-keys-file",
            &keys_file,
            "--max-concurrent-requests",
            "0",
            "--request-timeout-ms",
            "250",
            "--drain-secs",
            "5",
            "--log-format",
            "json",
        ]))?;
        let serve = serve(cli);
        assert_eq!(serve.log_format, LogFormat::Json);
        let options = serve.server_options()?;
        let rate = options.overload.rate_limit.expect("rate limit on");
        assert_eq!((rate.per_second, rate.burst), (50, 50));
        let api_keys = rate.api_keys.expect("listed keys");
        assert_eq!((api_keys.header.as_str(), api_keys.len()), ("x-api-key", 2));
        std::fs::remove_file(&keys)?;
        assert_eq!(options.overload.max_concurrent_requests, 0);
        assert_eq!(
            options.overload.request_timeout,
            Some(Duration::from_millis(250))
        );
        assert_eq!(options.drain, Duration::from_secs(5));
        Ok(())
    }

    #[test]
    fn a_key_header_needs_a_keys_file() {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let err = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
            "--rate-limit-key-header",
            "x-api-key",
        ]));
        let message = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("--rate-limit-keys-file"), "{message}");
    }

    #[test]
    fn transport_flags_build_the_settings() -> Result<(), ConfigError> {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let defaults = serve(Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
        ]))?)
        .server_options()?
        .transport;
        assert_eq!(defaults.tls, None);
        assert_eq!(defaults.max_connections, None);
        assert_eq!(defaults.body_read_timeout, Duration::from_secs(60));
        assert_eq!(defaults.send_timeout, Duration::from_secs(30));
        let cli = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
            "--tls-cert",
            "server.pem",
            "--tls-key",
            "server.key",
            "--tls-client-ca",
            "ca.pem",
            "--max-connections",
            "100",
            "--idle-timeout-secs",
            "5",
            "--send-timeout-secs",
            "7",
            "--http2-keepalive-interval-secs",
            "0",
        ]))?;
        let transport = serve(cli).server_options()?.transport;
        let tls = transport.tls.expect("TLS on");
        assert_eq!(tls.cert, PathBuf::from("server.pem"));
        assert_eq!(tls.client_ca, Some(PathBuf::from("ca.pem")));
        assert_eq!(transport.max_connections, Some(100));
        assert_eq!(transport.idle_timeout, Duration::from_secs(5));
        assert_eq!(transport.send_timeout, Duration::from_secs(7));
        assert_eq!(transport.http2_keepalive_interval, None);
        Ok(())
    }

    #[test]
    fn a_certificate_without_its_key_is_refused() {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let err = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
            "--tls-cert",
            "server.pem",
        ]));
        let message = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("--tls-key"), "{message}");
    }

    #[test]
    fn admin_flags_parse() -> Result<(), ConfigError> {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let cli = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
            "--allow-model-paths",
            "/srv/a,/srv/b",
            "--auth-token-file",
            "/etc/tensorport/tokens",
        ]))?;
        let serve = serve(cli);
        assert_eq!(
            serve.allow_model_paths,
            vec![PathBuf::from("/srv/a"), PathBuf::from("/srv/b")]
        );
        assert_eq!(
            serve.auth_token_file.as_deref(),
            Some(Path::new("/etc/tensorport/tokens"))
        );
        Ok(())
    }

    #[test]
    fn bad_values_name_the_flag() {
        let err = Cli::parse_from_args(args(&["tensorport", "serve", "--grpc-port", "http"]));
        let message = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("--grpc-port"), "{message}");
    }

    #[test]
    fn missing_model_dir_is_refused() {
        let err = Cli::parse_from_args(args(&["tensorport", "serve"]));
        assert!(matches!(err, Err(ConfigError::MissingModelDir)));
    }

    #[test]
    fn file_fills_gaps_and_flags_win() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("tensorport-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("tensorport.toml");
        std::fs::write(
            &file,
            format!(
                "model_dir = {:?}\ngrpc_port = 9000\nrest-port = 9001\n",
                dir.display().to_string()
            ),
        )?;
        let file_arg = file.to_string_lossy().to_string();
        let cli = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--config",
            &file_arg,
            "--rest-port",
            "7000",
        ]))?;
        let serve = serve(cli);
        assert_eq!(serve.grpc_port, 9000);
        assert_eq!(serve.rest_port, 7000);
        assert_eq!(serve.model_dir.as_deref(), Some(dir.as_path()));

        std::fs::write(&file, "grcp_port = 1\n")?;
        let err = Cli::parse_from_args(args(&["tensorport", "serve", "--config", &file_arg]));
        std::fs::remove_dir_all(&dir)?;
        assert!(matches!(err, Err(ConfigError::UnknownKey { key, .. }) if key == "grcp_port"));
        Ok(())
    }

    #[test]
    fn flags_without_serve_get_a_hint_and_nothing_else_does() {
        assert_eq!(
            missing_serve_hint(&args(&["tensorport", "--model-dir", "m"])).as_deref(),
            Some("hint: the server runs as a subcommand: tensorport serve --model-dir m")
        );
        for line in [
            &["tensorport", "serve", "--model-dir", "m"][..],
            &["tensorport", "--help"],
            &["tensorport", "--version"],
            &["tensorport", "help"],
            &["tensorport"],
            &["tensorport", "sevre"],
        ] {
            assert_eq!(missing_serve_hint(&args(line)), None, "{line:?}");
        }
    }

    #[test]
    fn tf_serving_and_triton_spellings_are_aliases() -> Result<(), ConfigError> {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let tfs = serve(Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--port=9000",
            "--rest_api_port=9001",
            "--model_config_file=/models/models.config",
            "--model_config_file_poll_wait_seconds=60",
            "--enable_batching",
            "--batching_parameters_file=/models/batching.txt",
            "--file_system_poll_wait_seconds=5",
        ]))?);
        let triton_poll = serve(Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-repository",
            &dir,
            "--repository-poll-secs=7",
        ]))?);
        assert_eq!(triton_poll.model_poll_secs, 7);
        assert_eq!((tfs.grpc_port, tfs.rest_port), (9000, 9001));
        assert_eq!(
            tfs.model_config_file.as_deref(),
            Some(Path::new("/models/models.config"))
        );
        assert_eq!(tfs.model_config_file_poll_secs, 60);
        assert!(tfs.enable_batching);
        assert_eq!(
            tfs.batching_parameters_file.as_deref(),
            Some(Path::new("/models/batching.txt"))
        );
        assert_eq!(tfs.model_poll_secs, 5);
        let one = serve(Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model_name=resnet",
            "--model_base_path=/models/resnet",
            "--enable_batching=false",
        ]))?);
        assert_eq!(one.model_name.as_deref(), Some("resnet"));
        assert!(!one.enable_batching);
        let triton = serve(Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-repository",
            &dir,
            "--http-port",
            "8000",
            "--grpc-port",
            "8001",
        ]))?);
        assert_eq!(triton.model_dir.as_deref(), Some(Path::new(dir.as_ref())));
        assert_eq!((triton.grpc_port, triton.rest_port), (8001, 8000));
        Ok(())
    }

    #[test]
    fn the_version_names_the_backends() {
        let version = Cli::command().render_version();
        assert!(version.contains("(backends: onnx"), "{version}");
    }
}
