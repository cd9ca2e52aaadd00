//! Triton's per-model families (its `docs/user_guide/metrics.md`, 2.51), labelled `model` and
//! `version` as Triton labels them. They read the same counters as KServe's statistics API,
//! as Triton's do:
//!
//! | family | counts |
//! | --- | --- |
//! | `nv_inference_request_success` | requests the version answered (a batch of n counts once) |
//! | `nv_inference_request_failure` | requests that named the version and failed, by `reason`: `REJECTED` (its queue was full, or the deadline passed while queued), `CANCELED` (the client left), `BACKEND` (the runtime failed), `OTHER` (a bad request) |
//! | `nv_inference_count` | inferences: rows along the batch dimension |
//! | `nv_inference_exec_count` | batch executions (`count / exec_count` is the mean batch size) |
//! | `nv_inference_pending_request_count` | requests waiting in the version's queue now |
//! | `nv_inference_request_duration_us` | time of successful requests, from arrival at the model to outputs |
//! | `nv_inference_queue_duration_us` | time requests waited in the queue |
//! | `nv_inference_compute_{input,infer,output}_duration_us` | time executions spent gathering inputs, in the runtime, splitting outputs |
//! | `nv_cache_num_hits_per_model`, `nv_cache_num_misses_per_model` | requests answered from the response cache, and those that missed it (versions of models that enable it) |
//! | `nv_cache_hit_duration_per_model`, `nv_cache_miss_duration_per_model` | time to find and copy out hits; to look up and store misses' answers |
//!
//! The durations are counters of microseconds. The failure reasons are read from
//! `tensorport_requests_total`'s outcomes, which counts every request that named the version.

use crate::stats::ModelStats;

use super::own::Samples;
use super::text::{Exposition, Kind};

/// One serving version's figures, as the scrape reads them.
pub struct VersionFigures<'a> {
    pub model: &'a str,
    pub version: u64,
    pub stats: &'a ModelStats,
    /// Requests waiting in its queue now.
    pub pending: usize,
    /// Whether the version has a share of the response cache: only those get Triton's
    /// `nv_cache_*` families, as Triton reports them only for models that enable it.
    pub cached: bool,
}

/// Triton's failure reasons, in the order it writes them.
const REASONS: [&str; 4] = ["OTHER", "BACKEND", "CANCELED", "REJECTED"];

/// The reason Triton would give for a request that ended with `outcome` (an `error_type` of
/// the error table, `cancelled`, or an HTTP status's name).
fn reason(outcome: &str) -> &'static str {
    match outcome {
        "resource_exhausted" | "deadline_exceeded" => "REJECTED",
        "cancelled" => "CANCELED",
        "internal" => "BACKEND",
        _ => "OTHER",
    }
}

