//! Prometheus metrics, built once at start-up and passed to whoever records them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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

/// What happened to a model version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelEvent {
    Loaded,
    Unloaded,
    LoadFailed,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: &'static str,
}

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    tensor_bytes_copied: Family<StageLabels, Counter>,
    shm_regions: Gauge,
    shm_bytes_mapped: Gauge,
    model_loads: Family<ModelLabels, Counter>,
    model_unloads: Family<ModelLabels, Counter>,
    model_load_failures: Family<ModelLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tensorport");
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
        Self {
            registry,
            tensor_bytes_copied,
            shm_regions,
            shm_bytes_mapped,
            model_loads,
            model_unloads,
            model_load_failures,
        }
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

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
