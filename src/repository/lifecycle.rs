//! Versions come and go: the repository is reconciled with the model directory at start, on a
//! poll, and on the explicit load / unload / reload-config APIs.
//!
//! Rules, in the order they matter to a client:
//! - A new version is loaded and warmed up off the request path, and only then published.
//! - A version that fails to load or to warm up is reported (status, log) and the version that
//!   was serving keeps serving. It is retried only once its files change.
//! - A retired version leaves the snapshot first, so no new request reaches it; requests that
//!   already hold it finish, then it is dropped and its batcher drains and stops.
//! - A version that is no longer aspired keeps serving while no aspired version is available
//!   (so a broken new version never leaves a model with nothing), unless its folder is gone.
//! - Under `--model-memory-budget`, only pinned models load here; the others are published as
//!   not resident and load on their first request (see `residency`). With `reload =
//!   "unload-first"`, the version being replaced drains and drops before its successor loads.
//!
//! The repository's work is split by concern, each file an `impl ModelRepository` block over
//! the struct defined here: reconcile.rs brings models in line with the directory, admin.rs
//! holds the explicit APIs, load.rs loads and publishes one version, retire.rs takes versions
//! out of service, on_demand.rs loads and evicts under a memory budget. This file holds the
//! struct, its builders and the serving state it publishes; it imports none of them.

use crate::cache::ResponseCache;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use super::budget::{LoadMeasure, MemoryMeter};
use super::confine::ModelRoots;
use super::control::{Control, ServedModel};
use super::loader::Loader;
use super::log_roots::LogRoots;
use super::residency::Residency;
use super::snapshot::{ModelRecord, Snapshot, VersionState};
use crate::backend::Backend;
use crate::batcher::Flush;
use crate::request::StickyHeaders;

/// The model repository: the current snapshot, and the lifecycle that replaces it.
pub struct ModelRepository {
    pub(super) dir: PathBuf,
    /// Where the admin APIs may point models: `--model-dir` and `--allow-model-paths`.
    pub(super) roots: ModelRoots,
    /// Where a reload-config's payload logs may go: `--allow-log-paths` and the folders the
    /// start-up models.config logs to.
    pub(super) log_roots: LogRoots,
    pub(super) loader: Arc<Loader>,
    /// Swapped whole; held only to clone or replace the `Arc`, never across an await.
    pub(super) snapshot: RwLock<Arc<Snapshot>>,
    /// One reconciliation, or one load on demand, at a time.
    pub(super) control: tokio::sync::Mutex<Control>,
    /// Applied to every backend right after it loads, before warmup; none in production.
    pub(super) decorate: Option<BackendDecorator>,
    /// Set once the first reconciliation has finished, whatever its outcome: until then the
    /// server is live but not ready.
    pub(super) initial_load_settled: AtomicBool,
    /// `--model-memory-budget`: `None` keeps every served version resident.
    pub(super) budget: Option<u64>,
    /// Use order and loads in progress under the budget.
    pub(super) residency: Residency,
    /// Measures each load's memory, one load at a time.
    pub(super) measure: Arc<LoadMeasure>,
    /// `--cache-config`: the server's response cache, which each loaded version of a model
    /// with `response_cache` enabled gets a share of; `None`: nothing is cached.
    pub(super) response_cache: Option<Arc<ResponseCache>>,
    /// The headers the models' splits are sticky on, for the outermost layer to copy into
    /// each request's context; replaced after every reconciliation.
    pub(super) sticky: Arc<StickyHeaders>,
    /// `--model-control-api`: whether the load, unload and reload-config APIs may change
    /// which models are served. The server's own polls and config-file watch do either way.
    pub(super) client_control: bool,
    /// Handed to every batcher started, so that the server's drain reaches every queue.
    pub(super) flush: Flush,
}

/// Wraps a freshly loaded backend of the named model, for instance to observe its runs or
/// to hold them until a test releases them. The wrapper sees warmup runs too.
pub type BackendDecorator = Arc<dyn Fn(&str, Arc<dyn Backend>) -> Arc<dyn Backend> + Send + Sync>;

impl ModelRepository {
    /// An empty repository over `dir`; [`Self::reconcile`] loads it.
    pub fn new(dir: &Path, loader: Loader) -> Self {
        Self {
            dir: dir.to_path_buf(),
            roots: ModelRoots::new(dir),
            log_roots: LogRoots::default(),
            loader: Arc::new(loader),
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            control: tokio::sync::Mutex::new(Control::default()),
            decorate: None,
            initial_load_settled: AtomicBool::new(false),
            budget: None,
            residency: Residency::default(),
            measure: Arc::new(LoadMeasure::default()),
            response_cache: None,
            sticky: Arc::default(),
            client_control: true,
            flush: Flush::default(),
        }
    }

    /// The server's drain has begun: every batcher, of every version loaded or still to
    /// load, runs what is queued at once instead of waiting out `max_queue_delay`.
    pub fn flush_queues(&self) {
        self.flush.start();
    }

