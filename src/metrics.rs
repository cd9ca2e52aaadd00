//! Prometheus metrics, built once at start-up and passed to whoever records them. Names follow
//! Prometheus conventions: prefix `tensorport_`, base units in the name (`_seconds`,
//! `_bytes`), `_total` on counters (added by the encoder). The process's own figures carry the
//! standard `process_*` names, without the prefix, as every Prometheus client exports them.

mod process;
mod residency;

pub use residency::LoadWaiter;

use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::request::Protocol;

/// Where on the request path tensor bytes were copied.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum CopyStage {
    /// An input buffer misaligned for its element type was copied before the runtime read it.
    InputAlignment,
    /// Requests merged into one batch were gathered into one buffer.
    BatchGather,
    /// An output was copied into the caller's shared-memory region.
    SharedMemoryOutput,
}

impl CopyStage {
    fn label(self) -> &'static str {
        match self {
            Self::InputAlignment => "input_alignment",
            Self::BatchGather => "batch_gather",
            Self::SharedMemoryOutput => "shared_memory_output",
        }
    }
}

/// Why a request was refused for overload.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum RefusalReason {
    /// The client's per-client rate limit.
    RateLimit,
    /// The server-wide limit on requests in flight.
    Concurrency,
    /// The model version's queue was full.
    QueueFull,
    /// The deadline passed before the request could run.
    Deadline,
    /// The request memory budget had too little left for the decoded request.
    Memory,
}

impl RefusalReason {
    pub const ALL: [Self; 5] = [
        Self::RateLimit,
        Self::Concurrency,
        Self::QueueFull,
        Self::Deadline,
        Self::Memory,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::RateLimit => "rate_limit",
            Self::Concurrency => "concurrency",
            Self::QueueFull => "queue_full",
            Self::Deadline => "deadline",
            Self::Memory => "memory",
        }
    }
}

/// What happened to a model version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelEvent {
    Loaded,
    Unloaded,
    LoadFailed,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    model: Arc<str>,
    /// Empty for a request that resolved no model.
    version: Option<u64>,
    protocol: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq)]
struct LatencyLabels {
    model: Arc<str>,
    protocol: &'static str,
    version: Option<u64>,
}

