//! TF Serving's request families (`tensorflow_serving/servables/tensorflow/util.cc`), as its
//! Prometheus exporter names them (`/` becomes `:`): sums of tensorport's own families over
//! the requests that came in through TF Serving's APIs (its gRPC and REST ports' protocols).
//!
//! | family | from | labels |
//! | --- | --- | --- |
//! | `:tensorflow:serving:request_count` (counter) | `tensorport_requests_total` | `model_name`, `status` (the gRPC code's name: `OK`, `INVALID_ARGUMENT`, `NOT_FOUND`, ...) |
//! | `:tensorflow:serving:request_latency` (histogram, microseconds) | `tensorport_request_duration_seconds` | `model_name`, `entrypoint` (`GRPC` or `REST`) |
//! | `:tensorflow:serving:runtime_latency` (histogram, microseconds, per execution) | `tensorport_inference_duration_seconds` | `model_name` |
//!
//! Two differences, both because the figures are derived rather than counted again: the
//! buckets are tensorport's (50 us to 10 s) rather than TF Serving's (10 us growing by 1.8),
//! which `histogram_quantile` reads the same; and there is no `API` label (TF Serving's
//! method: Predict, Classify, ...), as tensorport counts requests by protocol, not method.

use std::collections::BTreeMap;

use super::own::{Sample, Samples};
use super::text::{Exposition, Kind};

const REQUEST_COUNT: &str = ":tensorflow:serving:request_count";
const REQUEST_LATENCY: &str = ":tensorflow:serving:request_latency";
const RUNTIME_LATENCY: &str = ":tensorflow:serving:runtime_latency";

/// TF Serving's entry point for a request of tensorport's `protocol` label; `None` for
/// requests that came in through another API.
fn entrypoint(protocol: &str) -> Option<&'static str> {
    match protocol {
        "tfserving-grpc" => Some("GRPC"),
        "tfserving-rest" => Some("REST"),
        _ => None,
    }
}

/// The gRPC code's name TF Serving gives a request that ended with `outcome`.
fn status(outcome: &str) -> String {
    match outcome {
        "ok" => "OK".to_owned(),
        // tonic's spelling of the code, as TF Serving's (absl) spells it.
        "cancelled" => "CANCELLED".to_owned(),
        "not_found" | "invalid_argument" | "already_exists" | "unauthenticated"
        | "permission_denied" | "unavailable" | "resource_exhausted" | "deadline_exceeded"
        | "unimplemented" | "internal" => outcome.to_ascii_uppercase(),
        // An HTTP status outside the error table (405, 413, ...).
        _ => "UNKNOWN".to_owned(),
    }
}

/// The bound +Inf is kept under, so that it sorts last.
const INF: u64 = u64::MAX;

/// A histogram summed over series: cumulative counts by upper bound (microseconds, [`INF`]
/// for +Inf), the sum in microseconds and the count.
#[derive(Default)]
struct Summed {
    buckets: BTreeMap<u64, f64>,
    sum: f64,
    count: f64,
}

impl Summed {
    fn add(&mut self, part: &str, sample: &Sample<'_>) {
        match part {
            "bucket" => {
                // The registry's bounds are whole microseconds (see `labels::latency_histogram`).
                let le = sample.label("le");
                let bound = le.parse::<f64>().ok().filter(|b| b.is_finite());
                let key = bound.map_or(INF, |seconds| (seconds * 1e6).round() as u64);
                *self.buckets.entry(key).or_default() += sample.value;
            }
            "sum" => self.sum += sample.value * 1e6,
            "count" => self.count += sample.value,
            _ => {}
        }
    }

    fn write(&self, out: &mut Exposition, name: &str, labels: &[(&str, &str)]) {
        let bucket = format!("{name}_bucket");
        for (bound, count) in &self.buckets {
            let le = match *bound {
                INF => "+Inf".to_owned(),
                bound => bound.to_string(),
            };
            let mut with_le = labels.to_vec();
            with_le.push(("le", le.as_str()));
            out.sample(&bucket, &with_le, *count);
        }
        out.sample(&format!("{name}_sum"), labels, self.sum.round());
        out.sample(&format!("{name}_count"), labels, self.count);
    }
}

/// Sums the histogram `family` of `own` by the key `key_of` gives a sample (`None`: left out).
fn sum_histograms<K: Ord>(
    own: &Samples<'_>,
    family: &str,
    key_of: impl Fn(&Sample<'_>) -> Option<K>,
) -> BTreeMap<K, Summed> {
    let mut summed: BTreeMap<K, Summed> = BTreeMap::new();
    for part in ["bucket", "sum", "count"] {
        for sample in own.named(&format!("{family}_{part}")) {
            if let Some(key) = key_of(sample) {
                summed.entry(key).or_default().add(part, sample);
            }
        }
    }
    summed
}

pub(super) fn write(out: &mut Exposition, own: &Samples<'_>) {
    let mut counts: BTreeMap<(String, String), f64> = BTreeMap::new();
    for sample in own.named("tensorport_requests_total") {
        let model = sample.label("model");
        if model.is_empty() || entrypoint(sample.label("protocol")).is_none() {
            continue;
        }
        let key = (model.to_owned(), status(sample.label("outcome")));
        *counts.entry(key).or_default() += sample.value;
    }
    out.family(
        REQUEST_COUNT,
        Kind::Counter,
        "Requests through TF Serving's APIs, by model and status",
    );
    for ((model, status), count) in &counts {
        let labels = [("model_name", model.as_str()), ("status", status.as_str())];
        out.sample(REQUEST_COUNT, &labels, *count);
    }

    let latency = sum_histograms(own, "tensorport_request_duration_seconds", |s| {
        let model = s.label("model");
        let entrypoint = entrypoint(s.label("protocol"))?;
        (!model.is_empty()).then(|| (model.to_owned(), entrypoint))
    });
    out.family(
        REQUEST_LATENCY,
        Kind::Histogram,
        "Microseconds requests through TF Serving's APIs took, arrival to answer",
    );
    for ((model, entrypoint), summed) in &latency {
        let labels = [("model_name", model.as_str()), ("entrypoint", *entrypoint)];
        summed.write(out, REQUEST_LATENCY, &labels);
    }

    let runtime = sum_histograms(own, "tensorport_inference_duration_seconds", |s| {
        Some(s.label("model").to_owned())
    });
    out.family(
        RUNTIME_LATENCY,
        Kind::Histogram,
        "Microseconds each execution took in the runtime, gathering and splitting included",
    );
    for (model, summed) in &runtime {
        summed.write(out, RUNTIME_LATENCY, &[("model_name", model.as_str())]);
    }
}
