//! The summary of a run: one JSON line for scripts, or a table for people.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::config::{Config, Load};
use crate::driver::Stats;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub label: String,
    pub protocol: &'static str,
    pub target: String,
    pub model: String,
    pub batch: usize,
    pub shm: bool,
    /// "closed" or "open".
    pub load: &'static str,
    pub concurrency: Option<usize>,
    pub rate: Option<f64>,
    pub duration_s: f64,
    pub warmup_s: f64,
    /// Successful measured requests.
    pub requests: u64,
    pub requests_per_s: f64,
    /// Rows per second: requests/s times the batch.
    pub inferences_per_s: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
    pub errors: BTreeMap<String, u64>,
    pub error_count: u64,
    pub unfinished: u64,
    /// The CPUs this process may run on (`taskset`), from /proc/self/status.
    pub client_cpus: String,
}

fn micros(nanos: u64) -> f64 {
    nanos as f64 / 1000.0
}

impl Report {
    pub fn new(config: &Config, stats: &Stats) -> Self {
        let requests = stats.latency.len();
        let seconds = stats.window.as_secs_f64();
        let requests_per_s = requests as f64 / seconds;
        let at = |q: f64| micros(stats.latency.value_at_quantile(q));
        let (load, concurrency, rate) = match config.load() {
            Load::Closed { concurrency } => ("closed", Some(concurrency), None),
            Load::Open { rate } => ("open", None, Some(rate)),
        };
        Self {
            label: config.label.clone(),
            protocol: config.protocol.name(),
            target: config.target.clone(),
            model: config.model.clone(),
            batch: config.batch,
            shm: config.shm,
            load,
            concurrency,
            rate,
            duration_s: config.duration,
            warmup_s: config.warmup,
            requests,
            requests_per_s,
            inferences_per_s: requests_per_s * config.batch as f64,
            p50_us: at(0.5),
            p90_us: at(0.9),
            p99_us: at(0.99),
            max_us: micros(stats.latency.max()),
            mean_us: stats.latency.mean() / 1000.0,
            error_count: stats.errors.values().sum(),
            errors: stats.errors.clone(),
            unfinished: stats.unfinished,
            client_cpus: client_cpus(),
        }
    }

    pub fn json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|err| format!("{{\"error\":\"{err}\"}}"))
    }

    pub fn table(&self) -> String {
        let load = match (self.concurrency, self.rate) {
            (Some(c), _) => format!("closed loop, concurrency {c}"),
            (_, Some(r)) => format!("open loop, {r} requests/s"),
            _ => String::new(),
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} {} model {} batch {}{}; {load}; {} s measured after {} s warm-up; client on CPUs {}",
            self.protocol,
            self.target,
            self.model,
            self.batch,
            if self.shm { " (shared memory)" } else { "" },
            self.duration_s,
            self.warmup_s,
            self.client_cpus,
        );
        let _ = writeln!(out, "  requests/s   {:>12.1}", self.requests_per_s);
        let _ = writeln!(out, "  inferences/s {:>12.1}", self.inferences_per_s);
        for (name, value) in [
            ("p50", self.p50_us),
            ("p90", self.p90_us),
            ("p99", self.p99_us),
            ("max", self.max_us),
            ("mean", self.mean_us),
        ] {
            let _ = writeln!(out, "  {name:<4} (us)    {value:>12.1}");
        }
        let _ = writeln!(out, "  requests     {:>12}", self.requests);
        let _ = writeln!(out, "  unfinished   {:>12}", self.unfinished);
        if self.errors.is_empty() {
            let _ = writeln!(out, "  errors       {:>12}", 0);
        }
        for (kind, count) in &self.errors {
            let _ = writeln!(out, "  error {kind:<18} {count}");
        }
        out
    }
}

fn client_cpus() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
                .map(|cpus| cpus.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}