/// `version` is left out when empty (a request that resolved no model): in PromQL an absent
/// label and an empty one are the same, and series without a model keep the labels they
/// had before versions were recorded.
impl EncodeLabelSet for LatencyLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> std::fmt::Result {
        ("model", self.model.as_ref()).encode(encoder.encode_label())?;
        ("protocol", self.protocol).encode(encoder.encode_label())?;
        if let Some(version) = self.version {
            ("version", version).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    backends: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    model: String,
    version: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstanceLabels {
    model: String,
    version: String,
    instance: String,
}

/// Seconds, counted up; `f64` so that microsecond runs add up without rounding to zero.
pub type SecondsCounter = Counter<f64, std::sync::atomic::AtomicU64>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    reason: &'static str,
    protocol: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Latency buckets, in seconds: 50 us to 10 s, about 2.5x apart, so that both a refusal
/// (microseconds) and a queued request under overload (tens of milliseconds) land in a bucket
/// that tells them apart.
fn latency_histogram() -> Histogram {
    Histogram::new([
        0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
        1.0, 2.5, 5.0, 10.0,
    ])
}

/// Rows per executed batch: powers of two up to 1024.
fn batch_histogram() -> Histogram {
    Histogram::new((0..=10).map(|power| f64::from(1u32 << power)))
}

/// The histograms of one model version, resolved once so that the batcher does not look up
/// its labels on every batch.
#[derive(Clone)]
pub struct ModelMetrics {
    queue_wait: Histogram,
    inference: Histogram,
    batch_size: Histogram,
    inline_runs: Counter,
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
    model_loads: Family<ModelLabels, Counter>,
    model_unloads: Family<ModelLabels, Counter>,
    model_load_failures: Family<ModelLabels, Counter>,
    model_ready: Family<VersionLabels, Gauge>,
    residency: residency::ResidencyMetrics,
    send_timeouts: SendTimeouts,
    request_memory: Gauge,
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
        let model_loads = Family::<ModelLabels, Counter>::default();
        registry.register("model_loads", "Model versions loaded", model_loads.clone());
        let model_unloads = Family::<ModelLabels, Counter>::default();
        registry.register(
            "model_unloads",
            "Model versions unloaded",
            model_unloads.clone(),
        );
        let model_load_failures = Family::<ModelLabels, Counter>::default();
        registry.register(
            "model_load_failures",
            "Model versions that failed to load or to warm up",
            model_load_failures.clone(),
        );
        let model_ready = Family::<VersionLabels, Gauge>::default();
        registry.register(
            "model_ready",
            "1 while a model version serves, 0 while it loads, failed, or was unloaded",
            model_ready.clone(),
        );
        let residency = residency::ResidencyMetrics::register(registry);
        let send_timeouts = register_send_timeouts(registry);
        let request_memory = Gauge::default();
        registry.register(
            "request_memory_bytes",
            "Bytes charged to the request memory budget (--max-inflight-request-bytes): \
             requests in flight, as they take once decoded, and answers not yet sent",
            request_memory.clone(),
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
            model_loads,
            model_unloads,
            model_load_failures,
            model_ready,
            residency,
            send_timeouts,
            request_memory,
        }
    }

    /// The request memory budget's count, for the budget to keep.
    pub fn request_memory(&self) -> Gauge {
        self.request_memory.clone()
    }

    /// The counters of answers cut off for the send timeout, for the transport.
    pub fn send_timeouts(&self) -> SendTimeouts {
        self.send_timeouts.clone()
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
        let labels = ModelLabels {
            model: name.to_owned(),
        };
        for family in [
            &self.model_loads,
            &self.model_unloads,
            &self.model_load_failures,
        ] {
            drop(family.get_or_create(&labels));
        }
        self.register_residency(name);
    }

    /// Replaces the model-ready gauges with `versions` (model, version, serving), so that
    /// versions the repository forgot disappear from the scrape.
    pub fn set_model_ready<'a>(&self, versions: impl IntoIterator<Item = (&'a str, u64, bool)>) {
        self.model_ready.clear();
        for (model, version, serving) in versions {
            self.model_ready
                .get_or_create(&VersionLabels {
                    model: model.to_owned(),
                    version: version.to_string(),
                })
                .set(i64::from(serving));
        }
    }

    pub fn record_model_event(&self, name: &str, event: ModelEvent) {
        let family = match event {
            ModelEvent::Loaded => &self.model_loads,
            ModelEvent::Unloaded => &self.model_unloads,
            ModelEvent::LoadFailed => &self.model_load_failures,
        };
        family
            .get_or_create(&ModelLabels {
                model: name.to_owned(),
            })
            .inc();
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

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// `tensorport_send_timeouts_total{cut}`: answers whose client took none of their bytes for
/// `--send-timeout-secs`, by what was cut.
fn register_send_timeouts(registry: &mut Registry) -> SendTimeouts {
    let family = Family::<CutLabels, Counter>::default();
    let cuts = SendTimeouts {
        streams: family.get_or_create_owned(&CutLabels { cut: "stream" }),
        connections: family.get_or_create_owned(&CutLabels { cut: "connection" }),
    };
    registry.register(
        "send_timeouts",
        "Answers cut off because the client took none of their bytes for the send timeout: \
         HTTP/2 streams reset (cut=stream) and connections closed (cut=connection)",
        family,
    );
    cuts
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CutLabels {
    cut: &'static str,
}

/// Where the transport counts answers cut off for the send timeout (handles registered
/// nowhere by default, for servers run without metrics).
#[derive(Clone, Debug, Default)]
pub struct SendTimeouts {
    /// HTTP/2 streams reset.
    pub streams: Counter,
    /// Connections closed because their socket took nothing.
    pub connections: Counter,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_names_carry_prefix_units_and_total() {
        let metrics = Metrics::new();
        metrics.record_request(
            Protocol::KserveGrpc,
            Some((&Arc::from("m"), 2)),
            "ok",
            std::time::Duration::from_millis(3),
        );
        metrics.record_refusal(RefusalReason::Concurrency, Protocol::KserveHttp);
        metrics.record_model_event("m", ModelEvent::Loaded);
        metrics
            .model("m", 2)
            .observe_execution(std::time::Duration::from_micros(300), 8);
        metrics.set_queue_depths([("m", 2, 5)]);
        metrics.set_model_ready([("m", 2, true), ("m", 3, false)]);
        let text = metrics.encode();
        for expected in [
            "tensorport_requests_total{model=\"m\",version=\"2\",protocol=\"kserve-grpc\",outcome=\"ok\"} 1",
            "tensorport_refusals_total{reason=\"concurrency\",protocol=\"kserve-http\"} 1",
            "tensorport_model_loads_total{model=\"m\"} 1",
            "tensorport_batch_size_rows_bucket{le=\"8.0\",model=\"m\",version=\"2\"} 1",
            "tensorport_queue_depth_requests{model=\"m\",version=\"2\"} 5",
            "tensorport_request_duration_seconds_count{model=\"m\",protocol=\"kserve-grpc\",version=\"2\"} 1",
            "tensorport_inference_duration_seconds_sum",
            "tensorport_model_ready{model=\"m\",version=\"2\"} 1",
            "tensorport_model_ready{model=\"m\",version=\"3\"} 0",
            "\nprocess_resident_memory_bytes ",
            "\nprocess_virtual_memory_bytes ",
            "\nprocess_open_fds ",
            "\nprocess_max_fds ",
            "\nprocess_start_time_seconds ",
            "\nprocess_cpu_seconds_total ",
            "tensorport_build_info{version=\"",
        ] {
            assert!(text.contains(expected), "missing {expected} in:\n{text}");
        }
        assert_eq!(
            metrics.requests(Protocol::KserveGrpc, Some(("m", 2)), "ok"),
            1
        );
        assert_eq!(
            metrics.refusals(RefusalReason::Concurrency, Protocol::KserveHttp),
            1
        );
    }

    #[test]
    fn a_models_counters_exist_at_zero_once_registered() {
        let metrics = Metrics::new();
        metrics.register_model("m");
        let text = metrics.encode();
        for name in ["model_loads", "model_unloads", "model_load_failures"] {
            let line = format!("tensorport_{name}_total{{model=\"m\"}} 0");
            assert!(text.contains(&line), "missing {line} in:\n{text}");
        }
    }

    #[test]
    fn build_info_names_the_compiled_backends() {
        let text = Metrics::new().encode();
        let line = format!(
            "tensorport_build_info{{version=\"{}\",backends=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            crate::build_info::BACKENDS
        );
        assert!(text.contains(&line), "missing {line} in:\n{text}");
        assert!(crate::build_info::BACKENDS.starts_with("onnx"));
    }

    #[test]
    fn queue_depths_forget_versions_that_went_away() {
        let metrics = Metrics::new();
        metrics.set_queue_depths([("a", 1, 1), ("b", 1, 2)]);
        metrics.set_queue_depths([("b", 1, 0)]);
        let text = metrics.encode();
        assert!(!text.contains("model=\"a\""), "{text}");
        assert!(text.contains("tensorport_queue_depth_requests{model=\"b\",version=\"1\"} 0"));
    }
}
