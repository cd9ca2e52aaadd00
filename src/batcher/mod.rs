//! The dynamic batcher: one per loaded model version.
//!
//! ```text
//! BatcherHandle::enqueue ─try_send─> bounded channel ─> actor (task.rs)
//!                                                        │ BatchQueue (policy.rs): when to cut, what to drop
//!                                                        │ gather (gather.rs): merge inputs along dim 0
//!                                                        └ spawn_blocking: Backend::run, one batch in flight
//! reply <─ oneshot <─ scatter (gather.rs): split outputs by each request's rows
//! ```
//!
//! Callers validate a request against its signature first (`infer::check_inputs`) and resolve
//! its output list; the batcher trusts both and only checks what merging needs: that the
//! requests of one batch agree on everything but dimension 0, and that the outputs come back
//! with one row per input row.

mod policy;
mod settings;

pub use policy::{BatchPolicy, BatchQueue, Next, Queued, Step};
pub use settings::{BatchSettings, SettingsError, MAX_QUEUE_SIZE};
