//! The standard `process_*` metrics every Prometheus client library exports (CPU seconds,
//! memory, file descriptors, start time), read from `/proc` at scrape time. Off Linux the
//! values that need `/proc` are left out rather than reported as zero.

use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Reads the process's own figures on each scrape.
#[derive(Debug)]
pub struct ProcessCollector {
    /// Seconds since the Unix epoch when the metrics were built, at the server's start.
    start_time: f64,
}

impl ProcessCollector {
    pub fn new() -> Self {
        let start_time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |since| since.as_secs_f64());
        Self { start_time }
    }
}

impl Default for ProcessCollector {
    fn default() -> Self {
        Self::new()
    }
}

fn gauge<N: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> std::fmt::Result {
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        if let Some(seconds) = cpu_seconds() {
            let counter = ConstCounter::new(seconds);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?)?;
        }
        if let Some(open) = open_fds() {
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors",
                open,
            )?;
        }
        if let Some(max) = max_fds() {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors",
                max,
            )?;
        }
        if let Some((virtual_bytes, resident_bytes)) = memory() {
            gauge(
                &mut encoder,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                virtual_bytes,
            )?;
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                resident_bytes,
            )?;
        }
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch in seconds",
            self.start_time,
        )
    }
}

/// User plus system CPU time, from fields 14 and 15 of `/proc/self/stat` (clock ticks).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let after_name = stat.rsplit_once(')')?.1;
    let mut fields = after_name.split_ascii_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    let ticks = rustix::param::clock_ticks_per_second();
    (ticks > 0).then(|| user.saturating_add(system) as f64 / ticks as f64)
}

fn open_fds() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count())
}

/// The soft limit on open files, from `/proc/self/limits`.
fn max_fds() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line.strip_prefix("Max open files")?
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `(virtual, resident)` bytes, from `/proc/self/statm` (sizes in pages).
fn memory() -> Option<(u64, u64)> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut fields = statm.split_ascii_whitespace();
    let size: u64 = fields.next()?.parse().ok()?;
    let resident: u64 = fields.next()?.parse().ok()?;
    let page = rustix::param::page_size() as u64;
    Some((size.saturating_mul(page), resident.saturating_mul(page)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_figures_are_read() {
        assert!(cpu_seconds().is_some_and(|s| s >= 0.0));
        assert!(open_fds().is_some_and(|n| n >= 3));
        assert!(max_fds().is_some_and(|n| n >= 3));
        assert!(memory().is_some_and(|(v, r)| v >= r && r > 0));
    }
}
