//! Prometheus metrics, built once at start-up and passed to whoever records them. Names follow
//! Prometheus conventions: prefix `tensorport_`, base units in the name (`_seconds`,
//! `_bytes`), `_total` on counters (added by the encoder). The process's own figures carry the
//! standard `process_*` names, without the prefix, as every Prometheus client exports them.
//!
//! This file holds [`Metrics`], the registry and the request-path families. Beside it, by
//! concern: `labels` (the leaf: label sets, buckets, the public label values), `model` (one
//! version's batcher handles), `lifecycle` (loads, unloads, readiness), `residency` (models
//! under a memory budget), `response_cache` (the store), `traffic` (splits, shadow copies,
//! scores), `send_timeouts` and `process`. [`Metrics`] holds the families of
//! each and forwards its public methods to them, so the imports run one way: down from here.
//! `peers` writes Triton's and TF Serving's names for the same figures at scrape time.

mod labels;
mod lifecycle;
mod model;
mod payload_log;
mod peers;
mod process;
mod residency;
mod response_cache;
mod send_timeouts;
mod traffic;

pub use crate::trace::TraceCounters;
pub use labels::{CopyStage, ModelEvent, RefusalReason, SecondsCounter};
pub use model::ModelMetrics;
pub use payload_log::{PayloadLogCounts, PayloadLogMetrics};
pub use peers::VersionFigures;
pub use residency::LoadWaiter;
pub use response_cache::CacheFigures;
pub use send_timeouts::SendTimeouts;
pub use traffic::{ShadowDropReason, TrafficMetrics};

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::request::Protocol;
use crate::trace::counters::register_trace_counters;
use labels::{
    batch_histogram, latency_histogram, BuildLabels, Histograms, InstanceLabels, LatencyLabels,
    RefusalLabels, RequestLabels, StageLabels, VersionLabels,
};
use send_timeouts::register_send_timeouts;

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    tensor_bytes_copied: Family<StageLabels, Counter>,
    shm_regions: Gauge,
    shm_bytes_mapped: Gauge,
    requests: Family<RequestLabels, Counter>,
    request_duration: Histograms<LatencyLabels>,
    queue_wait: Histograms<VersionLabels>,
    inference_duration: Histograms<VersionLabels>,
    batch_size: Histograms<VersionLabels>,
    queue_depth: Family<VersionLabels, Gauge>,
    instance_busy: Family<InstanceLabels, SecondsCounter>,
    inline_runs: Family<VersionLabels, Counter>,
    in_flight: Gauge,
    log_lines_dropped: Counter,
    refusals: Family<RefusalLabels, Counter>,
    lifecycle: lifecycle::ModelLifecycle,
    residency: residency::ResidencyMetrics,
    response_cache: response_cache::ResponseCacheMetrics,
    traffic: TrafficMetrics,
    send_timeouts: SendTimeouts,
    traces: TraceCounters,
    payload_log: PayloadLogMetrics,
    request_memory: Gauge,
    memory_trims: Counter,
    /// Whether scrapes carry the peers' names too (`--peer-metric-names`).
    peer_names: bool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(process::ProcessCollector::new()));
        let registry = root.sub_registry_with_prefix("tensorport");
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                backends: crate::build_info::BACKENDS,
            })
            .set(1);
        registry.register(
            "build_info",
            "Always 1: the server's version and the model formats (backends) compiled in",
            build_info,
        );
        let tensor_bytes_copied = Family::<StageLabels, Counter>::default();
        // Every stage is exported from the start, at 0, so a scrape shows what is not copied.
        for stage in [
            CopyStage::InputAlignment,
            CopyStage::BatchGather,
            CopyStage::SharedMemoryOutput,
        ] {
            drop(tensor_bytes_copied.get_or_create(&StageLabels {
                stage: stage.label(),
            }));
        }
        registry.register(
            "tensor_copied_bytes",
            "Tensor bytes copied on the request path, by stage",
            tensor_bytes_copied.clone(),
        );
        let shm_regions = Gauge::default();
        registry.register(
            "shared_memory_regions",
            "Registered system shared-memory regions",
            shm_regions.clone(),
        );
        let shm_bytes_mapped = Gauge::default();
        registry.register(
            "shared_memory_mapped_bytes",
            "Bytes of registered system shared-memory regions",
            shm_bytes_mapped.clone(),
        );
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by model, version, protocol and outcome (the error_type of the \
             error table, ok, or cancelled when the client left first)",
            requests.clone(),
        );
        let request_duration: Histograms<LatencyLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "request_duration_seconds",
            "Time from a request's arrival to its answer, by protocol, model and version",
            request_duration.clone(),
        );
        let queue_wait: Histograms<VersionLabels> = Family::new_with_constructor(latency_histogram);
        registry.register(
            "queue_wait_seconds",
            "Time requests waited in their model version's queue before running",
            queue_wait.clone(),
        );
        let inference_duration: Histograms<VersionLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "inference_duration_seconds",
            "Time per executed batch: gathering inputs, the runtime, splitting outputs",
            inference_duration.clone(),
        );
        let batch_size: Histograms<VersionLabels> = Family::new_with_constructor(batch_histogram);
        registry.register(
            "batch_size_rows",
            "Rows (inferences) per executed batch",
            batch_size.clone(),
        );
        let queue_depth = Family::<VersionLabels, Gauge>::default();
        registry.register(
            "queue_depth_requests",
            "Requests waiting in a model version's queue, sampled at scrape time",
            queue_depth.clone(),
        );
        let instance_busy = Family::<InstanceLabels, SecondsCounter>::default();
        registry.register(
            "instance_busy_seconds",
            "Time each instance of a model version spent running batches",
            instance_busy.clone(),
        );
        let inline_runs = Family::<VersionLabels, Counter>::default();
        registry.register(
            "inline_runs",
            "Requests of a fast model run on the calling thread, without the batcher's queue",
            inline_runs.clone(),
        );
        let log_lines_dropped = Counter::default();
        registry.register(
            "log_lines_dropped",
            "Log lines that could not be written to stderr (a closed pipe, a full disk) and were \
             dropped",
            log_lines_dropped.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "requests_in_flight",
            "Requests admitted by the concurrency limit and not yet answered",
            in_flight.clone(),
        );
        let refusals = Family::<RefusalLabels, Counter>::default();
        // Every reason starts at zero on every protocol, so that dashboards and alerts see the
        // series (and `rate()` works) before the first refusal.
        for reason in RefusalReason::ALL {
            for protocol in Protocol::SERVING {
                refusals.get_or_create_owned(&RefusalLabels {
                    reason: reason.label(),
                    protocol: protocol.label(),
                });
            }
        }
        registry.register(
            "refusals",
            "Requests refused for overload, by reason and protocol",
            refusals.clone(),
        );
        let lifecycle = lifecycle::ModelLifecycle::register(registry);
        let residency = residency::ResidencyMetrics::register(registry);
        let response_cache = response_cache::ResponseCacheMetrics::register(registry);
        let traffic = TrafficMetrics::register(registry);
        let send_timeouts = register_send_timeouts(registry);
        let traces = register_trace_counters(registry);
        let payload_log = PayloadLogMetrics::register(registry);
        let request_memory = Gauge::default();
        registry.register(
            "request_memory_bytes",
            "Bytes charged to the request memory budget (--max-inflight-request-bytes): \
             requests in flight, as they take once decoded, and answers not yet sent",
            request_memory.clone(),
        );
        let memory_trims = Counter::default();
        registry.register(
            "memory_trims",
            "Times the server handed the memory its allocator kept free back to the operating \
             system, once idle after heavy request traffic",
            memory_trims.clone(),
        );
        Self {
            registry: root,
            tensor_bytes_copied,
            shm_regions,
            shm_bytes_mapped,
            requests,
            request_duration,
            queue_wait,
            inference_duration,
            batch_size,
            queue_depth,
            instance_busy,
            inline_runs,
            in_flight,
            log_lines_dropped,
            refusals,
            lifecycle,
            residency,
            response_cache,
            traffic,
            send_timeouts,
            traces,
            payload_log,
            request_memory,
            memory_trims,
            peer_names: true,
        }
    }

    /// Leaves Triton's and TF Serving's names out of scrapes.
    pub fn without_peer_names(mut self) -> Self {
        self.peer_names = false;
        self
    }

    /// The request memory budget's count, for the budget to keep.
    /// The split's, shadow copies' and score distributions' families.
    pub fn traffic(&self) -> &TrafficMetrics {
        &self.traffic
    }

    pub fn request_memory(&self) -> Gauge {
        self.request_memory.clone()
    }

    /// Counts the idle trimmer's trims (`repository::idle_trim`).
    pub fn memory_trims(&self) -> Counter {
        self.memory_trims.clone()
    }

    /// The counters of answers cut off for the send timeout, for the transport.
    pub fn send_timeouts(&self) -> SendTimeouts {
        self.send_timeouts.clone()
    }

    pub fn payload_log(&self) -> &PayloadLogMetrics {
        &self.payload_log
    }

    pub fn record_copy(&self, stage: CopyStage, bytes: usize) {
        if bytes > 0 {
            self.tensor_bytes_copied
                .get_or_create(&StageLabels {
                    stage: stage.label(),
                })
                .inc_by(bytes as u64);
        }
    }

    /// Bytes copied at `stage` so far.
    pub fn copied(&self, stage: CopyStage) -> u64 {
        self.tensor_bytes_copied
            .get_or_create(&StageLabels {
                stage: stage.label(),
            })
            .get()
    }

    /// Creates a model's counters at zero, so that dashboards and `rate()` see them from the
    /// model's first load rather than from its first event.
    pub fn register_model(&self, name: &str) {
        self.lifecycle.register_model(name);
        self.residency.register_model(name);
    }

    /// Replaces the model-ready gauges with `versions` (model, version, serving), so that
    /// versions the repository forgot disappear from the scrape.
    pub fn set_model_ready<'a>(&self, versions: impl IntoIterator<Item = (&'a str, u64, bool)>) {
        self.lifecycle.set_model_ready(versions);
    }

    pub fn record_model_event(&self, name: &str, event: ModelEvent) {
        self.lifecycle.record_model_event(name, event);
    }

    /// Samples the response cache's store (all zero without a cache).
    pub fn set_response_cache(&self, figures: CacheFigures) {
        self.response_cache.set(figures);
    }

    pub fn set_shared_memory(&self, regions: usize, bytes: u64) {
        self.shm_regions.set(regions as i64);
        self.shm_bytes_mapped.set(bytes.min(i64::MAX as u64) as i64);
    }

    /// Counts one answered request. `model` is `None` for requests that never resolved a
    /// model (refused at the edge, unknown model, control-plane calls).
    pub fn record_request(
        &self,
        protocol: Protocol,
        model: Option<(&Arc<str>, u64)>,
        outcome: &'static str,
        took: std::time::Duration,
    ) {
        // No allocation: the model's name is shared with the loaded version, and the labels
        // are built once, the counter's used to look up and then moved into the histogram's.
        let labels = RequestLabels {
            model: model.map_or_else(|| Arc::from(""), |(name, _)| name.clone()),
            version: model.map(|(_, version)| version),
            protocol: protocol.label(),
            outcome,
        };
        self.requests.get_or_create(&labels).inc();
        let RequestLabels { model, version, .. } = labels;
        self.request_duration
            .get_or_create(&LatencyLabels {
                model,
                version,
                protocol: protocol.label(),
            })
            .observe(took.as_secs_f64());
    }

    /// Requests counted so far with these labels (for tests and the benchmark).
    pub fn requests(
        &self,
        protocol: Protocol,
        model: Option<(&str, u64)>,
        outcome: &'static str,
    ) -> u64 {
        self.requests
            .get(&RequestLabels {
                model: Arc::from(model.map_or("", |(name, _)| name)),
                version: model.map(|(_, version)| version),
                protocol: protocol.label(),
                outcome,
            })
            .map_or(0, |counter| counter.get())
    }

    pub fn record_refusal(&self, reason: RefusalReason, protocol: Protocol) {
        self.refusals
            .get_or_create(&RefusalLabels {
                reason: reason.label(),
                protocol: protocol.label(),
            })
            .inc();
    }

    /// Refusals counted so far for `reason` on `protocol`.
    pub fn refusals(&self, reason: RefusalReason, protocol: Protocol) -> u64 {
        self.refusals
            .get(&RefusalLabels {
                reason: reason.label(),
                protocol: protocol.label(),
            })
            .map_or(0, |counter| counter.get())
    }

    /// The in-flight gauge, for the concurrency layer to move.
    /// The count of log lines dropped, for the log writer (`crate::log_sink`).
    pub fn log_lines_dropped(&self) -> Counter {
        self.log_lines_dropped.clone()
    }

    /// The trace exporter's counts of spans exported and dropped.
    pub fn trace_counters(&self) -> TraceCounters {
        self.traces.clone()
    }

    pub fn in_flight(&self) -> Gauge {
        self.in_flight.clone()
    }

    /// The histograms a model version's batcher records into.
    pub fn model(&self, name: &str, version: u64) -> ModelMetrics {
        let labels = VersionLabels {
            model: name.to_owned(),
            version: version.to_string(),
        };
        ModelMetrics {
            queue_wait: self.queue_wait.get_or_create_owned(&labels),
            inference: self.inference_duration.get_or_create_owned(&labels),
            batch_size: self.batch_size.get_or_create_owned(&labels),
            inline_runs: self.inline_runs.get_or_create_owned(&labels),
        }
    }

    /// The busy-time counter of one instance of a model version.
    pub fn instance_busy(&self, name: &str, version: u64, instance: usize) -> SecondsCounter {
        self.instance_busy.get_or_create_owned(&InstanceLabels {
            model: name.to_owned(),
            version: version.to_string(),
            instance: instance.to_string(),
        })
    }

    /// Replaces the queue-depth gauges with `depths` (model, version, waiting), so that
    /// versions no longer loaded disappear from the scrape.
    pub fn set_queue_depths<'a>(&self, depths: impl IntoIterator<Item = (&'a str, u64, usize)>) {
        self.queue_depth.clear();
        for (model, version, waiting) in depths {
            self.queue_depth
                .get_or_create(&VersionLabels {
                    model: model.to_owned(),
                    version: version.to_string(),
                })
                .set(i64::try_from(waiting).unwrap_or(i64::MAX));
        }
    }

    pub fn record_load_on_demand(&self, name: &str) {
        self.residency.record_load_on_demand(name);
    }

    pub fn record_eviction(&self, name: &str) {
        self.residency.record_eviction(name);
    }

    pub fn observe_load_wait(&self, name: &str, waited: std::time::Duration) {
        self.residency.observe_load_wait(name, waited);
    }

    /// Counts a request as waiting for `name` to load until the returned guard drops.
    pub fn wait_for_load(&self, name: &str) -> LoadWaiter {
        self.residency.wait_for_load(name)
    }

    /// Requests waiting now for a version of `name` to load.
    pub fn load_waiters(&self, name: &str) -> i64 {
        self.residency.load_waiters(name)
    }

    /// Replaces the memory gauges with `versions` (model, version, bytes): resident ones only.
    pub fn set_model_memory(&self, versions: impl IntoIterator<Item = (String, u64, u64)>) {
        self.residency.set_model_memory(versions);
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests;
