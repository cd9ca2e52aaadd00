//! Score histograms: every value of the outputs `[metrics] score_histograms` names, observed
//! per model version after each run that answers a client (warmup runs on the backend
//! directly and never reaches here). An output of shape [N, 1] (or [N]) gives N observations,
//! one per row; a wider one, [N, K], gives N * K, every element, since a histogram of scores
//! has no notion of which column is the score.

use super::values::values;
use crate::backend::NamedTensor;
use crate::metrics::TrafficMetrics;
use crate::repository::{LoadedModel, Rollout};

pub(super) fn observe(
    metrics: &TrafficMetrics,
    rollout: &Rollout,
    model: &LoadedModel,
    outputs: &[NamedTensor],
) {
    for wanted in &rollout.score_outputs {
        let Some((name, tensor)) = outputs.iter().find(|(name, _)| name == wanted) else {
            continue;
        };
        if let Some(values) = values(tensor) {
            metrics.observe_scores(&model.name, model.version, name, values);
        }
    }
}
