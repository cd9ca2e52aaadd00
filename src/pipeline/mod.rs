//! Ensembles: several models run as one, Triton's `platform: "ensemble"`.
//!
//! An ensemble names its steps (a model, a version, which ensemble tensor feeds each of the
//! model's inputs and which ensemble tensor each of its outputs becomes) and declares its own
//! inputs and outputs. [`check`] turns the configured steps into an [`Ensemble`] when it
//! loads, against the signatures of the step models serving then: every tensor produced once,
//! every tensor read produced by something, no cycle, dtypes and shapes that agree between a
//! producer and each consumer. [`schedule::run`] then runs one request through it, wave by
//! wave: the steps whose inputs are all ready run together, and a step's outputs are handed to
//! the next as the same tensors (reference counted), never re-encoded or copied.
//!
//! This module knows no repository and no batcher: a [`StepRunner`] (the request path's
//! `InferService`) runs each step on the step model's own version, so that every step goes
//! through its model's batcher, with the ensemble request's deadline and priority.

mod backend;
mod config;
mod graph;
pub mod schedule;

pub use backend::{EnsembleBackend, ENSEMBLE_PLATFORM};
pub use config::{EnsembleConfig, StepConfig};
pub use graph::{check, Ensemble, GraphError, Step};
pub use schedule::{PipelineError, StepCall, StepRunner};
