//! The `tensorport` binary: parse the configuration, bind both ports, then load the models
//! in the background while serving (live at once, ready once the load settles), until
//! SIGTERM or SIGINT.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tensorport::auth::Access;
use tensorport::backend::onnx::OnnxRuntime;
use tensorport::backend::onnx_library;
use tensorport::backend::RuntimeThreads;
use tensorport::background::Lifetime;
use tensorport::batcher::BatchSettings;
use tensorport::config::{missing_serve_hint, Cli, Command, ConfigError, ServeArgs};
use tensorport::cpu_wakeup::WakeupLatencyHold;
use tensorport::infer::InferService;
use tensorport::log_settings::LogSettings;
use tensorport::log_sink::LogSink;
use tensorport::metrics::Metrics;
use tensorport::proto::tensorflow::serving::BatchingParameters;
use tensorport::repository::{
    subfolders, watch_model_config_file, Loader, ModelList, ModelRepository, ModelSource,
    TfsBatching,
};
use tensorport::shm::ShmRegistry;
use tensorport::tensor::{DecodeLimits, ScanHelpers};
use tensorport::Listeners;

/// Environment variable `ort` itself honours; read here once and passed down.
const ORT_DYLIB_PATH: &str = "ORT_DYLIB_PATH";

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::parse_from_args(args.clone()) {
        Ok(cli) => cli,
        Err(ConfigError::Clap(err)) => {
            if let Some(hint) = missing_serve_hint(&args).filter(|_| err.use_stderr()) {
                let _ = err.print();
                let _ = writeln!(std::io::stderr(), "\n{hint}");
                return ExitCode::from(2);
            }
            err.exit()
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "error: {err}");
            return ExitCode::from(2);
        }
    };
    let Command::Serve(args) = cli.command;
    // Before logging starts: the log writer counts the lines it drops in a metric.
    let metrics = match args.observability.peer_metric_names {
        true => Metrics::new(),
        false => Metrics::new().without_peer_names(),
    };
    let metrics = Arc::new(metrics);
    let log_settings = tensorport::logging::install(
        args.observability.log_format,
        args.observability.log_level,
        LogSink::new(metrics.log_lines_dropped()),
    );
    if let Some(warning) = args.not_applied_warning() {
        tracing::warn!("{warning}");
    }
    #[cfg(feature = "tensorflow")]
    {
        give_each_tensorflow_model_its_own_threads();
        keep_tensorflow_info_logs_out();
    }
    match serve(args, metrics, log_settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            // Not eprintln!, which panics when stderr is gone; the exit status still tells.
            let _ = writeln!(std::io::stderr(), "error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn serve(
    args: ServeArgs,
    metrics: Arc<Metrics>,
    log_settings: Arc<LogSettings>,
) -> Result<(), String> {
    let source = ModelSource::from_flags(
        args.models.model_dir.as_deref(),
        args.compatibility.model_config_file.as_deref(),
        args.compatibility.model_name.as_deref(),
        args.compatibility.model_base_path.as_deref(),
    )
    .map_err(|err| err.to_string())?;
    let model_dir = source.root.clone();
    let platform = args.platform_settings().map_err(|err| err.to_string())?;
    if let Some(platform) = &platform {
        if !platform.not_applied.is_empty() {
            tracing::warn!(
                fields = %platform.not_applied.join(", "),
                "--platform-config-file sets fields this server does not apply"
            );
        }
    }
    let platform_batching = platform.as_ref().and_then(|p| p.batching.clone());
    let (default_batching, instances) = batching_defaults(&args, platform_batching)?;
    // Connections, model files and shared-memory regions each hold a descriptor.
    match tensorport::shm::raise_descriptor_limit() {
        Ok(limit) => tracing::info!(limit = ?limit, "open-file limit"),
        Err(err) => tracing::warn!(%err, "cannot raise the open-file limit"),
    }
    // Held until the server stops; refused settings fail the start.
    let _wakeup_latency = match args.models.cpu_wakeup_latency_us {
        Some(micros) => {
            let hold = WakeupLatencyHold::hold(micros).map_err(|err| err.to_string())?;
            tracing::info!(
                micros = hold.micros(),
                "holding the CPU wake-up latency cap"
            );
            Some(hold)
        }
        None => None,
    };
    // Before the models load, so that a bad token file fails the start at once.
    let access = match &args.security.auth_token_file {
        Some(file) => Access::from_file(file).map_err(|err| err.to_string())?,
        None => Access::open(),
    };
    access.log_summary();
    // Settings that read files fail here, before any model loads or port is bound.
    let mut options = args.server_options().map_err(|err| err.to_string())?;
    options.auth = access;
    options.log_settings = log_settings;
    if let Some(files) = &options.transport.tls {
        tensorport::transport::Tls::load(files).map_err(|err| err.to_string())?;
    }
    let env_library = std::env::var_os(ORT_DYLIB_PATH)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let library = onnx_library::find(
        args.models.ort_library.as_deref(),
        env_library.as_deref(),
        &onnx_library::default_search_roots(),
    )
    .ok_or(onnx_library::HOW_TO_GET_IT)?;
    let onnx = OnnxRuntime::load(&library).map_err(|err| err.to_string())?;
    tracing::info!(library = %library.display(), "ONNX Runtime loaded");
    // The platform config's session threads replace the flags, as in TF Serving.
    let threads = RuntimeThreads {
        intra_op: platform
            .as_ref()
            .and_then(|p| p.intra_op_threads)
            .unwrap_or(args.models.intra_op_threads),
        inter_op: platform
            .as_ref()
            .and_then(|p| p.inter_op_threads)
            .unwrap_or(args.models.inter_op_threads),
    };
    // Before anything runs: LibTorch sizes its process-wide pools once.
    #[cfg(feature = "torch")]
    tensorport::backend::torch::configure_process(threads).map_err(|err| err.to_string())?;

    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let workers = if args.network.worker_threads > 0 {
        args.network.worker_threads
    } else {
        cpus
    };
    let blocking = blocking_threads(cpus);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .max_blocking_threads(blocking)
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start the async runtime: {err}"))?;
    tracing::info!(workers, blocking, "async runtime started");
    runtime.block_on(async move {
        // Bind before anything slow: a port conflict fails at once, and probes get answers
        // (live, not yet ready) while the models load.
        let grpc = match args.network.disable_grpc {
            true => None,
            false => Some(
                bind(
                    SocketAddr::new(args.network.host, args.network.grpc_port),
                    "--grpc-port",
                )
                .await?,
            ),
        };
        let rest = match args.network.disable_rest {
            true => None,
            false => Some(
                bind(
                    SocketAddr::new(args.network.host, args.network.rest_port),
                    "--rest-port",
                )
                .await?,
            ),
        };
        let metrics_listener = match args.observability.metrics_port {
            Some(port) => {
                Some(bind(SocketAddr::new(args.network.host, port), "--metrics-port").await?)
            }
            None => None,
        };
        // An unreadable model directory is a configuration error, reported before serving.
        subfolders(&model_dir).map_err(|err| err.to_string())?;
        let loader = Loader {
            onnx,
            threads,
            default_batching,
            metrics: metrics.clone(),
            instances,
            inline_run_max: Duration::from_micros(args.batching.inline_run_max_us),
            strict_model_config: args.models.strict_model_config,
        };
        let response_cache = args
            .models
            .response_cache_bytes()
            .map(|bytes| Arc::new(tensorport::cache::ResponseCache::new(bytes)));
        if args.models.model_memory_budget.is_none() {
            options.kept_freed_memory = tensorport::repository::keep_freed_memory_for_reuse();
        }
        let repository = ModelRepository::new(&model_dir, loader)
            .with_response_cache(response_cache)
            .with_memory_budget(args.models.model_memory_budget)
            .with_allowed_roots(&args.security.allow_model_paths)
            .map_err(|err| err.to_string())?
            .with_allowed_log_roots(&args.security.allow_log_paths)
            .map_err(|err| err.to_string())?
            .loading_at_start(args.models.startup_models())
            .with_client_control(args.models.model_control_api);
        let repository = match source.models.served(&source.root) {
            Ok(None) => repository,
            Ok(Some(models)) => repository.serving_only(models),
            Err(err) => return Err(err.to_string()),
        };
        let repository = Arc::new(repository);
        let max_request_bytes = options.max_request_bytes;
        let infer = Arc::new(
            InferService::new(
                repository.clone(),
                DecodeLimits {
                    max_tensor_bytes: max_request_bytes,
                    // The CPUs this process may run on (its affinity and cgroup quota), less the
                    // request's own.
                    scan_helpers: ScanHelpers::new(
                        std::thread::available_parallelism().map_or(1, usize::from) - 1,
                    ),
                },
                metrics,
                Arc::new(ShmRegistry::with_limits(
                    args.shared_memory.shm,
                    args.shm_limits(),
                )),
            )
            .with_shadow(|shadow| {
                // Shadow copies stop short of the limit, so they never take a client's place;
                // what they hold stays within half of the request memory budget.
                shadow
                    .with_concurrency_limit(options.overload.max_concurrent_requests)
                    .with_memory_budget(options.overload.max_inflight_request_bytes)
            }),
        );
        tracing::info!(
            grpc = %grpc.as_ref().map(local).unwrap_or_else(|| "off".into()),
            rest = %rest.as_ref().map(local).unwrap_or_else(|| "off".into()),
            metrics = %metrics_listener.as_ref().map(local).unwrap_or_default(),
            "listening"
        );
        let poll = (args.models.model_poll_secs > 0)
            .then(|| Duration::from_secs(args.models.model_poll_secs));
        let config_file = match &source.models {
            ModelList::ConfigFile(file) if args.compatibility.model_config_file_poll_secs > 0 => {
                Some((
                    file.clone(),
                    Duration::from_secs(args.compatibility.model_config_file_poll_secs),
                ))
            }
            _ => None,
        };
        // A watch that stops (it never should) leaves the server unready, saying why; the
        // load alone, without a watch, simply finishes.
        let lifetime = if poll.is_some() || config_file.is_some() {
            Lifetime::UntilStopped
        } else {
            Lifetime::Finite
        };
        let loading = options.background.spawn(
            "model repository",
            lifetime,
            load_then_poll(repository, poll, config_file),
        );
        let served = tensorport::run(
            infer,
            Listeners {
                grpc,
                rest,
                metrics: metrics_listener,
            },
            options,
            shutdown_signal(),
        )
        .await
        .map_err(|err| err.to_string());
        loading.abort();
        served
    })?;
    tracing::info!("stopped");
    Ok(())
}

/// The batching defaults and instance count for models without settings of their own: a
/// `--platform-config-file`'s batching parameters, else `--enable-batching` (with
/// `--batching-parameters-file`) as TF Serving reads them, else `--max-batch-size` and its
/// companions.
fn batching_defaults(
    args: &ServeArgs,
    platform: Option<BatchingParameters>,
) -> Result<(BatchSettings, usize), String> {
    let instances = usize::try_from(args.models.instances).unwrap_or(1);
    if let Some(parameters) = platform {
        if args.compatibility.enable_batching {
            tracing::warn!(
                "--enable-batching is ignored: --platform-config-file's batching_parameters \
                 apply (as in TF Serving)"
            );
        }
        let tfs = TfsBatching::from_parameters(parameters)
            .map_err(|why| format!("--platform-config-file: batching_parameters: {why}"))?;
        return Ok(log_tfs_batching(tfs, instances));
    }
    if !args.compatibility.enable_batching {
        if let Some(file) = &args.compatibility.batching_parameters_file {
            tracing::warn!(
                file = %file.display(),
                "--batching-parameters-file is ignored without --enable-batching (as in TF Serving)"
            );
        }
        return Ok((args.batch_settings(), instances));
    }
    let tfs = match &args.compatibility.batching_parameters_file {
        Some(file) => TfsBatching::read(file).map_err(|err| err.to_string())?,
        None => TfsBatching::defaults(),
    };
    Ok(log_tfs_batching(tfs, instances))
}

/// Says what TF Serving's batching parameters came to, and returns the settings and instance
/// count (`instances` unless `num_batch_threads` names one).
fn log_tfs_batching(tfs: TfsBatching, instances: usize) -> (BatchSettings, usize) {
    if !tfs.ignored.is_empty() {
        tracing::warn!(
            ignored = %tfs.ignored.join(", "),
            "the batching parameters set fields this server does not apply"
        );
    }
    for capped in &tfs.capped {
        tracing::warn!(
            field = capped.field,
            given = %capped.given.map_or_else(|| "past 2^64".to_owned(), |v| v.to_string()),
            applied = capped.applied,
            "batching parameters: lowered to {}",
            capped.limit
        );
    }
    if let Some(instances) = tfs.instances {
        tracing::warn!(
            num_batch_threads = instances,
            "batching parameters: num_batch_threads is not a shared pool here; each \
             model version without settings of its own runs up to this many batches at once, \
             each on an instance of its own (a copy of the model's session in memory)"
        );
    }
    tracing::info!(
        max_batch_size = tfs.settings.max_batch_size,
        max_queue_delay_us = tfs.settings.max_queue_delay_us,
        max_queue_size = tfs.settings.max_queue_size,
        preferred_batch_sizes = ?tfs.settings.preferred_batch_sizes,
        instances = tfs.instances.unwrap_or(instances),
        "batching on for models without batching settings of their own"
    );
    let instances = tfs.instances.unwrap_or(instances);
    (tfs.settings, instances)
}

/// The load at start-up, then (with a poll period) the watch for changes, off the serving path.
async fn load_then_poll(
    repository: Arc<ModelRepository>,
    poll: Option<Duration>,
    config_file: Option<(PathBuf, Duration)>,
) {
    if let Err(error) = repository.reconcile().await {
        tracing::error!(%error, "cannot load the model repository");
    }
    let snapshot = repository.snapshot();
    let models = snapshot.models().count();
    let available = snapshot.models().filter(|m| m.is_available()).count();
    drop(snapshot);
    tracing::info!(models, available, "initial load settled");
    let watch_file = async {
        if let Some((file, period)) = config_file {
            watch_model_config_file(repository.clone(), file, period).await;
        }
    };
    let watch_dir = async {
        if let Some(period) = poll {
            repository.clone().poll(period).await;
        }
    };
    tokio::join!(watch_file, watch_dir);
}

/// The most threads tokio's blocking pool may hold: batch runs wait there for their instance,
/// model loads and large gzip bodies run there. Tokio's own bound is 512, which a burst of
/// large compressed bodies could reach; past this one the work queues until a thread is free,
/// and eight per core already keep every core busy (an idle thread ends after 10 s).
fn blocking_threads(cpus: usize) -> usize {
    const PER_CPU: usize = 8;
    const AT_LEAST: usize = 32;
    cpus.saturating_mul(PER_CPU).max(AT_LEAST)
}

async fn bind(addr: SocketAddr, flag: &str) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| format!("{flag}: cannot listen on {addr}: {err}"))
}

