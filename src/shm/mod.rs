//! Triton's system shared-memory extension: clients register POSIX shared-memory objects by
//! name, then pass tensors by naming a region, an offset and a byte size.

mod region;
mod registry;

pub use region::{check_key, Region, RegionWindow};
pub use registry::{Peer, RegionStatus, ShmPolicy, ShmRegistry};

/// Why a shared-memory operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("shared-memory key '{0}' must name an object directly under /dev/shm, like \"/my_region\" (no other '/', no '..')")]
    InvalidKey(String),
    #[error("shared-memory byte_size must be positive and addressable, got {0}")]
    BadSize(u64),
    #[error("cannot open shared-memory object '{key}': {source}")]
    Open {
        key: String,
        #[source]
        source: std::io::Error,
    },
    #[error("offset {offset} + byte_size {byte_size} is past the end of shared-memory object '{key}' ({object_size} bytes)")]
    RegionPastEnd {
        key: String,
        offset: u64,
        byte_size: u64,
        object_size: u64,
    },
    #[error("offset {offset} + byte_size {byte_size} is past the end of shared-memory region '{region}' ({region_size} bytes)")]
    WindowPastEnd {
        region: String,
        offset: u64,
        byte_size: u64,
        region_size: u64,
    },
    #[error("shared-memory region '{region}' was truncated by its owner to {object_size} bytes")]
    Truncated { region: String, object_size: u64 },
    #[error("shared-memory offsets and sizes overflow")]
    Overflow,
    #[error("shared-memory region '{0}' is not registered")]
    NotFound(String),
    #[error("a shared-memory region named '{0}' is already registered")]
    AlreadyExists(String),
    #[error("shared memory is disabled on this server (--shm off)")]
    Disabled,
    #[error("only clients on this machine may register shared memory (--shm local); this request came from {0}")]
    RemotePeer(String),
    #[error("CUDA shared memory is not supported: this server runs on the CPU; use system shared memory")]
    CudaUnsupported,
}
