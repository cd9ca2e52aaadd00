//! Per-model batching settings, as read from the `[batching]` table of
//! `DIR/<model>/config.toml`.

use std::time::Duration;

use serde::Deserialize;

/// The largest `max_queue_size` accepted. The queue's channel needs a bound it can represent,
/// and a backlog of a million requests is already far past any useful latency.
pub const MAX_QUEUE_SIZE: usize = 1 << 20;

/// How a model version's batcher merges requests.
///
/// The defaults leave batching off: merging requests changes their latency and is only correct
/// for a model whose dimension 0 is a batch dimension, which the server cannot tell from the
/// model file. A model opts in by setting `max_batch_size` above 1 in its `config.toml`:
///
/// ```toml
/// [batching]
/// max_batch_size = 32
/// max_queue_delay_us = 2000
/// preferred_batch_sizes = [8, 16, 32]
/// max_queue_size = 512
/// split_rows = 256
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchSettings {
    /// Most rows (dimension 0 summed over the merged requests) in one run. 0 or 1 turns
    /// batching off: every request then runs alone, in arrival order.
    pub max_batch_size: usize,
    /// How long the oldest queued request of a batch may wait for others to join it (kept by
    /// Tokio's timer, whose tick is 1 ms, so it may wait up to 1 ms longer). The
    /// default of 0 adds no latency: requests still merge when they arrive while the previous
    /// batch runs, which is when merging pays.
    pub max_queue_delay_us: u64,
    /// Batch sizes the model runs best at. When the queue holds requests adding up to one of
    /// them, the largest such batch is cut at once instead of waiting for the delay.
    pub preferred_batch_sizes: Vec<usize>,
    /// Most requests waiting (not running) before new ones are refused with
    /// RESOURCE_EXHAUSTED. It applies with batching off too, since each instance of a version
    /// runs one request or batch at a time. High-priority requests may take a reserve of a quarter more (at
    /// least one place) past it; see [`super::BatchPolicy::admits`]. The default is large enough that the server's concurrency limit,
    /// not this queue, normally sheds load first; it exists so that a backlog stays bounded.
    pub max_queue_size: usize,
    /// Most rows one run takes, when set above 0 (TF Serving's `max_execution_batch_size`
    /// with `enable_large_batch_splitting`): a request with more rows is cut along dimension
    /// 0 into pieces of at most this many, as even as possible, which queue as requests of
    /// their own, so that free instances run them at once; their outputs are joined in
    /// order. No batch merges past it either. A large request then takes as many cores as
    /// the version has instances, instead of one. A request is cut into at most 4,096 pieces
    /// (and no more than `max_queue_size`, since its pieces are queued all at once): one with
    /// more rows than that many pieces hold is refused with INVALID_ARGUMENT.
    pub split_rows: usize,
}

impl Default for BatchSettings {
    fn default() -> Self {
        Self {
            max_batch_size: 0,
            max_queue_delay_us: 0,
            preferred_batch_sizes: Vec::new(),
            max_queue_size: 1024,
            split_rows: 0,
        }
    }
}

/// Settings that cannot work, found while reading a model's configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("max_queue_size must be at least 1")]
    EmptyQueue,
    #[error("max_queue_size must be at most {MAX_QUEUE_SIZE}")]
    QueueTooLarge,
    #[error("preferred batch size {size} must be between 1 and max_batch_size ({max})")]
    PreferredOutOfRange { size: usize, max: usize },
    #[error("preferred_batch_sizes needs batching on (max_batch_size above 1)")]
    PreferredWithoutBatching,
    #[error("preferred batch size {size} is larger than split_rows ({split_rows}), which no batch exceeds")]
    PreferredPastSplit { size: usize, split_rows: usize },
}

impl BatchSettings {
    /// Whether requests may be merged at all.
    pub fn batching_enabled(&self) -> bool {
        self.max_batch_size > 1
    }

    pub fn max_queue_delay(&self) -> Duration {
        Duration::from_micros(self.max_queue_delay_us)
    }

    /// Refuses settings that would silently misbehave, so that a bad `config.toml` fails the
    /// model's load with a message instead. The batcher itself clamps what it is given, so
    /// skipping this is safe, only less helpful.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.max_queue_size == 0 {
            return Err(SettingsError::EmptyQueue);
        }
        if self.max_queue_size > MAX_QUEUE_SIZE {
            return Err(SettingsError::QueueTooLarge);
        }
        if !self.preferred_batch_sizes.is_empty() && !self.batching_enabled() {
            return Err(SettingsError::PreferredWithoutBatching);
        }
        if let Some(&size) = self
            .preferred_batch_sizes
            .iter()
            .find(|&&size| size == 0 || size > self.max_batch_size)
        {
            return Err(SettingsError::PreferredOutOfRange {
                size,
                max: self.max_batch_size,
            });
        }
        if let Some(&size) = self
            .preferred_batch_sizes
            .iter()
            .find(|&&size| self.split_rows > 0 && size > self.split_rows)
        {
            return Err(SettingsError::PreferredPastSplit {
                size,
                split_rows: self.split_rows,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_leave_batching_off_with_a_bounded_queue() {
        let settings = BatchSettings::default();
        assert!(!settings.batching_enabled());
        assert!(settings.max_queue_size > 0);
        assert_eq!(settings.validate(), Ok(()));
    }

    #[test]
    fn reads_a_batching_table() {
        #[derive(Deserialize)]
        struct ModelConfig {
            batching: BatchSettings,
        }
        let config: ModelConfig = toml::from_str(
            "[batching]\nmax_batch_size = 16\nmax_queue_delay_us = 500\n\
             preferred_batch_sizes = [4, 8]\n",
        )
        .unwrap();
        let settings = config.batching;
        assert_eq!(settings.max_batch_size, 16);
        assert_eq!(settings.max_queue_delay(), Duration::from_micros(500));
        assert_eq!(settings.preferred_batch_sizes, vec![4, 8]);
        assert_eq!(
            settings.max_queue_size,
            BatchSettings::default().max_queue_size
        );
        assert_eq!(settings.validate(), Ok(()));
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(toml::from_str::<BatchSettings>("max_batch = 3").is_err());
    }

    #[test]
    fn validate_names_the_problem() {
        let with = |max_batch_size, preferred: &[usize], max_queue_size| BatchSettings {
            max_batch_size,
            max_queue_delay_us: 0,
            preferred_batch_sizes: preferred.to_vec(),
            max_queue_size,
            split_rows: 0,
        };
        assert_eq!(with(8, &[], 0).validate(), Err(SettingsError::EmptyQueue));
        assert_eq!(
            with(8, &[], usize::MAX).validate(),
            Err(SettingsError::QueueTooLarge)
        );
        assert_eq!(
            with(8, &[4, 16], 10).validate(),
            Err(SettingsError::PreferredOutOfRange { size: 16, max: 8 })
        );
        assert_eq!(
            with(8, &[0], 10).validate(),
            Err(SettingsError::PreferredOutOfRange { size: 0, max: 8 })
        );
        assert_eq!(
            with(1, &[1], 10).validate(),
            Err(SettingsError::PreferredWithoutBatching)
        );
        let split = BatchSettings {
            split_rows: 4,
            ..with(16, &[8], 10)
        };
        assert_eq!(
            split.validate(),
            Err(SettingsError::PreferredPastSplit {
                size: 8,
                split_rows: 4
            })
        );
    }
}
