//! Per-model-version counters, reported by KServe's statistics API.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A count and the total time it took.
#[derive(Debug, Default)]
pub struct Duration64 {
    count: AtomicU64,
    ns: AtomicU64,
}

impl Duration64 {
    pub fn record(&self, elapsed: Duration) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.ns.fetch_add(
            elapsed.as_nanos().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    /// `(count, total nanoseconds)`.
    pub fn get(&self) -> (u64, u64) {
        (
            self.count.load(Ordering::Relaxed),
            self.ns.load(Ordering::Relaxed),
        )
    }
}

/// What one model version has done since it loaded.
#[derive(Debug, Default)]
pub struct ModelStats {
    /// Requests answered, and their time from arrival at the model to outputs.
    pub success: Duration64,
    pub fail: Duration64,
    /// Time spent waiting for the runtime.
    pub queue: Duration64,
    /// Per execution: gathering inputs, inside the runtime, splitting outputs.
    pub compute_input: Duration64,
    pub compute_infer: Duration64,
    pub compute_output: Duration64,
    /// Inferences (rows along the batch dimension) and runtime executions.
    pub inference_count: AtomicU64,
    pub execution_count: AtomicU64,
    /// Milliseconds since the epoch of the last inference.
    pub last_inference_ms: AtomicU64,
}

impl ModelStats {
    pub fn record_execution(&self, rows: u64) {
        self.inference_count.fetch_add(rows, Ordering::Relaxed);
        self.execution_count.fetch_add(1, Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default();
        self.last_inference_ms.store(now, Ordering::Relaxed);
    }
}
