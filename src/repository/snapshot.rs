//! The serving state: an immutable [`Snapshot`] of every model's versions and where each is in
//! its life. The lifecycle publishes a new one whole; a request resolves its version in the one
//! it took.

use crate::cache::CacheScope;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::charge::MemoryCharge;
use super::confine::refuse_control_characters;
use super::error::{too_large_message, RepositoryError};
use super::rollout::Rollout;
use crate::backend::{Backend, Signature};
use crate::batcher::BatcherHandle;
use crate::payload_log::PayloadWriter;
use crate::pipeline::Ensemble;
use crate::stats::ModelStats;
use crate::version::VersionSelector;

/// A model version that loaded, warmed up, and serves.
pub struct LoadedModel {
    /// Shared with each request's context and metrics labels, which name the version that
    /// answered without copying the name.
    pub name: Arc<str>,
    pub version: u64,
    /// The version's name where its settings give one (MLServer's `parameters.version`,
    /// `v0.1.0`): answers report it in place of the number, as MLServer does.
    pub version_name: Option<Arc<str>>,
    /// Tells the lifecycle, when the last holder (the batcher included) drops it, that the
    /// version's session is gone (see `charge::Charged`).
    pub backend: Arc<dyn Backend>,
    /// Every request to this version goes through its batcher, which owns the runs. When the
    /// version retires and its last request finishes, dropping the handle lets the batcher
    /// drain its queue and stop.
    pub batcher: BatcherHandle,
    pub stats: Arc<ModelStats>,
    /// The memory it is charged against `--model-memory-budget`: its load, plus what its
    /// runtime has grown by since (see `charge`).
    pub memory: Arc<MemoryCharge>,
    /// `[lifecycle] pinned`: never evicted.
    pub pinned: bool,
    /// For an ensemble, its checked steps: requests run through them instead of `batcher`.
    pub ensemble: Option<Arc<Ensemble>>,
    /// When it last served a request, in the repository's ticks: the eviction order.
    pub last_used: std::sync::atomic::AtomicU64,
    /// Its share of the response cache, where its model enables `response_cache` and the
    /// server has a cache; dropped with the version, which frees its entries.
    pub response_cache: Option<CacheScope>,
}

impl LoadedModel {
    /// The version as answers report it: its name, else its number.
    pub fn reported_version(&self) -> String {
        match &self.version_name {
            Some(name) => name.to_string(),
            None => self.version.to_string(),
        }
    }

    /// The bytes it is charged now.
    pub fn memory_bytes(&self) -> u64 {
        self.memory.bytes()
    }

