//! Triton's system shared-memory extension: clients register POSIX shared-memory objects by
//! name, then pass tensors by naming a region, an offset and a byte size.
//!
//! The memory stays the client's, so nothing here trusts it:
//! - `region` opens an object relative to `/dev/shm` without following links, accepts only
//!   regular files, maps it, and bounds-checks every view against the region and the object;
//! - `guard` survives the faults a check cannot prevent (the object truncated, or its pages
//!   impossible to allocate, after the check): the region is poisoned, not the process;
//! - `policy` says who may register (`--shm`), how much (`--shm-max-regions`,
//!   `--shm-max-bytes`) and under which names;
//! - `registry` holds the registered regions, checks each registration against the policy,
//!   and confines every operation to the peer's class under `--shm local`;
//! - `peer` says which side of the machine's boundary a request came from;
//! - `limits` keeps registration from taking the descriptors connections need;
//! - `error` holds [`ShmError`], which every file here returns, so that none of them imports
//!   this one.

mod error;
mod guard;
mod limits;
mod peer;
mod policy;
mod region;
mod registry;

pub use error::ShmError;
pub use guard::MAX_GUARDED;
pub use limits::raise_descriptor_limit;
pub use peer::{Peer, PeerClass};
pub use policy::{check_name, ShmLimits, ShmPolicy, MAX_NAME_LEN};
pub use region::{check_key, Region, RegionWindow};
pub use registry::{RegionStatus, ShmRegistry};
