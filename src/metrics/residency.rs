//! Metrics of models under a memory budget: what each resident version holds, loads on
//! demand, evictions, and how long requests waited for a load.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::labels::{Histograms, ModelLabels, VersionLabels};

/// Load waits, in seconds: 1 ms to 2 minutes (a large model's load).
fn load_wait_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
    ])
}

/// The residency families; [`super::Metrics`] holds one and forwards its public methods here.
pub(super) struct ResidencyMetrics {
    memory: Family<VersionLabels, Gauge>,
    loads_on_demand: Family<ModelLabels, Counter>,
    evictions: Family<ModelLabels, Counter>,
    load_wait: Histograms<ModelLabels>,
    load_waiters: Family<ModelLabels, Gauge>,
}

impl ResidencyMetrics {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            memory: Family::default(),
            loads_on_demand: Family::default(),
            evictions: Family::default(),
            load_wait: Family::new_with_constructor(load_wait_histogram),
            load_waiters: Family::default(),
        };
        registry.register(
            "model_memory_bytes",
            "Memory each resident model version is charged against --model-memory-budget: \
             what its load took (resident memory before and after, at least its files' size) \
             plus what its runtime's arenas grew by since",
            metrics.memory.clone(),
        );
        registry.register(
            "model_loads_on_demand",
            "Model versions loaded because a request needed them (--model-memory-budget)",
            metrics.loads_on_demand.clone(),
        );
        registry.register(
            "model_evictions",
            "Model versions unloaded to make room under --model-memory-budget",
            metrics.evictions.clone(),
        );
        registry.register(
            "model_load_wait_seconds",
            "Time requests waited for their model version to load",
            metrics.load_wait.clone(),
        );
        registry.register(
            "model_load_waiters",
            "Requests waiting now for their model version to load",
            metrics.load_waiters.clone(),
        );
        metrics
    }
}

impl ResidencyMetrics {
    pub(super) fn record_load_on_demand(&self, name: &str) {
        self.loads_on_demand.get_or_create(&model(name)).inc();
    }

    pub(super) fn record_eviction(&self, name: &str) {
        self.evictions.get_or_create(&model(name)).inc();
    }

    pub(super) fn observe_load_wait(&self, name: &str, waited: std::time::Duration) {
        self.load_wait
            .get_or_create(&model(name))
            .observe(waited.as_secs_f64());
    }

    /// Counts a request as waiting for `name` to load until the returned guard drops.
    pub(super) fn wait_for_load(&self, name: &str) -> LoadWaiter {
        let gauge = self.load_waiters.get_or_create(&model(name)).clone();
        gauge.inc();
        LoadWaiter(gauge)
    }

    /// Requests waiting now for a version of `name` to load.
    pub(super) fn load_waiters(&self, name: &str) -> i64 {
        self.load_waiters.get_or_create(&model(name)).get()
    }

    /// Starts a model's residency counters at zero.
    pub(super) fn register_model(&self, name: &str) {
        let labels = model(name);
        drop(self.loads_on_demand.get_or_create(&labels));
        drop(self.evictions.get_or_create(&labels));
    }

    /// Replaces the memory gauges with `versions` (model, version, bytes): resident ones only.
    pub(super) fn set_model_memory(&self, versions: impl IntoIterator<Item = (String, u64, u64)>) {
        self.memory.clear();
        for (model, version, bytes) in versions {
            self.memory
                .get_or_create(&VersionLabels {
                    model,
                    version: version.to_string(),
                })
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }
}

fn model(name: &str) -> ModelLabels {
    ModelLabels {
        model: name.to_owned(),
    }
}

/// One request counted in `tensorport_model_load_waiters` while it lives.
pub struct LoadWaiter(Gauge);

impl Drop for LoadWaiter {
    fn drop(&mut self) {
        self.0.dec();
    }
}