fn local(listener: &tokio::net::TcpListener) -> String {
    listener
        .local_addr()
        .map(|addr| addr.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// TensorFlow sizes one process-wide intra-op pool from the first session it creates, which
/// would make every later model's `intra_op` setting a no-op; this variable (read once, when
/// the first session starts) gives each session a pool of its own size. Set here, before any
/// thread exists, unless the operator chose otherwise.
#[cfg(feature = "tensorflow")]
fn give_each_tensorflow_model_its_own_threads() {
    set_default_env("TF_OVERRIDE_GLOBAL_THREADPOOL", "1");
}

/// TensorFlow writes INFO lines of its own to stderr on every SavedModel load, bypassing our
/// log format (they would break `--log-format json` for log shippers); the server logs each
/// load itself. Warnings and errors still come through, and an operator's own
/// TF_CPP_MIN_LOG_LEVEL wins. This only helps when TensorFlow has logged nothing yet: its
/// library can log while it starts, before `main`, and then keeps the level it read, so the
/// README and the container image set the variable before the process starts.
#[cfg(feature = "tensorflow")]
fn keep_tensorflow_info_logs_out() {
    set_default_env("TF_CPP_MIN_LOG_LEVEL", "1");
}

/// Sets `name` unless the environment already has it. Only called before any thread exists.
#[cfg(feature = "tensorflow")]
fn set_default_env(name: &str, value: &str) {
    if std::env::var_os(name).is_none() {
        std::env::set_var(name, value);
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::info!("shutdown signal received");
}
