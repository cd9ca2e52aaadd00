//! File descriptors: each registered region holds one, and so does every connection and
//! model file. Registration must never take the last ones, or the server would stop
//! accepting connections while still looking healthy.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

use super::error::ShmError;

/// Descriptors registration always leaves free: at least this many ...
const MIN_RESERVE: u64 = 256;
/// ... and at least this fraction of the limit.
const RESERVE_DIVISOR: u64 = 4;

/// Raises the soft limit on open files to the hard limit, as servers that hold many
/// connections do; returns the limit now in force (`None`: unlimited).
pub fn raise_descriptor_limit() -> Result<Option<u64>, std::io::Error> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        )?;
    }
    Ok(getrlimit(Resource::Nofile).current)
}

/// The descriptors registration leaves free under a limit of `limit`.
pub fn reserve(limit: u64) -> u64 {
    (limit / RESERVE_DIVISOR).max(MIN_RESERVE)
}

/// Refuses when one more descriptor would eat into the reserve.
pub fn check_descriptor_reserve() -> Result<(), ShmError> {
    let Some(limit) = getrlimit(Resource::Nofile).current else {
        return Ok(());
    };
    // Registration is rare; counting the open descriptors is cheap enough for it.
    let open = std::fs::read_dir("/proc/self/fd")
        .map_err(ShmError::Descriptors)?
        .count() as u64;
    let reserve = reserve(limit);
    if open.saturating_add(1).saturating_add(reserve) > limit {
        return Err(ShmError::NoDescriptors {
            open,
            limit,
            reserve,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_reserve_grows_with_the_limit() {
        assert_eq!(super::reserve(1024), 256);
        assert_eq!(super::reserve(100), 256);
        assert_eq!(super::reserve(1 << 20), 1 << 18);
    }
}
