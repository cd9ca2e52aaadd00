//! Metrics of a rollout: the split's weights and the requests it routed, shadow copies and how
//! far their answers were from the primary's, and the score distribution of each version.
//! Every label value is a loaded model's name, a version number, or an output or target name
//! from the model's own configuration, so the series stay bounded whatever clients send.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::labels::Histograms;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ModelVersion {
    model: Arc<str>,
    version: u64,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SplitTarget {
    model: String,
    target: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ShadowModel {
    model: Arc<str>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ShadowDrop {
    model: Arc<str>,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ShadowOutput {
    model: Arc<str>,
    output: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ScoreOutput {
    model: Arc<str>,
    version: u64,
    output: String,
}

/// Why a shadow copy was not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShadowDropReason {
    /// The copy queue was full: in copies, or in bytes (`SHADOW_QUEUE_BYTES`).
    QueueFull,
    /// The target version (or the primary's) had requests waiting: copies never compete.
    Busy,
    /// The server was near its limit on requests in flight.
    NearLimit,
    /// An input was in the client's shared memory, which it may reuse once answered.
    SharedMemoryInput,
    /// The target version was not serving.
    TargetUnavailable,
    /// What the copy would hold did not fit what was left of the request memory budget
    /// (`--max-inflight-request-bytes`).
    Memory,
}

impl ShadowDropReason {
    pub const ALL: [Self; 6] = [
        Self::QueueFull,
        Self::Busy,
        Self::NearLimit,
        Self::SharedMemoryInput,
        Self::TargetUnavailable,
        Self::Memory,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::Busy => "busy",
            Self::NearLimit => "near_limit",
            Self::SharedMemoryInput => "shared_memory_input",
            Self::TargetUnavailable => "target_unavailable",
            Self::Memory => "memory",
        }
    }
}

/// Largest absolute differences between two answers: exact agreement to far apart.
fn difference_histogram() -> Histogram {
    Histogram::new([
        0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0, 100.0,
    ])
}

/// Scores: fine steps over [0, 1] (probabilities), coarse ones beyond (logits).
fn score_histogram() -> Histogram {
    let fine = (0..=20).map(|step| f64::from(step) * 0.05);
    let coarse = [-100.0, -10.0, -5.0, -2.0, -1.0, -0.5];
    let above = [2.0, 5.0, 10.0, 100.0];
    Histogram::new(coarse.into_iter().chain(fine).chain(above))
}

/// The rollout families; [`super::Metrics::traffic`] hands them out.
pub struct TrafficMetrics {
    split_weight: Family<SplitTarget, Gauge>,
    split_requests: Family<ModelVersion, Counter>,
    shadow_sent: Family<ShadowModel, Counter>,
    shadow_dropped: Family<ShadowDrop, Counter>,
    shadow_failed: Family<ShadowModel, Counter>,
    shadow_difference: Histograms<ShadowOutput>,
    scores: Histograms<ScoreOutput>,
}

impl TrafficMetrics {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            split_weight: Family::default(),
            split_requests: Family::default(),
            shadow_sent: Family::default(),
            shadow_dropped: Family::default(),
            shadow_failed: Family::default(),
            shadow_difference: Family::new_with_constructor(difference_histogram),
            scores: Family::new_with_constructor(score_histogram),
        };
        registry.register(
            "traffic_split_weight",
            "The weight of each target of a model's [traffic] split, as its config.toml says now",
            metrics.split_weight.clone(),
        );
        registry.register(
            "traffic_split_requests",
            "Requests that named no version and were sent to a version by the model's split",
            metrics.split_requests.clone(),
        );
        registry.register(
            "shadow_copies_sent",
            "Shadow copies run on the model's [traffic.shadow] target",
            metrics.shadow_sent.clone(),
        );
        registry.register(
            "shadow_copies_dropped",
            "Shadow copies not run, by reason: the primary's answer is never held up for one",
            metrics.shadow_dropped.clone(),
        );
        registry.register(
            "shadow_copies_failed",
            "Shadow copies whose run failed or whose answer could not be compared",
            metrics.shadow_failed.clone(),
        );
        registry.register(
            "shadow_max_abs_difference",
            "Per output, the largest absolute difference between a shadow copy's answer and \
             the primary's",
            metrics.shadow_difference.clone(),
        );
        registry.register(
            "model_output_score",
            "Each row's value of the outputs [metrics] score_histograms names, by model, \
             version and output",
            metrics.scores.clone(),
        );
        metrics
    }

    /// Replaces the weights of `model`'s split with `targets` (target as written, weight).
    pub fn set_split_weights<'a>(
        &self,
        model: &str,
        targets: impl IntoIterator<Item = (&'a str, u64)>,
    ) {
        for (target, weight) in targets {
            self.split_weight
                .get_or_create(&SplitTarget {
                    model: model.to_owned(),
                    target: target.to_owned(),
                })
                .set(i64::try_from(weight).unwrap_or(i64::MAX));
        }
    }

    pub fn record_split(&self, model: &Arc<str>, version: u64) {
        self.split_requests
            .get_or_create(&ModelVersion {
                model: model.clone(),
                version,
            })
            .inc();
    }

    /// Starts `model`'s shadow counters at zero, so that a dashboard's rates and ratios
    /// exist from the first scrape after a shadow is configured rather than after its first
    /// copy, drop or failure.
    pub fn announce_shadow(&self, model: &str) {
        let model: Arc<str> = Arc::from(model);
        let labels = ShadowModel {
            model: model.clone(),
        };
        // `get_or_create` makes the series; the handle it returns is not needed.
        drop(self.shadow_sent.get_or_create(&labels));
        drop(self.shadow_failed.get_or_create(&labels));
        for reason in ShadowDropReason::ALL {
            drop(self.shadow_dropped.get_or_create(&ShadowDrop {
                model: model.clone(),
                reason: reason.label(),
            }));
        }
    }

    pub fn record_shadow_sent(&self, model: &Arc<str>) {
        let labels = ShadowModel {
            model: model.clone(),
        };
        self.shadow_sent.get_or_create(&labels).inc();
    }

    pub fn record_shadow_dropped(&self, model: &Arc<str>, reason: ShadowDropReason) {
        let labels = ShadowDrop {
            model: model.clone(),
            reason: reason.label(),
        };
        self.shadow_dropped.get_or_create(&labels).inc();
    }

    /// Copies of `model` dropped for `reason` so far.
    pub fn shadow_dropped(&self, model: &str, reason: ShadowDropReason) -> u64 {
        let labels = ShadowDrop {
            model: Arc::from(model),
            reason: reason.label(),
        };
        self.shadow_dropped
            .get(&labels)
            .map_or(0, |count| count.get())
    }

    /// Copies of `model` run so far.
    pub fn shadow_sent(&self, model: &str) -> u64 {
        let labels = ShadowModel {
            model: Arc::from(model),
        };
        self.shadow_sent.get(&labels).map_or(0, |count| count.get())
    }

    pub fn record_shadow_failed(&self, model: &Arc<str>) {
        let labels = ShadowModel {
            model: model.clone(),
        };
        self.shadow_failed.get_or_create(&labels).inc();
    }

    pub fn observe_shadow_difference(&self, model: &Arc<str>, output: &str, difference: f64) {
        let labels = ShadowOutput {
            model: model.clone(),
            output: output.to_owned(),
        };
        self.shadow_difference
            .get_or_create(&labels)
            .observe(difference);
    }

    /// Observes every value of `values`, one output's rows, for one model version.
    pub fn observe_scores(
        &self,
        model: &Arc<str>,
        version: u64,
        output: &str,
        values: impl IntoIterator<Item = f64>,
    ) {
        let labels = ScoreOutput {
            model: model.clone(),
            version,
            output: output.to_owned(),
        };
        let histogram = self.scores.get_or_create(&labels);
        for value in values {
            histogram.observe(value);
        }
    }
}
