//! The Batching heading of `serve --help`: the server-wide defaults for models whose
//! config.toml has no [batching], and when a fast model's request skips the queue.

use clap::Args;

/// Server-wide dynamic batching defaults, and when a request skips the queue.
#[derive(Debug, Clone, Args)]
pub struct BatchingArgs {
    /// A request that finds its model version's queue empty and an instance free runs on the
    /// network thread, skipping the hand-off to the batcher, when the version's runs have
    /// averaged at most this many microseconds (measured from its real runs; an unmeasured
    /// model always queues, one up to four times slower runs one request in 64 inline to be
    /// measured again, a slower one never). 0: never.
    #[arg(long, env = "TENSORPORT_INLINE_RUN_MAX_US", default_value_t = 50,
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub inline_run_max_us: u64,

    /// Dynamic batching for models whose config.toml has no [batching] section: the most rows
    /// merged into one run (0 or 1: off).
    #[arg(long, env = "TENSORPORT_MAX_BATCH_SIZE", default_value_t = 0)]
    pub max_batch_size: usize,

    /// With batching on, how long the oldest queued request may wait for others, in microseconds.
    #[arg(long, env = "TENSORPORT_MAX_QUEUE_DELAY_US", default_value_t = 0)]
    pub max_queue_delay_us: u64,

    /// Requests a model version may hold waiting before it refuses more with RESOURCE_EXHAUSTED / 429.
    #[arg(long, env = "TENSORPORT_MAX_QUEUE_SIZE", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=(crate::batcher::MAX_QUEUE_SIZE as u64)))]
    pub max_queue_size: u64,
}
