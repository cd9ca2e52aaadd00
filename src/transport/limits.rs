//! The default connection cap, from the process's limit on open descriptors.
//!
//! Every connection holds a descriptor, and so do model files, shared-memory regions, the
//! listeners and the runtimes' own files. A cap equal to the limit would let idle
//! connections take the last descriptor, after which the server can neither load a model nor
//! register a region, nor accept the connection that would have used it. So a reserve is
//! kept: a quarter of the limit, at least 512 (the shared-memory registry's default region
//! cap and the metrics listener's connections fit inside it), but never more than half.

/// Above this, the default stops growing: far more connections than one server should
/// answer, whatever the limit (which is often raised to about a million).
pub const MAX_DEFAULT_CONNECTIONS: usize = 65_536;

/// The descriptors kept out of the connections' reach: see the module documentation.
pub fn reserve(limit: u64) -> u64 {
    (limit / 4).max(512).min(limit / 2)
}

/// The connection cap when `--max-connections` is not given, for a descriptor limit of
/// `limit` (`None`: unlimited).
pub fn default_max_connections(limit: Option<u64>) -> usize {
    let Some(limit) = limit else {
        return MAX_DEFAULT_CONNECTIONS;
    };
    let left = limit.saturating_sub(reserve(limit)).max(1);
    usize::try_from(left)
        .unwrap_or(usize::MAX)
        .min(MAX_DEFAULT_CONNECTIONS)
}

/// The process's current (soft) limit on open descriptors, read when it is asked for, so
/// that a limit raised at start-up counts. `None`: unlimited.
pub fn descriptor_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_common_service_limit_leaves_half_for_everything_else() {
        assert_eq!(default_max_connections(Some(1024)), 512);
        assert_eq!(default_max_connections(Some(4096)), 3072);
    }

    #[test]
    fn small_limits_still_allow_connections_and_large_ones_are_capped() {
        assert_eq!(default_max_connections(Some(256)), 128);
        assert_eq!(default_max_connections(Some(1)), 1);
        assert_eq!(default_max_connections(Some(0)), 1);
        assert_eq!(
            default_max_connections(Some(1 << 20)),
            MAX_DEFAULT_CONNECTIONS
        );
        assert_eq!(default_max_connections(None), MAX_DEFAULT_CONNECTIONS);
    }

    #[test]
    fn the_reserve_covers_the_shared_memory_regions_and_the_metrics_port() {
        for limit in [1024, 2048, 65_536, 1 << 20] {
            assert!(reserve(limit) >= 256 + super::super::METRICS_MAX_CONNECTIONS as u64);
        }
    }

    #[test]
    fn the_limit_of_this_process_is_readable() {
        assert!(default_max_connections(descriptor_limit()) >= 1);
    }
}
