//! Per-model-version counters, reported by KServe's statistics API.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
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
    /// Per execution: gathering inputs, inside the runtime, splitting outputs. One lock for
    /// the three, so a reader always sees them counted together (Triton's clients check).
    compute: Mutex<ComputeTimes>,
    /// Inferences (rows along the batch dimension) and runtime executions.
    pub inference_count: AtomicU64,
    pub execution_count: AtomicU64,
    /// Milliseconds since the epoch of the last inference.
    pub last_inference_ms: AtomicU64,
}

/// Time spent in the three phases of executions, and how many executions.
#[derive(Debug, Default, Clone, Copy)]
pub struct ComputeTimes {
    pub count: u64,
    pub input_ns: u64,
    pub infer_ns: u64,
    pub output_ns: u64,
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

impl ModelStats {
    /// Records one execution's phases.
    pub fn record_compute(&self, input: Duration, infer: Duration, output: Duration) {
        let mut times = self
            .compute
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        times.count += 1;
        times.input_ns = times.input_ns.saturating_add(nanos(input));
        times.infer_ns = times.infer_ns.saturating_add(nanos(infer));
        times.output_ns = times.output_ns.saturating_add(nanos(output));
    }

    pub fn compute(&self) -> ComputeTimes {
        *self
            .compute
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

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
