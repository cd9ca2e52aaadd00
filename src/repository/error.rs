//! What the repository fails with, in one enum of its own: a name or path the model roots
//! refuse, a version that cannot be made resident.
//!
//! This file imports nothing of the repository's but the confinement rules (a leaf) and
//! nothing of the crate's but [`ErrorKind`], so that `crate::error` can gather these failures
//! without importing the repository's working files, which import it.

use crate::error_kind::ErrorKind;

use super::confine::ConfineError;

/// Why the repository refused or failed a request or a model list.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RepositoryError {
    /// A model name or path the admin APIs refuse.
    #[error(transparent)]
    Confine(#[from] ConfineError),
    /// A version that is not resident could not be loaded for the request.
    #[error(transparent)]
    Residency(#[from] ResidencyError),
}

impl RepositoryError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Confine(ConfineError::OutsideRoots(_)) => ErrorKind::PermissionDenied,
            Self::Confine(_) => ErrorKind::InvalidArgument,
            // Retrying does not help a model larger than the budget, but the request was
            // refused for memory, which is what RESOURCE_EXHAUSTED means to both protocols.
            Self::Residency(ResidencyError::TooLarge { .. } | ResidencyError::NoRoom { .. }) => {
                ErrorKind::ResourceExhausted
            }
            Self::Residency(
                ResidencyError::LoadFailed { .. } | ResidencyError::EvictedAgain { .. },
            ) => ErrorKind::Unavailable,
        }
    }
}

/// Why a request's version could not be made resident.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResidencyError {
    #[error("version {version} of model '{model}' {}", too_large_message(*needed, *budget))]
    TooLarge {
        model: String,
        version: u64,
        needed: u64,
        budget: u64,
    },
    #[error(
        "no room to load version {version} of model '{model}' ({needed} bytes): pinned models \
         hold {held} bytes of the {budget}-byte model memory budget"
    )]
    NoRoom {
        model: String,
        version: u64,
        needed: u64,
        held: u64,
        budget: u64,
    },
    #[error("model '{model}' was evicted again before this request could use it; retry")]
    EvictedAgain { model: String },
    #[error("version {version} of model '{model}' failed to load: {reason}")]
    LoadFailed {
        model: String,
        version: u64,
        reason: String,
    },
}

/// Why a version is too large for the budget; also the reason the repository index gives.
pub(super) fn too_large_message(needed: u64, budget: u64) -> String {
    format!(
        "needs {needed} bytes, more than the whole model memory budget of {budget} bytes \
         (--model-memory-budget)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_outside_the_roots_is_denied_and_a_bad_name_is_a_bad_request() {
        let outside = RepositoryError::from(ConfineError::OutsideRoots("m".into()));
        assert_eq!(outside.kind(), ErrorKind::PermissionDenied);
        let empty = RepositoryError::from(ConfineError::EmptyName);
        assert_eq!(empty.kind(), ErrorKind::InvalidArgument);
        assert_eq!(empty.to_string(), ConfineError::EmptyName.to_string());
    }
}
