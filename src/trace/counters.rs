//! `tensorport_trace_spans_exported_total` and `tensorport_trace_spans_dropped_total`, which
//! the trace exporter counts into.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// Where the trace exporter counts spans (registered nowhere by default).
#[derive(Clone, Debug, Default)]
pub struct TraceCounters {
    /// Spans the collector took.
    pub exported: Counter,
    /// Spans dropped: the export queue was full, or the collector failed or did not answer.
    pub dropped: Counter,
}

pub fn register_trace_counters(registry: &mut Registry) -> TraceCounters {
    let counters = TraceCounters::default();
    registry.register(
        "trace_spans_exported",
        "Trace spans the OpenTelemetry collector accepted",
        counters.exported.clone(),
    );
    registry.register(
        "trace_spans_dropped",
        "Trace spans dropped rather than delaying requests: the export queue was full, or the \
         collector refused, failed or did not answer in time",
        counters.dropped.clone(),
    );
    counters
}