    /// Whether clients may load, unload and reload models (`--model-control-api`); false
    /// fixes the models to what the directory, the polls and the config file say.
    #[must_use]
    pub fn with_client_control(mut self, allowed: bool) -> Self {
        self.client_control = allowed;
        self
    }

    /// Gives the versions of models that enable `response_cache` a share of `cache`.
    #[must_use]
    pub fn with_response_cache(mut self, cache: Option<Arc<ResponseCache>>) -> Self {
        self.response_cache = cache;
        self
    }

    /// The server's response cache, if `--cache-config` made one.
    pub fn response_cache(&self) -> Option<&Arc<ResponseCache>> {
        self.response_cache.as_ref()
    }

    /// The sticky split headers of the models served, kept current on every poll.
    pub fn sticky_headers(&self) -> Arc<StickyHeaders> {
        self.sticky.clone()
    }

    /// Keeps the memory of resident versions under `budget` bytes (`--model-memory-budget`):
    /// versions load on their first request and the least recently used are evicted. With a
    /// budget, the process's allocator also returns large blocks to the system as soon as
    /// they are freed (see `trim`), so that an evicted version's memory really goes.
    #[must_use]
    pub fn with_memory_budget(mut self, budget: Option<u64>) -> Self {
        if budget.is_some() {
            super::trim::return_large_allocations();
        }
        self.budget = budget;
        self
    }

    /// Measures loads with `meter` instead of by resident memory.
    #[must_use]
    pub fn with_memory_meter(mut self, meter: MemoryMeter) -> Self {
        self.measure = Arc::new(LoadMeasure::new(meter));
        self
    }

    /// The memory budget, if any.
    pub fn memory_budget(&self) -> Option<u64> {
        self.budget
    }

    /// The memory each resident version is charged: (model, version, bytes).
    pub fn resident_memory(&self) -> Vec<(String, u64, u64)> {
        self.snapshot()
            .models()
            .flat_map(|record| record.versions.values())
            .filter_map(|state| match state {
                VersionState::Available(model) => {
                    Some((model.name.to_string(), model.version, model.memory_bytes()))
                }
                _ => None,
            })
            .collect()
    }

    /// The same repository, with every backend it loads passed through `decorate`.
    #[must_use]
    pub fn with_backend_decorator(mut self, decorate: BackendDecorator) -> Self {
        self.decorate = Some(decorate);
        self
    }

    /// Also lets reload-config lists name folders under `roots` (`--allow-model-paths`).
    pub fn with_allowed_roots(mut self, roots: &[PathBuf]) -> std::io::Result<Self> {
        self.roots.allow(roots)?;
        Ok(self)
    }

    /// Also lets reload-config lists write payload logs under `roots` (`--allow-log-paths`).
    pub fn with_allowed_log_roots(mut self, roots: &[PathBuf]) -> std::io::Result<Self> {
        self.log_roots.allow(roots)?;
        Ok(self)
    }

    /// Serves exactly `models` from the first reconciliation on, as [`Self::serve_only`]
    /// does later (`--model-config-file`, `--model-base-path`). These are the operator's
    /// start-up models, so their folders (and their payload logs' folders) become roots a
    /// reload-config may name again.
    #[must_use]
    pub fn serving_only(mut self, models: Vec<ServedModel>) -> Self {
        self.roots.trust(models.iter().map(|m| m.path.as_path()));
        self.log_roots.trust(
            models
                .iter()
                .filter_map(|m| m.logging.as_ref()?.filename_prefix.as_deref()),
        );
        self.control.get_mut().served =
            Some(models.into_iter().map(|m| (m.name.clone(), m)).collect());
        self
    }

    /// Loads only `models` at start (`None`: all); the others wait for the load API.
    #[must_use]
    pub fn loading_at_start(mut self, models: Option<Vec<String>>) -> Self {
        self.control.get_mut().startup_only = models.map(|names| names.into_iter().collect());
        self
    }

    /// Whether the first reconciliation (the load at start-up) has finished.
    pub fn initial_load_settled(&self) -> bool {
        self.initial_load_settled.load(Ordering::Acquire)
    }

    /// The serving state now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .map(|snapshot| snapshot.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    pub(super) fn publish(&self, change: impl FnOnce(&mut Snapshot)) {
        let mut guard = self
            .snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = Snapshot::clone(&guard);
        change(&mut next);
        *guard = Arc::new(next);
    }

    pub(super) fn set_state(&self, model: &str, version: u64, state: VersionState) {
        self.publish(|snapshot| {
            snapshot
                .models
                .entry(model.to_owned())
                .or_insert_with(|| ModelRecord::new(model))
                .versions
                .insert(version, state);
        });
    }

    pub(super) fn state_of(&self, model: &str, version: u64) -> Option<VersionState> {
        self.snapshot()
            .model(model)
            .ok()
            .and_then(|record| record.versions.get(&version).cloned())
    }

    pub(super) fn is_serving(&self, model: &str, version: u64) -> bool {
        self.snapshot()
            .model(model)
            .ok()
            .and_then(|record| record.versions.get(&version))
            .is_some_and(|state| {
                matches!(state, VersionState::Available(_) | VersionState::Loading)
            })
    }
}
