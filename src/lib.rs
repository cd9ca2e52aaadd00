//! tensorport serves ONNX (and, behind features, TorchScript and TensorFlow) models over the
//! TensorFlow Serving and KServe v2 protocols.
//!
//! How a request flows:
//!
//! ```text
//! socket ─> overload (request id, rate limit, concurrency limit, deadline)
//!        ─> api::{tfserving, kserve} (wire -> Tensor, validated)
//!        ─> infer::InferService (resolve model@version, check signature)
//!        ─> batcher (bounded queue per version; drops expired work)
//!        ─> backend::Backend (ONNX Runtime, on a blocking thread)
//!        <─ outputs encoded in the caller's protocol
//! ```
//!
//! - [`config`]: flags, environment and config file, parsed once in `main`.
//! - [`repository`]: the model directory and the versions that serve.
//! - [`backend`]: the `Backend` trait and its runtimes.
//! - [`batcher`]: per-version dynamic batching in front of a backend (bounded queue, one batch
//!   in flight).
//! - [`tensor`]: the one domain tensor type and its decoding limits.
//! - [`overload`]: the tower stack both servers run, read top to bottom as policy.
//! - [`request`]: what travels with a request besides its body (id, protocol, deadline).
//! - [`metrics`]: every Prometheus metric, built once and passed in.
//! - [`server`]: binds nothing itself; takes listeners and a shutdown future, and drains.

pub mod api;
pub mod backend;
pub mod batcher;
pub mod config;
pub mod error;
pub mod error_kind;
pub mod infer;
pub mod metrics;
pub mod overload;
pub mod proto;
pub mod repository;
pub mod request;
pub mod server;
pub mod shm;
pub mod stats;
pub mod tensor;

pub use error::{Error, ErrorKind};
pub use server::{run, Listeners, ServerOptions};
