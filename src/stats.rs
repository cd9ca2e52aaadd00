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
    /// Answers from the response cache, and the time to find and copy them out; misses, and
    /// the time to look up and to store their answers (Triton's `cache_hit`, `cache_miss`).
    pub cache_hit: Duration64,
    pub cache_miss: Duration64,
    /// Per execution: gathering inputs, inside the runtime, splitting outputs. One lock for
    /// the three, so a reader always sees them counted together (Triton's clients check).
    compute: Mutex<Executions>,
    /// Inferences (rows along the batch dimension) and runtime executions.
    pub inference_count: AtomicU64,
    pub execution_count: AtomicU64,
    /// Milliseconds since the epoch of the last inference.
    pub last_inference_ms: AtomicU64,
    /// Requests that named no version and that the model's `[traffic]` split sent here.
    pub split_requests: AtomicU64,
    /// Per instance (by index): batches run and the time spent running them.
    busy: Mutex<Vec<(u64, u64)>>,
}

#[derive(Debug, Default)]
struct Executions {
    total: ComputeTimes,
    /// The same, per executed batch size (rows along dimension 0).
    by_batch_size: std::collections::BTreeMap<u64, ComputeTimes>,
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

impl ComputeTimes {
    fn add(&mut self, input: Duration, infer: Duration, output: Duration) {
        self.count += 1;
        self.input_ns = self.input_ns.saturating_add(nanos(input));
        self.infer_ns = self.infer_ns.saturating_add(nanos(infer));
        self.output_ns = self.output_ns.saturating_add(nanos(output));
    }
}

impl ModelStats {
    /// Records one execution of `batch_size` rows and its phases.
    pub fn record_compute(
        &self,
        batch_size: u64,
        input: Duration,
        infer: Duration,
        output: Duration,
    ) {
        let mut executions = self
            .compute
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        executions.total.add(input, infer, output);
        executions
            .by_batch_size
            .entry(batch_size)
            .or_default()
            .add(input, infer, output);
    }

    /// All executions together.
    pub fn compute(&self) -> ComputeTimes {
        self.compute
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .total
    }

    /// Executions by batch size, ascending.
    pub fn batches(&self) -> Vec<(u64, ComputeTimes)> {
        self.compute
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .by_batch_size
            .iter()
            .map(|(size, times)| (*size, *times))
            .collect()
    }

    /// Records that instance `instance` spent `took` running one batch.
    pub fn record_busy(&self, instance: usize, took: Duration) {
        let mut busy = self
            .busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if busy.len() <= instance {
            busy.resize(instance + 1, (0, 0));
        }
        if let Some((count, ns)) = busy.get_mut(instance) {
            *count += 1;
            *ns = ns.saturating_add(nanos(took));
        }
    }

    /// Per instance that has run at least one batch (by index): `(batches, busy nanoseconds)`.
    pub fn instance_busy(&self) -> Vec<(u64, u64)> {
        self.busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn record_execution(&self, rows: u64) {
        self.inference_count.fetch_add(rows, Ordering::Relaxed);
        self.execution_count.fetch_add(1, Ordering::Relaxed);
        self.touch();
    }

    /// Records a request of `rows` inferences answered from the response cache in `took`:
    /// as Triton counts one, a success, a (zero) queue wait and inferences, but no execution.
    pub fn record_cache_hit(&self, rows: u64, took: Duration) {
        self.cache_hit.record(took);
        self.success.record(took);
        self.queue.record(Duration::ZERO);
        self.inference_count.fetch_add(rows, Ordering::Relaxed);
        self.touch();
    }

    fn touch(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default();
        self.last_inference_ms.store(now, Ordering::Relaxed);
    }
}
