//! The TensorFlow Serving API: gRPC `PredictionService` / `ModelService` and the `/v1` REST API.
//!
//! Each transport is a folder whose dispatcher stands above its operations: [`rest`] (the
//! `/v1/models/...` dispatcher, then status, metadata, predict and the examples verbs) and
//! [`grpc`] (the two tonic services, then one file per RPC). What both transports share sits
//! beside them, in leaves that import neither dispatcher:
//!
//! - [`status`]: a model's version statuses, as `GET /v1/models/{name}` and `GetModelStatus`
//!   report them.
//! - [`signatures`]: a model's `SignatureDef`s, as both metadata calls return them.
//! - [`examples`]: `tf.Example` inputs turned into a signature's tensors and run.
//! - [`classify`], [`regress`]: the two examples operations, read back as TF Serving's results.
//! - [`methods`]: the method names signatures declare.
//! - [`error`]: what fails in this layer, one enum per concern, each a bad request.

pub mod classify;
pub mod error;
pub mod examples;
pub mod grpc;
pub mod methods;
pub mod regress;
pub mod rest;
pub mod signatures;
pub mod status;
/// TF Serving's tensor codec lives with the tensor type, below the repository, whose warmup
/// replay decodes the same protos.
pub use crate::tensor::tensor_proto;
