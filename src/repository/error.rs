//! What the repository fails with, in one enum of its own: a model, version or signature it
//! does not have, a name or path the model roots refuse, a version that cannot be made
//! resident, a model list or version label that does not hold together.
//!
//! The repository answers with this enum only, never with `crate::error::Error`, so that the
//! request-path error above gathers it without the repository importing back up. This file
//! imports nothing of the repository's but the confinement rules (a leaf) and nothing of the
//! crate's but [`ErrorKind`].

use crate::error_kind::ErrorKind;

use super::confine::ConfineError;

/// Why the repository refused or failed a request or a model list.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RepositoryError {
    #[error("model '{0}' not found")]
    ModelNotFound(String),
    #[error("version {version} of model '{model}' is not available")]
    VersionNotFound { model: String, version: u64 },
    #[error("model '{model}' has no available version{}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    NoAvailableVersion {
        model: String,
        /// What the newest version is doing instead of serving, when it says.
        reason: Option<String>,
    },
    #[error("model '{model}' has no signature '{signature}' (it has: {available})")]
    SignatureNotFound {
        model: String,
        signature: String,
        available: String,
    },
    /// The request's deadline passed while it waited for its version to load.
    #[error("the deadline passed before model '{model}' could run the request")]
    LoadDeadline { model: String },
    /// The model directory could not be read; the message has the server's paths redacted.
    #[error("{0}")]
    Unreadable(String),
    /// A model name or path the admin APIs refuse.
    #[error(transparent)]
    Confine(#[from] ConfineError),
    /// A version that is not resident could not be loaded for the request.
    #[error(transparent)]
    Residency(#[from] ResidencyError),
    /// A client asked to load, unload or reload models on a server whose models are fixed
    /// by its command line (`--model-control-api=false`; Triton's none and poll modes). The
    /// message begins with Triton's own words, which its clients and scripts look for.
    #[error(
        "explicit model load / unload is not allowed if polling is enabled: this server's \
         models are fixed by its command line (tritonserver: --model-control-mode=explicit, \
         tensorport serve: --model-control-api=true let clients load and unload them)"
    )]
    ModelControlClosed,
    #[error("model '{0}' is listed more than once")]
    ListedTwice(String),
    #[error(
        "model '{model}': model_platform '{platform}' is not served here (use one of {})",
        served.join(", ")
    )]
    UnknownPlatform {
        model: String,
        platform: String,
        /// The platforms a list entry may name.
        served: &'static [&'static str],
    },
    #[error("model '{0}': versions must be positive")]
    VersionsNotPositive(String),
    #[error("model '{0}': labels must name positive versions")]
    LabelsNotPositive(String),
    #[error(
        "model '{model}' has no version label '{label}'{}",
        known_labels(labels)
    )]
    UnknownLabel {
        model: String,
        label: String,
        /// The labels the model has, in order.
        labels: Vec<String>,
    },
}

impl RepositoryError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::ModelNotFound(_)
            | Self::VersionNotFound { .. }
            | Self::NoAvailableVersion { .. } => ErrorKind::NotFound,
            Self::SignatureNotFound { .. } => ErrorKind::InvalidArgument,
            Self::LoadDeadline { .. } => ErrorKind::DeadlineExceeded,
            Self::Unreadable(_) => ErrorKind::Internal,
            // Triton's code for the refusal: 503 over HTTP, UNAVAILABLE over gRPC.
            Self::ModelControlClosed => ErrorKind::Unavailable,
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
            Self::ListedTwice(_)
            | Self::UnknownPlatform { .. }
            | Self::VersionsNotPositive(_)
            | Self::LabelsNotPositive(_)
            | Self::UnknownLabel { .. } => ErrorKind::InvalidArgument,
        }
    }
}

/// The labels a refusal lists after an unknown one; nothing when the model has none.
fn known_labels(labels: &[String]) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!(" (labels: {})", labels.join(", "))
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
    fn list_and_label_refusals_keep_their_words_and_are_bad_requests() {
        let cases = [
            (
                RepositoryError::ListedTwice("a".into()),
                "model 'a' is listed more than once",
            ),
            (
                RepositoryError::UnknownPlatform {
                    model: "a".into(),
                    platform: "caffe".into(),
                    served: &["tf", "onnx"],
                },
                "model 'a': model_platform 'caffe' is not served here (use one of tf, onnx)",
            ),
            (
                RepositoryError::VersionsNotPositive("a".into()),
                "model 'a': versions must be positive",
            ),
            (
                RepositoryError::LabelsNotPositive("a".into()),
                "model 'a': labels must name positive versions",
            ),
            (
                RepositoryError::UnknownLabel {
                    model: "a".into(),
                    label: "canary".into(),
                    labels: Vec::new(),
                },
                "model 'a' has no version label 'canary'",
            ),
            (
                RepositoryError::UnknownLabel {
                    model: "a".into(),
                    label: "canary".into(),
                    labels: vec!["stable".into(), "next".into()],
                },
                "model 'a' has no version label 'canary' (labels: stable, next)",
            ),
        ];
        for (err, message) in cases {
            assert_eq!(err.to_string(), message);
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{message}");
        }
    }

    #[test]
    fn a_path_outside_the_roots_is_denied_and_a_bad_name_is_a_bad_request() {
        let outside = RepositoryError::from(ConfineError::OutsideRoots("m".into()));
        assert_eq!(outside.kind(), ErrorKind::PermissionDenied);
        let empty = RepositoryError::from(ConfineError::EmptyName);
        assert_eq!(empty.kind(), ErrorKind::InvalidArgument);
        assert_eq!(empty.to_string(), ConfineError::EmptyName.to_string());
    }
}
