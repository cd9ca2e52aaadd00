//! The seam between the protocols and the runtimes.
//!
//! A [`Backend`] is one loaded model version. It states its signatures and runs already
//! validated inputs; it owns whatever threads or sessions its runtime needs and is called from
//! a blocking context, never from the async reactor.

pub mod contract;
pub mod onnx;
pub mod onnx_library;
mod onnx_raw;
mod signature;
#[cfg(feature = "tensorflow")]
pub mod tf;
#[cfg(feature = "torch")]
pub mod torch;

pub use signature::{Signature, TensorSpec, DEFAULT_SIGNATURE};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::error_kind::ErrorKind;
use crate::tensor::Tensor;

/// Thread settings of a model's runtime; 0 leaves the choice to the runtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeThreads {
    /// Threads that share the work of one operator.
    pub intra_op: usize,
    /// Threads that run independent operators at the same time.
    pub inter_op: usize,
}

/// A named tensor, as inputs and outputs travel through a backend.
pub type NamedTensor = (String, Tensor);

/// Memory the caller owns and a backend may write an output into, such as a window of a
/// client's shared-memory region.
///
/// # Safety
///
/// A backend hands [`OutputMemory::as_mut_ptr`] to its runtime, which writes up to
/// [`OutputMemory::len`] bytes there from another thread. An implementation must guarantee
/// that the pointer is valid for writes of `len` bytes for as long as `self` lives, that the
/// memory does not move meanwhile, and that [`OutputMemory::view`] returns bytes of that same
/// memory.
// Declaring the contract is all the unsafe here; the implementations argue it where they are.
#[allow(unsafe_code)]
pub unsafe trait OutputMemory: Send + Sync + std::fmt::Debug {
    /// Start of the writable bytes, valid for [`OutputMemory::len`] bytes while `self` lives.
    fn as_mut_ptr(&self) -> *mut u8;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The first `len` bytes, as `Bytes` that keep the memory alive.
    fn view(&self, len: usize) -> Bytes;
}

/// Where the caller wants one output written, if it has a place for it.
pub type OutputTarget = Option<Arc<dyn OutputMemory>>;

/// One loaded model version, ready to run.
pub trait Backend: Send + Sync {
    /// The runtime's name as Triton reports it (`onnxruntime_onnx`, ...).
    fn platform(&self) -> &'static str;

    /// Every signature the model can be called through; the first is the default.
    fn signatures(&self) -> &[Signature];

    /// The method `signature` declares where the model format records one (a SavedModel's
    /// `method_name`, such as `tensorflow/serving/classify`); `None` for formats without.
    fn signature_method(&self, signature: &str) -> Option<&str> {
        let _ = signature;
        None
    }

    /// The memory the runtime's own allocators hold for this version now (an arena's bytes,
    /// in use or kept for the next run), where the runtime reports it; `None` where it does
    /// not. It may grow as runs need more working memory than earlier ones did, which the
    /// process's resident memory at load cannot show: the model memory budget charges a
    /// version for its growth since the load (`repository::charge`). Called after every run,
    /// so it must be cheap: report what was last measured rather than measure here.
    fn held_bytes(&self) -> Option<u64> {
        None
    }

    /// The largest first dimension one request may carry, where the model's configuration
    /// states one (Triton's `max_batch_size`; `Some(0)`: no batch dimension). `None`: no
    /// limit but the batcher's.
    fn max_batch_size(&self) -> Option<usize> {
        None
    }

    /// The class labels of `output` (one per class, by index) for the classification
    /// extension, where the configuration names a labels file.
    fn labels(&self, output: &str) -> Option<Arc<[String]>> {
        let _ = output;
        None
    }

    /// Runs `signature` on `inputs` (already checked against it) and returns the requested
    /// `outputs` in that order. Blocks the calling thread.
    fn run(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
    ) -> Result<Vec<NamedTensor>, BackendError>;

    /// Like [`Backend::run`], but may write output `i` straight into `targets[i]`; such an
    /// output comes back as a tensor over that memory. A backend that cannot (the default)
    /// returns its own buffers and the caller copies.
    fn run_into(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
        targets: &[OutputTarget],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        let _ = targets;
        self.run(signature, inputs, outputs)
    }
}

/// Failures inside a runtime. The messages are shared (`Arc<str>`), so that a batch that
/// failed hands every one of its requests the same error for the cost of a reference count.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    #[error("cannot load the ONNX Runtime library: {0}")]
    Library(Arc<str>),
    #[error("cannot load model {}: {message}", path.display())]
    Load { path: PathBuf, message: Arc<str> },
    /// The runtime refused the inputs (e.g. an id out of an embedding table's range).
    #[error("the model rejected the inputs: {0}")]
    InvalidInput(Arc<str>),
    #[error("inference failed: {0}")]
    Runtime(Arc<str>),
}

impl BackendError {
    /// The runtime library could not be loaded or initialised.
    pub fn library(message: String) -> Self {
        Self::Library(message.into())
    }

    /// The model at `path` could not be loaded.
    pub fn load(path: &Path, message: String) -> Self {
        Self::Load {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    /// The runtime refused the inputs.
    pub fn invalid_input(message: String) -> Self {
        Self::InvalidInput(message.into())
    }

    /// A run failed for a reason of the runtime's own.
    pub fn runtime(message: String) -> Self {
        Self::Runtime(message.into())
    }

    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidInput(_) => ErrorKind::InvalidArgument,
            Self::Library(_) | Self::Load { .. } | Self::Runtime(_) => ErrorKind::Internal,
        }
    }
}
