//! The KServe v2 / Triton protocol: HTTP under `/v2` and `inference.GRPCInferenceService`.
//!
//! Both transports decode into [`InferRequest`] and share [`infer()`], which resolves
//! shared-memory inputs, runs the request through [`InferService`](crate::infer::InferService)
//! and writes shared-memory outputs. What differs per transport is only how tensors and
//! parameters are spelled.
//!
//! Each transport is a folder whose dispatcher stands above its operations: [`http`]'s route
//! table (`http/routes.rs`) above infer, metadata, repository, shared memory and statistics,
//! with what they share in `http/support.rs`; [`grpc`]'s tonic service (`grpc/service.rs`)
//! above `ModelInfer`, the stream and their parameters. What both transports share sits here,
//! beneath both and importing neither: the request and response types ([`request`]),
//! parameters ([`params`]), tensor contents ([`codec`], [`raw_input`]), model metadata and
//! configuration ([`model_info`]), statistics ([`statistics`]), the classification extension
//! ([`classification`]) and the infer path itself ([`infer()`]).

mod classification;
pub mod codec;
pub mod grpc;
pub mod http;
mod infer;
mod model_info;
pub mod params;
mod raw_input;
pub mod request;
mod split_share;
mod statistics;

pub use http::infer_request;
pub use infer::infer;
pub use model_info::{
    config_json, model_config, model_metadata, repository_index, IndexEntry, ModelMetadata,
    TensorMetadata, EXTENSIONS,
};
pub use params::{param_bool, scheduling_params, Param, Params};
pub use request::{
    InferRequest, InferResponse, InputData, InputRequest, OutputRequest, OutputResult, ShmRef,
};
