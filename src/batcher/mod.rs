//! The dynamic batcher: one per loaded model version.
//!
//! ```text
//! BatcherHandle::enqueue ─try_send─> bounded channel ─> actor (task.rs)
//!                                                        │ BatchQueue (queue.rs, rules in policy.rs): when
//!                                                        │   to cut, what to drop
//!                                                        │ gather (gather.rs): merge inputs along dim 0
//!                                                        └ spawn_blocking (long runs: -> the instance's
//!                                                          own thread, instance_threads.rs): Backend::run
//! reply <─ oneshot <─ scatter (gather.rs): split outputs by each request's rows
//! ```
//!
//! A fast model's request that finds the queue empty and an instance free skips all of this
//! and runs on the caller's thread (handle.rs says when, instances.rs how "fast" is measured).
//! A request with more rows than `split_rows` is cut into pieces that queue on their own and
//! run on free instances at once (split.rs).
//!
//! The files import one way: start.rs (which spawns the actor and builds its handle) above
//! handle.rs (the request side) and task.rs (the actor), both above runner.rs (the backend,
//! the instances and where runs are counted), above execute.rs (one batch), above the
//! leaves: channel.rs, error.rs, flush.rs, gather.rs, policy.rs, request.rs, settings.rs,
//! telemetry.rs. split.rs sits between handle.rs, which calls it, and the leaves; queue.rs
//! (the waiting requests, kept in order for the rules of policy.rs) between task.rs and
//! policy.rs.
//!
//! A batcher takes only a [`ValidRequest`], whose constructor checks it against its signature
//! and resolves its output list; the batcher trusts both and only checks what merging needs:
//! that the requests of one batch agree on everything but dimension 0, and that the outputs
//! come back with one row per input row.

mod alarm;
mod channel;
mod error;
mod execute;
mod flush;
mod gather;
mod handle;
mod instance_threads;
mod instances;
mod policy;
mod priority;
mod queue;
mod request;
mod runner;
mod settings;
mod split;
mod start;
mod task;
mod telemetry;
#[cfg(test)]
mod tests;

pub use error::{BatchError, BatcherError, TooManyPieces};
pub use flush::Flush;
pub use gather::{batch_key, gather, scatter, BatchKey};
pub use handle::{BatcherHandle, Pending};
pub use policy::{BatchPolicy, Next, Queued, Step};
pub use priority::Priority;
pub use queue::BatchQueue;
pub use request::{RequestError, RunTime, ValidRequest};
pub use runner::Execution;
pub use settings::{BatchSettings, SettingsError, MAX_QUEUE_SIZE};
pub use task::Batcher;
pub use telemetry::Telemetry;
