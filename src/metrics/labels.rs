//! The label sets and histogram buckets of the server's metrics, and the public values that
//! name a label (a copy stage, a refusal reason, a model event). A leaf: every other file of
//! [`crate::metrics`] builds its families from these.

use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

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
    pub(super) fn label(self) -> &'static str {
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
pub(super) struct StageLabels {
    pub(super) stage: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RequestLabels {
    pub(super) model: Arc<str>,
    /// Empty for a request that resolved no model.
    pub(super) version: Option<u64>,
    pub(super) protocol: &'static str,
    pub(super) outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(super) struct LatencyLabels {
    pub(super) model: Arc<str>,
    pub(super) protocol: &'static str,
    pub(super) version: Option<u64>,
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
pub(super) struct BuildLabels {
    pub(super) version: &'static str,
    pub(super) backends: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VersionLabels {
    pub(super) model: String,
    pub(super) version: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct InstanceLabels {
    pub(super) model: String,
    pub(super) version: String,
    pub(super) instance: String,
}

/// Seconds, counted up; `f64` so that microsecond runs add up without rounding to zero.
pub type SecondsCounter = Counter<f64, std::sync::atomic::AtomicU64>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ModelLabels {
    pub(super) model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RefusalLabels {
    pub(super) reason: &'static str,
    pub(super) protocol: &'static str,
}

pub(super) type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Latency buckets, in seconds: 50 us to 10 s, about 2.5x apart, so that both a refusal
/// (microseconds) and a queued request under overload (tens of milliseconds) land in a bucket
/// that tells them apart.
pub(super) fn latency_histogram() -> Histogram {
    Histogram::new([
        0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
        1.0, 2.5, 5.0, 10.0,
    ])
}

/// Rows per executed batch: powers of two up to 1024.
pub(super) fn batch_histogram() -> Histogram {
    Histogram::new((0..=10).map(|power| f64::from(1u32 << power)))
}
