//! The response cache's store (`--cache-config`), sampled at scrape time: what it holds, its
//! capacity, and what it has evicted or refused. The per-model hits and misses are Triton's
//! `nv_cache_*` families (`peers`), read from each version's statistics.

use std::sync::atomic::Ordering;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The store's figures at one scrape, as the cache counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheFigures {
    pub capacity_bytes: u64,
    pub entries: u64,
    pub bytes: u64,
    /// Entries evicted to make room, since start.
    pub evictions: u64,
    /// Answers not kept because they alone are larger than the store, since start.
    pub insert_refused: u64,
}

#[derive(Debug, Default)]
pub(super) struct ResponseCacheMetrics {
    bytes: Gauge,
    entries: Gauge,
    capacity_bytes: Gauge,
    evictions: Counter,
    insert_refused: Counter,
}

impl ResponseCacheMetrics {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "response_cache_bytes",
            "Bytes the response cache's entries are charged (keys, answers, overheads)",
            metrics.bytes.clone(),
        );
        registry.register(
            "response_cache_entries",
            "Answers held in the response cache",
            metrics.entries.clone(),
        );
        registry.register(
            "response_cache_capacity_bytes",
            "The response cache's capacity (--cache-config); 0 without a cache",
            metrics.capacity_bytes.clone(),
        );
        registry.register(
            "response_cache_evictions",
            "Entries evicted from the response cache to make room for newer answers",
            metrics.evictions.clone(),
        );
        registry.register(
            "response_cache_insert_refused",
            "Answers not cached because they alone are larger than the whole cache",
            metrics.insert_refused.clone(),
        );
        metrics
    }

    pub(super) fn set(&self, figures: CacheFigures) {
        let gauge = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        self.bytes.set(gauge(figures.bytes));
        self.entries.set(gauge(figures.entries));
        self.capacity_bytes.set(gauge(figures.capacity_bytes));
        // The store counts; the counters follow its totals. `fetch_max` keeps them monotonic
        // when two scrapes race with figures read at different moments.
        self.evictions
            .inner()
            .fetch_max(figures.evictions, Ordering::Relaxed);
        self.insert_refused
            .inner()
            .fetch_max(figures.insert_refused, Ordering::Relaxed);
    }
}
