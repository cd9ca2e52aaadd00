//! A client for co-located Rust services talking to tensorport over gRPC:
//!
//! - [`KserveClient`]: KServe v2 inference (`inference.GRPCInferenceService`), with tensors on
//!   the wire or in a registered shared-memory region;
//! - [`TfServingClient`]: TF Serving `Predict` and `GetModelStatus`;
//! - [`ShmRegion`]: a POSIX shared-memory object the client creates and owns, which the server
//!   maps by name; outputs are read from it in place.
//!
//! The wire types are compiled from the repository's `proto/` (the server's own definitions).

pub mod error;
pub mod kserve;
pub mod proto;
pub mod shm;
pub mod tensor;
pub mod tfserving;

pub use error::{ClientError, Result};
pub use kserve::{KserveClient, ModelMetadata, OutputInfo, ShmInput, ShmOutput, TensorMetadata};
pub use shm::ShmRegion;
pub use tensor::{DataType, Element, NamedTensor, Tensor};
pub use tfserving::{TfServingClient, VersionStatus};
