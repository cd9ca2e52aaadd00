//! The Observability heading of `serve --help`: the metrics port, what readiness means,
//! the access log and the log format.

use clap::Args;

use crate::api::health::Readiness;
use crate::overload::AccessLogFormat;
use crate::trace::config::{parse_entries, TraceEntry};

/// Metrics port, readiness, the access log and the log format.
#[derive(Debug, Clone, Args)]
pub struct ObservabilityArgs {
    /// Also serve /metrics and the health probes on this port (0 picks a free one).
    #[arg(long, env = "TENSORPORT_METRICS_PORT")]
    pub metrics_port: Option<u16>,

    /// Scrapes also carry Triton's (nv_inference_*) and TF Serving's (:tensorflow:serving:*)
    /// names for the same figures, so that dashboards and alerts written for them keep
    /// working; false leaves only tensorport's own.
    #[arg(long, env = "TENSORPORT_PEER_METRIC_NAMES", value_name = "BOOL",
          default_value_t = true, action = clap::ArgAction::Set)]
    pub peer_metric_names: bool,

    /// When the server reports ready (/readyz, KServe server ready, gRPC health): any (some
    /// model serves) or all (every model serves, as Triton's strict readiness). Never while
    /// the models found at start-up are still loading, nor while no model serves.
    #[arg(long, env = "TENSORPORT_READINESS", value_enum, default_value_t = Readiness::Any)]
    pub readiness: Readiness,

    /// One line per request on stdout (time, client, method, path or RPC, model, version,
    /// status, outcome, duration, request id, bytes in and out): off, text (key=value) or json.
    #[arg(long, env = "TENSORPORT_ACCESS_LOG", value_enum, default_value_t = AccessLogFormat::Off)]
    pub access_log: AccessLogFormat,

    /// The least severe log lines written, when RUST_LOG is not set (RUST_LOG can also choose
    /// per module).
    #[arg(long, env = "TENSORPORT_LOG_LEVEL", value_enum, default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,

    /// Log lines as human-readable text or as JSON objects, one per line.
    #[arg(long, env = "TENSORPORT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Request tracing, in Triton's spellings ([MODE,]KEY=VALUE), once per setting: mode=opentelemetry (export
    /// spans), level=TIMESTAMPS (nothing is traced without a level; OFF), rate=N (trace 1 of
    /// every N requests; default 1000), count=N (stop after N traces; -1 no limit),
    /// opentelemetry,url=HOST:PORT/v1/traces (the OTLP/HTTP collector, http:// or https://,
    /// default localhost:4318/v1/traces), opentelemetry,protocol=grpc (OTLP/gRPC to
    /// HOST:PORT), opentelemetry,resource=KEY=VALUE, opentelemetry,bsp_schedule_delay=MS. Over
    /// the standard OTEL_EXPORTER_OTLP_ENDPOINT (which also means mode=opentelemetry),
    /// OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf or grpc), OTEL_TRACES_SAMPLER_ARG (a
    /// ratio) and OTEL_SERVICE_NAME; OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, _TIMEOUT,
    /// _CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY.
    #[arg(long, env = "TENSORPORT_TRACE_CONFIG", value_name = "SETTING",
          action = clap::ArgAction::Append, value_parser = parse_trace_config)]
    pub trace_config: Vec<TraceEntries>,
}

/// The settings of one `--trace-config` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntries(pub Vec<TraceEntry>);

fn parse_trace_config(text: &str) -> Result<TraceEntries, String> {
    parse_entries(text).map(TraceEntries)
}

/// The least severe log lines written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogLevel {
    Off,
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// As a tracing filter directive.
    pub fn directive(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Error => "error",
            Self::Warn => "warn",
            Self::Info => "info",
            Self::Debug => "debug",
            Self::Trace => "trace",
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}
