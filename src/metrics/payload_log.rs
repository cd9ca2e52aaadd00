//! `tensorport_payload_log_records_total{model,outcome}`, which each model's payload-log
//! writer counts into.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RecordLabels {
    model: String,
    outcome: &'static str,
}

/// The family, registered once; [`Self::counts`] resolves one model's handles.
#[derive(Clone, Debug, Default)]
pub struct PayloadLogMetrics {
    records: Family<RecordLabels, Counter>,
}

impl PayloadLogMetrics {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "payload_log_records",
            "Payload-log records of sampled requests: written (whole in their file), or dropped \
             because the queue was full (outcome=queue_full) or the file could not be opened or \
             written (outcome=write_error, one per record lost)",
            metrics.records.clone(),
        );
        metrics
    }

    /// `model`'s counters.
    pub fn counts(&self, model: &str) -> PayloadLogCounts {
        let counter = |outcome| {
            self.records.get_or_create_owned(&RecordLabels {
                model: model.to_string(),
                outcome,
            })
        };
        PayloadLogCounts {
            written: counter("written"),
            queue_full: counter("queue_full"),
            write_error: counter("write_error"),
        }
    }
}

/// One model's counters (registered nowhere by default, for writers run without a server).
#[derive(Clone, Debug, Default)]
pub struct PayloadLogCounts {
    pub written: Counter,
    pub queue_full: Counter,
    pub write_error: Counter,
}
