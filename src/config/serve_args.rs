//! `tensorport serve`'s settings: the flags, one flattened struct per `--help` heading (the
//! groups users look for them in), and the typed settings the server is built from. Fields are
//! reached by group (`args.overload.max_request_bytes`); the flag names, environment
//! variables and defaults are each group's own.

use std::time::Duration;

use clap::Args;

use super::batching::BatchingArgs;
use super::compatibility::CompatibilityArgs;
use super::error::ConfigError;
use super::models::ModelsArgs;
use super::monitoring::tf_serving_metrics_path;
use super::network::NetworkArgs;
use super::observability::ObservabilityArgs;
use super::overload::OverloadArgs;
use super::peers::NotApplied;
use super::platform::{self, PlatformSettings};
use super::security::SecurityArgs;
use super::shared_memory::SharedMemoryArgs;
use super::ssl;
use crate::batcher::BatchSettings;
use crate::overload::{ApiKeys, OverloadSettings, RateSettings};
use crate::server::ServerOptions;
use crate::shm::ShmLimits;
use crate::tensor::tensor_proto::ResponseEncoding;
use crate::trace::TraceConfig;
use crate::transport::{TlsFiles, TransportSettings};

/// Settings of `tensorport serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML file with defaults for any of these flags (keys are flag names, e.g. `grpc_port = 9000`).
    #[arg(long, env = "TENSORPORT_CONFIG", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    #[command(flatten, next_help_heading = "Network")]
    pub network: NetworkArgs,

    #[command(flatten, next_help_heading = "Models")]
    pub models: ModelsArgs,

    #[command(flatten, next_help_heading = "Batching")]
    pub batching: BatchingArgs,

    #[command(flatten, next_help_heading = "Overload")]
    pub overload: OverloadArgs,

    #[command(flatten, next_help_heading = "Security")]
    pub security: SecurityArgs,

    #[command(flatten, next_help_heading = "Shared memory")]
    pub shared_memory: SharedMemoryArgs,

    #[command(flatten, next_help_heading = "Observability")]
    pub observability: ObservabilityArgs,

    #[command(flatten, next_help_heading = "Compatibility")]
    pub compatibility: CompatibilityArgs,

    /// A peer's flags (`tensorport tritonserver ...`) accepted without being applied.
    #[arg(skip)]
    pub not_applied: Vec<NotApplied>,
}

impl ServeArgs {
    /// The server's transport, overload and shutdown settings (reads the files they name).
    pub fn server_options(&self) -> Result<ServerOptions, ConfigError> {
        let api_keys = match (
            &self.overload.rate_limit_key_header,
            &self.overload.rate_limit_keys_file,
        ) {
            (Some(header), Some(path)) => Some(ApiKeys::read(header.clone(), path)?),
            _ => None,
        };
        let rate_limit = (self.overload.rate_limit_per_sec > 0).then(|| RateSettings {
            per_second: self.overload.rate_limit_per_sec,
            burst: if self.overload.rate_limit_burst == 0 {
                self.overload.rate_limit_per_sec
            } else {
                self.overload.rate_limit_burst
            },
            api_keys,
        });
        Ok(ServerOptions {
            trace: TraceConfig::default(),
            trace_settings: ServerOptions::default().trace_settings,
            max_request_bytes: usize::try_from(self.overload.max_request_bytes)
                .unwrap_or(usize::MAX),
            overload: OverloadSettings {
                rate_limit,
                max_concurrent_requests: self.overload.max_concurrent_requests,
                max_inflight_request_bytes: self.overload.max_inflight_request_bytes,
                request_timeout: (self.overload.request_timeout_ms > 0)
                    .then(|| Duration::from_millis(self.overload.request_timeout_ms)),
                access_log: self.observability.access_log,
                // Started by `server::run`, on its runtime.
                tracer: None,
            },
            shutdown_delay: Duration::from_millis(self.network.shutdown_delay_ms),
            drain: Duration::from_secs(self.network.drain_secs),
            // Read from --auth-token-file by `main`, which can report a bad file.
            auth: crate::auth::Access::open(),
            transport: self.transport_settings()?,
            background: crate::background::Background::new(),
            readiness: self.observability.readiness,
            predict_response: if self.compatibility.predict_response_tensor_content {
                ResponseEncoding::TensorContent
            } else {
                ResponseEncoding::TypedFields
            },
            tf_serving_metrics_path: tf_serving_metrics_path(
                self.compatibility.monitoring_config_file.as_deref(),
            )?,
            // Made by `main` as it installs the log subscriber, which the settings change.
            log_settings: ServerOptions::default().log_settings,
            // Set by `main`, which tunes the allocator.
            kept_freed_memory: None,
        }
        .with_trace(self.trace_config()?))
    }

