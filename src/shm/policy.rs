//! What registration allows: who may register (`--shm`), how much (`--shm-max-regions`,
//! `--shm-max-bytes`), and under which names. The registry enforces these; they stand
//! apart from it because the command line takes them as flags.

use super::error::ShmError;

/// The longest region name accepted (a name travels in URLs, logs and status replies).
pub const MAX_NAME_LEN: usize = 255;

/// Who may register regions. Registering makes the server map memory of this machine, which
/// only a process on this machine can have created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ShmPolicy {
    /// Shared memory is refused.
    Off,
    /// Only peers on a loopback address or a Unix socket may register, and every operation
    /// (status, unregister, inference naming a region) sees only their regions.
    #[default]
    Local,
    /// Any peer may register, and every peer sees every region (as Triton does).
    Any,
}

/// How much registration may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmLimits {
    /// Regions registered at once.
    pub max_regions: usize,
    /// Bytes of all registered regions together.
    pub max_bytes: u64,
}

impl Default for ShmLimits {
    fn default() -> Self {
        Self {
            max_regions: 256,
            max_bytes: 64 << 30,
        }
    }
}

/// Refuses region names that are empty, too long, or carry NUL, `/` or control characters.
pub fn check_name(name: &str) -> Result<(), ShmError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_NAME_LEN {
        "it is longer than 255 bytes"
    } else if name.contains('/') {
        "it contains '/'"
    } else if name.chars().any(char::is_control) {
        "it contains NUL or another control character"
    } else {
        return Ok(());
    };
    Err(ShmError::InvalidName(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_and_plain() {
        assert!(check_name("input0_data").is_ok());
        assert!(check_name(&"n".repeat(MAX_NAME_LEN)).is_ok());
        for bad in [
            String::new(),
            "n".repeat(MAX_NAME_LEN + 1),
            "a\0b".to_owned(),
            "a/b".to_owned(),
            "line\nbreak".to_owned(),
        ] {
            assert!(
                matches!(check_name(&bad), Err(ShmError::InvalidName(_))),
                "{bad:?}"
            );
        }
    }
}
