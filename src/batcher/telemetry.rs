//! Where a batcher reports what it did, and how it counts a request's inferences: a leaf that
//! the request side, the actor and the runner all read, so that none imports another for it.

use std::sync::Arc;

use crate::backend::NamedTensor;
use crate::metrics::Metrics;
use crate::stats::ModelStats;

/// Where the actor reports what it did: the version's statistics and the server's metrics.
#[derive(Clone, Default)]
pub struct Telemetry {
    pub stats: Arc<ModelStats>,
    pub metrics: Arc<Metrics>,
    /// The version the batcher serves, for the metrics' labels.
    pub version: u64,
}

/// Inferences in Triton's sense: rows along dimension 0 (1 for a scalar input), counted
/// whether or not the requests were merged.
pub(super) fn inferences(inputs: &[NamedTensor]) -> u64 {
    inputs
        .first()
        .and_then(|(_, t)| t.shape().first().copied())
        .unwrap_or(1) as u64
}
