//! The handles of one model version's batcher, resolved once from [`super::Metrics::model`].

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use super::labels::{batch_histogram, latency_histogram};

/// The histograms of one model version, resolved once so that the batcher does not look up
/// its labels on every batch.
#[derive(Clone)]
pub struct ModelMetrics {
    pub(super) queue_wait: Histogram,
    pub(super) inference: Histogram,
    pub(super) batch_size: Histogram,
    pub(super) inline_runs: Counter,
}

impl ModelMetrics {
    pub fn observe_queue_wait(&self, waited: std::time::Duration) {
        self.queue_wait.observe(waited.as_secs_f64());
    }

    pub fn observe_execution(&self, took: std::time::Duration, rows: u64) {
        self.inference.observe(took.as_secs_f64());
        self.batch_size.observe(rows as f64);
    }

    /// Counts a request that ran on its caller's thread, without the batcher's queue.
    pub fn count_inline_run(&self) {
        self.inline_runs.inc();
    }

    /// Requests run on their caller's thread so far.
    pub fn inline_runs(&self) -> u64 {
        self.inline_runs.get()
    }
}

impl Default for ModelMetrics {
    /// Handles registered nowhere, for batchers run without a server (tests).
    fn default() -> Self {
        Self {
            queue_wait: latency_histogram(),
            inference: latency_histogram(),
            batch_size: batch_histogram(),
            inline_runs: Counter::default(),
        }
    }
}