    /// The signature `name` names, or the default one when `name` is empty.
    pub fn signature(&self, name: &str) -> Result<(usize, &Signature), RepositoryError> {
        let signatures = self.backend.signatures();
        let found = if name.is_empty() {
            signatures.first().map(|sig| (0, sig))
        } else {
            signatures
                .iter()
                .enumerate()
                .find(|(_, sig)| sig.name == name)
        };
        found.ok_or_else(|| RepositoryError::SignatureNotFound {
            model: self.name.to_string(),
            signature: name.to_owned(),
            available: signatures
                .iter()
                .map(|sig| sig.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

/// Where one version is in its life, as TF Serving's status and Triton's index report it.
#[derive(Clone)]
pub enum VersionState {
    /// Being loaded and warmed up; not serving yet.
    Loading,
    Available(Arc<LoadedModel>),
    /// Retiring: no new requests; requests already running finish.
    Unloading,
    /// Known, not in memory: loads on its first request (`--model-memory-budget`).
    NotResident(Residence),
    /// Not serving: unloaded (`error` is `None`) or failed to load or warm up.
    End {
        error: Option<String>,
    },
}

/// One model and the versions the repository manages for it.
#[derive(Clone)]
pub struct ModelRecord {
    pub name: String,
    pub versions: BTreeMap<u64, VersionState>,
    pub labels: BTreeMap<String, u64>,
    /// `[traffic]` and `[metrics]`, replaced on every poll without touching the versions.
    pub rollout: Option<Arc<Rollout>>,
    /// `[logging]`'s writer: kept while the settings stay equal, dropped with the record.
    pub payload_log: Option<Arc<PayloadWriter>>,
}

impl ModelRecord {
    pub(super) fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            versions: BTreeMap::new(),
            labels: BTreeMap::new(),
            rollout: None,
            payload_log: None,
        }
    }

    /// The serving model for `selector`: the newest available version, the one named, or the
    /// one a label points to.
    pub fn resolve(&self, selector: &VersionSelector) -> Result<Arc<LoadedModel>, RepositoryError> {
        let version = match selector {
            VersionSelector::Latest => return self.latest(),
            VersionSelector::Specific(version) => *version,
            VersionSelector::Label(label) => {
                *self
                    .labels
                    .get(label)
                    .ok_or_else(|| RepositoryError::UnknownLabel {
                        model: self.name.clone(),
                        label: label.clone(),
                        labels: self.labels.keys().cloned().collect(),
                    })?
            }
        };
        match self.versions.get(&version) {
            Some(VersionState::Available(model)) => Ok(model.clone()),
            _ => Err(RepositoryError::VersionNotFound {
                model: self.name.clone(),
                version,
            }),
        }
    }

    /// The version number `selector` stands for in this model, without requiring it to be
    /// available: `None` for the latest (every version, in status listings).
    pub fn version_of(&self, selector: &VersionSelector) -> Result<Option<u64>, RepositoryError> {
        match selector {
            VersionSelector::Latest => Ok(None),
            VersionSelector::Specific(version) => Ok(Some(*version)),
            label @ VersionSelector::Label(_) => Ok(Some(self.resolve(label)?.version)),
        }
    }

    /// Whether `version` of this model is one `selector` picks (every version for latest).
    pub fn selects(&self, selector: &VersionSelector, version: u64) -> bool {
        match selector {
            VersionSelector::Latest => true,
            VersionSelector::Specific(want) => *want == version,
            VersionSelector::Label(label) => self.labels.get(label) == Some(&version),
        }
    }

    /// The newest available version.
    pub fn latest(&self) -> Result<Arc<LoadedModel>, RepositoryError> {
        self.versions
            .values()
            .rev()
            .find_map(|state| match state {
                VersionState::Available(model) => Some(model.clone()),
                _ => None,
            })
            .ok_or_else(|| RepositoryError::NoAvailableVersion {
                model: self.name.clone(),
                reason: self.versions.values().rev().find_map(|state| match state {
                    VersionState::End { error } => error.clone(),
                    VersionState::Loading => Some("a version is still loading".to_owned()),
                    VersionState::NotResident(residence) => Some(format!(
                        "the newest version is not in memory ({}); an inference or metadata request loads it",
                        residence.reason()
                    )),
                    _ => None,
                }),
            })
    }

    /// Whether any version serves.
    pub fn is_available(&self) -> bool {
        self.versions
            .values()
            .any(|state| matches!(state, VersionState::Available(_)))
    }
}

/// The serving state at one moment.
#[derive(Clone, Default)]
pub struct Snapshot {
    pub(super) models: BTreeMap<String, ModelRecord>,
    /// Models on disk that wait for the load API (not loaded at start under
    /// `--startup-models`, or unloaded through the API), so that the repository index lists
    /// them as Triton's does in explicit mode.
    pub(super) waiting: BTreeSet<String>,
}

impl Snapshot {
    /// Models on disk that are not loaded and wait for the load API.
    pub fn waiting(&self) -> impl Iterator<Item = &str> {
        self.waiting.iter().map(String::as_str)
    }

    /// The model `name`. A name with a control character is refused as a bad name rather than
    /// reported missing: no model has one, and the message must not carry it raw.
    pub fn model(&self, name: &str) -> Result<&ModelRecord, RepositoryError> {
        self.models
            .get(name)
            .ok_or_else(|| match refuse_control_characters(name) {
                Err(refused) => RepositoryError::from(refused),
                Ok(()) => RepositoryError::ModelNotFound(name.to_owned()),
            })
    }

    pub fn resolve(
        &self,
        name: &str,
        selector: &VersionSelector,
    ) -> Result<Arc<LoadedModel>, RepositoryError> {
        self.model(name)?.resolve(selector)
    }

    pub fn models(&self) -> impl Iterator<Item = &ModelRecord> {
        self.models.values()
    }
}

/// Why a known version is not in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Residence {
    /// Never loaded: loads on its first request.
    NotLoaded,
    /// Unloaded to make room for another version: loads again on its next request.
    Evicted,
    /// Its files or its measured load exceed the whole budget.
    TooLarge { needed: u64, budget: u64 },
}

impl Residence {
    /// The reason the KServe repository index gives.
    pub fn reason(&self) -> String {
        match self {
            Self::NotLoaded => "not loaded; loads on its first request".to_owned(),
            Self::Evicted => "evicted".to_owned(),
            Self::TooLarge { needed, budget } => too_large_message(*needed, *budget),
        }
    }
}
