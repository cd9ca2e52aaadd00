//! The Shared memory heading of `serve --help`: who may register system shared memory,
//! and how many regions and bytes the registry holds.

use clap::Args;

use crate::shm::ShmPolicy;

/// Who may register system shared memory, and how much.
#[derive(Debug, Clone, Args)]
pub struct SharedMemoryArgs {
    /// Who may use system shared memory: off, local (peers on loopback only; each sees only
    /// regions registered from loopback) or any (every peer sees every region, as in Triton).
    #[arg(long, env = "TENSORPORT_SHM", value_enum, default_value_t = ShmPolicy::Local)]
    pub shm: ShmPolicy,

    /// Shared-memory regions that may be registered at once (each holds a file descriptor).
    #[arg(long, env = "TENSORPORT_SHM_MAX_REGIONS", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=(crate::shm::MAX_GUARDED as u64 / 2)))]
    pub shm_max_regions: u64,

    /// Bytes of all registered shared-memory regions together.
    #[arg(long, env = "TENSORPORT_SHM_MAX_BYTES", default_value_t = 64 << 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub shm_max_bytes: u64,
}
