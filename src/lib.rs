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
//! - [`auth`]: which API groups a bearer token may use (`--auth-token-file`).
//! - [`request`]: what travels with a request besides its body (id, protocol, deadline).
//! - [`metrics`]: every Prometheus metric, built once and passed in.
//! - [`build_info`]: the version and the backends compiled in (`--version`, `build_info`).
//! - [`server`]: binds nothing itself; takes listeners and a shutdown future, and drains.
//! - [`transport`]: accepting, TLS and the connection limits of every port.

pub mod api;
pub mod auth;
pub mod backend;
pub mod batcher;
pub mod build_info;
pub mod config;
pub mod error;
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
pub mod textproto;
pub mod transport;

pub use error::{Error, ErrorKind};
pub use server::{run, Listeners, ServerOptions};
