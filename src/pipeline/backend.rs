//! What an ensemble presents where a model's runtime would be: its declared signature, its
//! `max_batch_size` and the platform name `ensemble`, so that metadata, configuration and
//! readiness answer for it as for any model.

use crate::backend::{Backend, BackendError, NamedTensor, Signature};

/// Triton's platform name for an ensemble.
pub const ENSEMBLE_PLATFORM: &str = "ensemble";

/// An ensemble's face. It never runs a batch itself: the request path sends an ensemble's
/// requests through its steps, each on its own model.
pub struct EnsembleBackend {
    signatures: Vec<Signature>,
    max_batch_size: Option<usize>,
}

impl EnsembleBackend {
    pub fn new(signature: Signature, max_batch_size: Option<usize>) -> Self {
        Self {
            signatures: vec![signature],
            max_batch_size,
        }
    }
}

impl Backend for EnsembleBackend {
    fn platform(&self) -> &'static str {
        ENSEMBLE_PLATFORM
    }

    fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    fn max_batch_size(&self) -> Option<usize> {
        self.max_batch_size
    }

    fn run(
        &self,
        _signature: &Signature,
        _inputs: Vec<NamedTensor>,
        _outputs: &[String],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        // Reached only if a caller bypassed the request path's dispatch to the steps.
        Err(BackendError::runtime(
            "an ensemble runs through its step models, not as one batch".into(),
        ))
    }
}
