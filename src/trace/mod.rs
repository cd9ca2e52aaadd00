//! Request tracing in OpenTelemetry's terms: Triton's `--trace-config` and trace settings
//! API (`settings`), W3C trace context continued from each request's headers (`context`),
//! the spans of a sampled request (`span`), and their export over OTLP (`export`, `otlp`):
//! OTLP/HTTP (`http_export`) or OTLP/gRPC (`grpc_export`) to the collector (`collector`),
//! configured by `--trace-config` and the OpenTelemetry variables (`config`, `env`).

mod collector;
pub mod config;
pub mod context;
pub mod counters;
pub mod env;
pub mod export;
mod export_error;
mod grpc_export;
mod http_export;
mod otlp;
pub mod record;
pub mod settings;
pub mod span;

pub use config::{TraceConfig, TraceMode};
pub use counters::TraceCounters;
pub use export::Tracer;
pub use settings::{TraceSettings, TraceSettingsError};
pub use span::{SpanDetail, TraceHandle, TraceStart};
