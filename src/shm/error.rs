//! Why a shared-memory operation was refused: the one error of the region, the guard, the
//! descriptor limits and the registry, in a leaf so that they need not import `shm`'s root.

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
    #[error("shared-memory region name is invalid: {0} (a name is 1 to 255 bytes, without '/' or control characters)")]
    InvalidName(&'static str),
    #[error("shared-memory key '{key}' names {what} in /dev/shm; only regular files are shared memory (links are not followed)")]
    NotRegularFile { key: String, what: &'static str },
    #[error("shared-memory region '{0}' was truncated by its owner or a page of it could not be allocated while in use; unregister it and register it again")]
    Poisoned(String),
    #[error("too many shared-memory regions: at most {0} may be registered (--shm-max-regions)")]
    TooManyRegions(usize),
    #[error("registering {byte_size} more bytes of shared memory would exceed the limit of {limit} bytes ({registered} registered; --shm-max-bytes)")]
    TooManyBytes {
        byte_size: u64,
        registered: u64,
        limit: u64,
    },
    #[error("no file descriptor is free for another shared-memory region ({open} open, limit {limit}, {reserve} kept for connections); unregister regions first")]
    NoDescriptors { open: u64, limit: u64, reserve: u64 },
    #[error("cannot count open file descriptors: {0}")]
    Descriptors(#[source] std::io::Error),
    #[error("too many shared-memory regions mapped at once ({0}, counting unregistered ones still in use)")]
    TooManyMapped(usize),
    #[error("cannot install the shared-memory fault handler: {0}")]
    Guard(#[source] std::io::Error),
    #[error("CUDA shared memory is not supported: this server runs on the CPU; use system shared memory")]
    CudaUnsupported,
}
