//! What the reconciler remembers between runs, and the served list it reconciles against: the
//! state behind the reconcile lock, below every file that takes that lock.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tokio::sync::oneshot;

use super::model_config::{ModelConfig, VersionPolicy};
use super::scan::{files_under, VersionFolder};
use crate::payload_log::LoggingTable;

/// A model the TF Serving reload-config API asked to serve.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedModel {
    pub name: String,
    /// Where its version folders are (default: `--model-dir/<name>`).
    pub path: PathBuf,
    /// Overrides the model's config.toml when given.
    pub policy: Option<VersionPolicy>,
    pub labels: Option<BTreeMap<String, u64>>,
    /// models.config's `logging_config`: overrides the model's `[logging]` when given.
    pub logging: Option<LoggingTable>,
}

/// What the reconciler remembers between runs; guarded by the reconcile lock.
#[derive(Default)]
pub(super) struct Control {
    /// Versions that failed, with a fingerprint of their files: retried when it changes.
    pub(super) failures: HashMap<(String, u64), Fingerprint>,
    /// Models unloaded through the API: not loaded again until the API loads them.
    pub(super) unloaded: HashSet<String>,
    /// `--startup-models`: the models the first reconciliation loads; it marks the others
    /// unloaded (until the load API loads them), then clears this.
    pub(super) startup_only: Option<HashSet<String>>,
    /// Set by the reload-config API: exactly these models are served.
    pub(super) served: Option<BTreeMap<String, ServedModel>>,
    /// Closed when the loaded version's session is dropped (after its batcher and every run
    /// let go of it): a retiring version is UNLOADING until then.
    pub(super) alive: HashMap<(String, u64), oneshot::Receiver<()>>,
    /// Under a memory budget: where each version that loads on demand is, and its settings.
    pub(super) standby: HashMap<(String, u64), (VersionFolder, ModelConfig)>,
    /// The memory each version's last load took: the expected size of its next load.
    pub(super) measured: HashMap<(String, u64), u64>,
    /// The problem last logged for each model folder: a poll logs a problem only when it
    /// differs, so an operator reads it once rather than every `--model-poll-secs`.
    pub(super) reported: HashMap<String, String>,
    /// The `[traffic]` problem last logged for each model, kept apart from `reported` (which
    /// a folder with versions clears on every poll).
    pub(super) traffic_reported: HashMap<String, String>,
}

impl Control {
    /// Whether `problem` is news for `model` (worth a log line); remembers it either way.
    pub(super) fn is_new_problem(&mut self, model: &str, problem: &str) -> bool {
        if self.reported.get(model).is_some_and(|last| last == problem) {
            return false;
        }
        self.reported.insert(model.to_owned(), problem.to_owned());
        true
    }

    /// [`Self::is_new_problem`] for a model's `[traffic]` settings.
    pub(super) fn is_new_traffic_problem(&mut self, model: &str, problem: &str) -> bool {
        if self
            .traffic_reported
            .get(model)
            .is_some_and(|last| last == problem)
        {
            return false;
        }
        self.traffic_reported
            .insert(model.to_owned(), problem.to_owned());
        true
    }
}

/// Sizes and modification times of a version folder's files.
pub(super) type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// The fingerprint of a version folder's files. Blocks: [`fingerprints`] takes them off the
/// runtime.
pub(super) fn fingerprint(dir: &Path) -> Fingerprint {
    let mut files: Fingerprint = files_under(dir)
        .into_iter()
        .filter_map(|path| {
            let meta = std::fs::metadata(&path).ok()?;
            Some((path, meta.len(), meta.modified().ok()))
        })
        .collect();
    files.sort();
    files
}

/// The fingerprints of `dirs`, in order, taken on a blocking thread.
pub(super) async fn fingerprints(dirs: Vec<PathBuf>) -> Vec<Fingerprint> {
    if dirs.is_empty() {
        return Vec::new();
    }
    let count = dirs.len();
    tokio::task::spawn_blocking(move || dirs.iter().map(|dir| fingerprint(dir)).collect())
        .await
        // An empty print differs from any failure's, so the version is tried again.
        .unwrap_or_else(|_| vec![Fingerprint::new(); count])
}
