//! ONNX models on ONNX Runtime through `ort` (loaded at run time from `libonnxruntime.so`).
//!
//! Inputs reach the runtime as tensors over the request's own bytes (`TensorRef`), so a request
//! that runs alone is not copied; outputs stay in the buffers the runtime allocated and are
//! handed to the protocol encoders as `Bytes` that own them.
//!
//! - `runtime`: the library and its environment, and building a model's sessions.
//! - `model`: a loaded version, its sessions and a run, outputs placed in caller memory where
//!   their shape is known first.
//! - `options`: the session options a model may set (graph optimizations, the CPU arena,
//!   ...), applied to its session builder.
//! - `arena`: what each session's CPU arena holds, measured after the runs that can grow it.
//! - `types`: the signature read from a session, and ONNX's element types against ours.
//! - `inputs` / `outputs`: tensors into the runtime over the request's bytes, and out of it
//!   in the buffers it allocated.
//!
//! The calls `ort`'s safe API lacks are in `super::onnx_raw`, the backend's one `unsafe` file.

mod arena;
mod inputs;
mod model;
mod options;
mod outputs;
mod runtime;
mod types;

pub use model::OnnxModel;
pub use options::{ExecutionMode, GraphOptimization, OnnxSessionOptions};
pub use runtime::OnnxRuntime;
