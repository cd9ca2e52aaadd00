//! `inference.GRPCInferenceService`, the KServe v2 / Triton gRPC API.
//!
//! The tonic service (`service.rs`) is the dispatcher; beneath it `ModelInfer`
//! (`model_infer.rs`) and `ModelStreamInfer` (`stream.rs`, which runs each message through
//! `ModelInfer` and admits it by its footprint, `message_footprint.rs`), and beneath those the
//! protobuf parameters (`params.rs`); `LogSettings` is `log_settings.rs`,
//! `TraceSetting` `trace_setting.rs`. Nothing here
//! imports the service back; `api/in_place.rs`, above this folder, answers `ModelInfer` from
//! the received body without tonic's copy of it.

mod log_settings;
mod message_footprint;
mod model_infer;
mod params;
mod service;
mod stream;
mod trace_setting;

pub use service::KserveGrpc;