    /// `--trace-config`, over the OpenTelemetry environment variables.
    pub fn trace_config(&self) -> Result<TraceConfig, ConfigError> {
        let entries: Vec<_> = self
            .observability
            .trace_config
            .iter()
            .flat_map(|entries| entries.0.iter().cloned())
            .collect();
        TraceConfig::from_entries(&entries, |name| std::env::var(name).ok())
            .map_err(ConfigError::Trace)
    }

    /// TLS, the connection cap and the connection timeouts (reads --ssl-config-file).
    fn transport_settings(&self) -> Result<TransportSettings, ConfigError> {
        Ok(TransportSettings {
            tls: self.tls()?,
            max_connections: self
                .network
                .max_connections
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            header_read_timeout: Duration::from_secs(self.network.header_read_timeout_secs),
            body_read_timeout: Duration::from_secs(self.network.body_read_timeout_secs),
            idle_timeout: Duration::from_secs(self.network.idle_timeout_secs),
            send_timeout: Duration::from_secs(self.network.send_timeout_secs),
            max_receiving_bytes: usize::try_from(self.overload.max_receiving_bytes)
                .unwrap_or(usize::MAX),
            http2_keepalive_interval: (self.network.http2_keepalive_interval_secs > 0)
                .then(|| Duration::from_secs(self.network.http2_keepalive_interval_secs)),
            http2_keepalive_timeout: Duration::from_secs(self.network.http2_keepalive_timeout_secs),
        })
    }

    /// TLS from --tls-cert and --tls-key, or from TF Serving's --ssl-config-file.
    fn tls(&self) -> Result<Option<TlsFiles>, ConfigError> {
        if let Some(file) = &self.security.ssl_config_file {
            let read = ssl::read(file)?;
            tracing::warn!(
                file = %file.display(),
                "--ssl-config-file: TLS covers the HTTP port too (TF Serving serves REST in \
                 plain HTTP); clients of the REST API must use https"
            );
            for field in &read.not_applied {
                tracing::warn!(file = %file.display(), "--ssl-config-file: not applied: {field}");
            }
            return Ok(Some(read.tls));
        }
        Ok(match (&self.security.tls_cert, &self.security.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone().into(),
                key: key.clone().into(),
                client_ca: self.security.tls_client_ca.clone().map(Into::into),
            }),
            _ => None,
        })
    }

    /// The one start-up warning for a peer's flags accepted without being applied: each
    /// flag, and what this server does instead. `None` when there are none.
    pub fn not_applied_warning(&self) -> Option<String> {
        if self.not_applied.is_empty() {
            return None;
        }
        let each: Vec<String> = self
            .not_applied
            .iter()
            .map(|flag| format!("{} ({})", flag.flag, flag.instead))
            .collect();
        Some(format!(
            "accepted but not applied, tensorport does this instead: {}",
            each.join("; ")
        ))
    }

    /// What --platform-config-file says, read and checked (`None` without one).
    pub fn platform_settings(&self) -> Result<Option<PlatformSettings>, ConfigError> {
        self.compatibility
            .platform_config_file
            .as_deref()
            .map(platform::read)
            .transpose()
    }

    /// The shared-memory registry's limits these flags describe.
    pub fn shm_limits(&self) -> ShmLimits {
        ShmLimits {
            // At most MAX_GUARDED / 2, checked by clap.
            max_regions: usize::try_from(self.shared_memory.shm_max_regions).unwrap_or(usize::MAX),
            max_bytes: self.shared_memory.shm_max_bytes,
        }
    }

    /// The server-wide batching defaults these flags describe.
    pub fn batch_settings(&self) -> BatchSettings {
        BatchSettings {
            max_batch_size: self.batching.max_batch_size,
            max_queue_delay_us: self.batching.max_queue_delay_us,
            preferred_batch_sizes: Vec::new(),
            max_queue_size: usize::try_from(self.batching.max_queue_size)
                .unwrap_or(crate::batcher::MAX_QUEUE_SIZE),
            split_rows: 0,
        }
    }
}