pub(super) fn write<'a>(
    out: &mut Exposition,
    versions: impl IntoIterator<Item = VersionFigures<'a>>,
    own: &Samples<'_>,
) {
    let versions: Vec<(VersionFigures<'a>, String)> = versions
        .into_iter()
        .map(|figures| {
            let version = figures.version.to_string();
            (figures, version)
        })
        .collect();
    let per_version = |out: &mut Exposition,
                       name: &str,
                       kind: Kind,
                       help: &str,
                       value: &dyn Fn(&VersionFigures<'a>) -> f64| {
        out.family(name, kind, help);
        for (figures, version) in &versions {
            let labels = [("model", figures.model), ("version", version.as_str())];
            out.sample(name, &labels, value(figures));
        }
    };
    let micros = |ns: u64| (ns / 1_000) as f64;
    per_version(
        out,
        "nv_inference_request_success",
        Kind::Counter,
        "Requests the version answered successfully (a batch counts once)",
        &|f| f.stats.success.get().0 as f64,
    );
    out.family(
        "nv_inference_request_failure",
        Kind::Counter,
        "Requests that named the version and failed, by reason (a batch counts once)",
    );
    for (figures, version) in &versions {
        let mut failed = [0.0; REASONS.len()];
        let named = own.named("tensorport_requests_total").filter(|s| {
            s.label("model") == figures.model && s.label("version") == version.as_str()
        });
        for sample in named.filter(|s| s.label("outcome") != "ok") {
            let reason = reason(sample.label("outcome"));
            if let Some(at) = REASONS.iter().position(|r| *r == reason) {
                failed[at] += sample.value;
            }
        }
        for (reason, count) in REASONS.iter().zip(failed) {
            let labels = [
                ("model", figures.model),
                ("reason", *reason),
                ("version", version.as_str()),
            ];
            out.sample("nv_inference_request_failure", &labels, count);
        }
    }
    per_version(
        out,
        "nv_inference_count",
        Kind::Counter,
        "Inferences run: rows along the batch dimension",
        &|f| {
            f.stats
                .inference_count
                .load(std::sync::atomic::Ordering::Relaxed) as f64
        },
    );
    per_version(
        out,
        "nv_inference_exec_count",
        Kind::Counter,
        "Batches the runtime executed",
        &|f| {
            f.stats
                .execution_count
                .load(std::sync::atomic::Ordering::Relaxed) as f64
        },
    );
    per_version(
        out,
        "nv_inference_pending_request_count",
        Kind::Gauge,
        "Requests waiting in the version's queue now",
        &|f| f.pending as f64,
    );
    per_version(
        out,
        "nv_inference_request_duration_us",
        Kind::Counter,
        "Microseconds successful requests took, from arrival at the model to outputs",
        &|f| micros(f.stats.success.get().1),
    );
    per_version(
        out,
        "nv_inference_queue_duration_us",
        Kind::Counter,
        "Microseconds requests waited in the version's queue",
        &|f| micros(f.stats.queue.get().1),
    );
    per_version(
        out,
        "nv_inference_compute_input_duration_us",
        Kind::Counter,
        "Microseconds executions spent gathering their inputs",
        &|f| micros(f.stats.compute().input_ns),
    );
    per_version(
        out,
        "nv_inference_compute_infer_duration_us",
        Kind::Counter,
        "Microseconds executions spent in the runtime",
        &|f| micros(f.stats.compute().infer_ns),
    );
    per_version(
        out,
        "nv_inference_compute_output_duration_us",
        Kind::Counter,
        "Microseconds executions spent splitting their outputs",
        &|f| micros(f.stats.compute().output_ns),
    );
    write_cache(out, &versions);
}

/// One cache family: its name, help, and the figure it reads from a version's statistics.
type CacheFamily<'f> = (&'f str, &'f str, &'f dyn Fn(&ModelStats) -> f64);

/// Triton's per-model response cache families, for the versions that have a share of it.
fn write_cache(out: &mut Exposition, versions: &[(VersionFigures<'_>, String)]) {
    if !versions.iter().any(|(figures, _)| figures.cached) {
        return;
    }
    let families: [CacheFamily<'_>; 4] = [
        (
            "nv_cache_num_hits_per_model",
            "Requests answered from the response cache",
            &|stats| stats.cache_hit.get().0 as f64,
        ),
        (
            "nv_cache_num_misses_per_model",
            "Requests that missed the response cache",
            &|stats| stats.cache_miss.get().0 as f64,
        ),
        (
            "nv_cache_hit_duration_per_model",
            "Microseconds spent finding and copying out answers from the response cache",
            &|stats| (stats.cache_hit.get().1 / 1_000) as f64,
        ),
        (
            "nv_cache_miss_duration_per_model",
            "Microseconds spent looking up and storing the answers of cache misses",
            &|stats| (stats.cache_miss.get().1 / 1_000) as f64,
        ),
    ];
    for (name, help, value) in families {
        out.family(name, Kind::Counter, help);
        for (figures, version) in versions.iter().filter(|(figures, _)| figures.cached) {
            let labels = [("model", figures.model), ("version", version.as_str())];
            out.sample(name, &labels, value(figures.stats));
        }
    }
}
