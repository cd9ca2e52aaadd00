//! tensorport serves ONNX (and, behind features, TorchScript and TensorFlow) models over the
//! TensorFlow Serving and KServe v2 protocols.
//!
//! How a request flows:
//!
//! ```text
//! socket ─> overload (request id, rate limit, concurrency limit, deadline)
//!        ─> api::{kserve::{http, grpc}, tfserving::{rest, grpc}} (wire -> Tensor; decoding
//!           only, with the JSON codec in api::json and the HTTP plumbing in api::http)
//!        ─> infer::InferService::prepare (resolve model@version, pick the signature,
//!           validate: a batcher::ValidRequest)
//!        ─> batcher (bounded queue per version; drops expired work; up to `[instances]`
//!           batches at once; a fast model's request that finds the queue empty and an
//!           instance free runs inline instead)
//!        ─> backend::Backend (ONNX Runtime, on a blocking thread, or inline under
//!           `--inline-run-max-us`)
//!        <─ outputs encoded in the caller's protocol
//! ```
//!
//! Errors: each layer has its own enum named for what failed there (`tensor::DecodeError`,
//! `batcher::RequestError`, `batcher::BatcherError`, `backend::BackendError`, ...), and each
//! says which [`error_kind::ErrorKind`] it is. They meet in [`error::Error`] on the request
//! path; the kind alone picks the HTTP status, the gRPC code and the stable `error_type`
//! ([`error_kind::ErrorKind::table`], one table at the bottom of the crate for both protocols
//! and the overload layers). A client's mistakes in what it sent are [`wire_error`] enums
//! grouped by concern (the body, the KServe infer request, parameters, shared-memory windows,
//! the TF Serving predict body and model spec):
//! adapters build typed values rather than format messages, and add context by wrapping
//! (`in_input`), so a message's words live in one `#[error]` each. Lower layers never
//! import higher ones: `error_kind` and `version` sit at the bottom, `error` above the layers
//! whose failures it gathers (the repository answers with its own `RepositoryError`), `api`
//! on top; `tests/import_graph.rs` fails on any circle between files or top-level modules,
//! and ARCHITECTURE.md draws the floors. Nothing a client sends may panic the server:
//! `unwrap`, `expect` and `panic!` are denied outside tests.
//!
//! - [`api`]: the front door (shared state, hot routes, health, scrape) and a folder per
//!   protocol transport, each a dispatcher above its operations.
//! - [`infer`]: `InferService`, the one way into a model.
//! - [`traffic`]: a model's rollout: the split between versions, shadow copies, score
//!   histograms.
//! - [`config`]: flags, environment and config file, parsed once in `main`.
//! - [`repository`]: the model directory and the versions that serve.
//! - [`backend`]: the `Backend` trait and its runtimes.
//! - [`pipeline`]: ensembles (Triton's `platform: "ensemble"`): the checked graph of steps and
//!   the scheduler that runs a request through them.
//! - [`background`]: the tasks beside the server, watched: one that dies makes it unready.
//! - [`batcher`]: per-version dynamic batching in front of a backend (bounded queue, one batch
//!   in flight per instance).
//! - [`tensor`]: the one domain tensor type and its decoding limits.
//! - [`overload`]: the tower stack both servers run, read top to bottom as policy.
//! - [`auth`]: which API groups a bearer token may use (`--auth-token-file`).
//! - [`request`]: what travels with a request besides its body (id, protocol, deadline).
//! - [`rest_target`]: what a TF Serving REST path names, read alike by auth and dispatch.
//! - [`metrics`]: every Prometheus metric, built once and passed in.
//! - [`log_sink`]: stderr for the log: a line per event, dropped and counted when unwritable.
//! - [`build_info`]: the version and the backends compiled in (`--version`, `build_info`).
//! - [`server`]: binds nothing itself; takes listeners and a shutdown future, and drains.
//! - [`transport`]: accepting, TLS and the connection limits of every port.
//! - [`shm`]: Triton's system shared-memory extension: regions registered, mapped and guarded.
//! - [`stats`]: per-model-version counters for KServe's statistics API.
//! - [`version`]: which version of a model a request asks for, parsed once.
//! - [`textproto`]: text-format protobuf, as TF Serving's and Triton's config files are written.
//! - [`proto`]: the wire types and gRPC services generated from `proto/`.
//! - [`cpu_wakeup`]: the kernel's CPU wake-up latency limit (`--cpu-wakeup-latency-us`).

pub mod api;
pub mod auth;
pub mod backend;
pub mod background;
pub mod batcher;
pub mod build_info;
pub mod cache;
pub mod config;
pub mod cpu_wakeup;
pub mod error;
pub mod error_kind;
pub mod infer;
pub mod log_settings;
pub mod log_sink;
pub mod logging;
pub mod metrics;
pub mod overload;
pub mod payload_log;
pub mod pipeline;
pub mod proto;
pub mod repository;
pub mod request;
pub mod rest_target;
pub mod server;
pub mod shm;
pub mod stats;
pub mod tensor;
pub mod textproto;
pub mod trace;
pub mod traffic;
pub mod transport;
pub mod version;
pub mod wire_error;

pub use error::{Error, ErrorKind};
pub use server::{run, Listeners, ServerOptions};
