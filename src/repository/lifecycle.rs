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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use super::budget::{LoadMeasure, MemoryMeter};
use super::charge::{Charged, MemoryCharge};
use super::confine::{check_model_name, ConfineError, ModelRoots};
use super::model_config::{ModelConfig, ReloadMode};
use super::residency::{Residence, Residency};
use super::{
    scan_model, subfolders, warmup, warmup_log, LoadedModel, Loader, ModelRecord, ScanError,
    Snapshot, VersionFolder, VersionPolicy, VersionState, WarmupConfig, EXPECTED_LAYOUT,
};
use tokio::sync::oneshot;

use crate::backend::Backend;
use crate::batcher::{Batcher, Execution, Telemetry};
use crate::error::Error;
use crate::metrics::ModelEvent;
use crate::stats::ModelStats;

/// A model the TF Serving reload-config API asked to serve.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedModel {
    pub name: String,
    /// Where its version folders are (default: `--model-dir/<name>`).
    pub path: PathBuf,
    /// Overrides the model's config.toml when given.
    pub policy: Option<VersionPolicy>,
    pub labels: Option<BTreeMap<String, u64>>,
}

/// What the reconciler remembers between runs; guarded by the reconcile lock.
#[derive(Default)]
pub(super) struct Control {
    /// Versions that failed, with a fingerprint of their files: retried when it changes.
    pub(super) failures: HashMap<(String, u64), Fingerprint>,
    /// Models unloaded through the API: not loaded again until the API loads them.
    unloaded: HashSet<String>,
    /// Set by the reload-config API: exactly these models are served.
    served: Option<BTreeMap<String, ServedModel>>,
    /// Closed when the loaded version's session is dropped (after its batcher and every run
    /// let go of it): a retiring version is UNLOADING until then.
    pub(super) alive: HashMap<(String, u64), oneshot::Receiver<()>>,
    /// Under a memory budget: where each version that loads on demand is, and its settings.
    pub(super) standby: HashMap<(String, u64), (VersionFolder, ModelConfig)>,
    /// The memory each version's last load took: the expected size of its next load.
    pub(super) measured: HashMap<(String, u64), u64>,
    /// The problem last logged for each model folder: a poll logs a problem only when it
    /// differs, so an operator reads it once rather than every `--model-poll-secs`.
    reported: HashMap<String, String>,
}

impl Control {
    /// Whether `problem` is news for `model` (worth a log line); remembers it either way.
    fn is_new_problem(&mut self, model: &str, problem: &str) -> bool {
        if self.reported.get(model).is_some_and(|last| last == problem) {
            return false;
        }
        self.reported.insert(model.to_owned(), problem.to_owned());
        true
    }
}

/// Sizes and modification times of a version folder's files.
pub(super) type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// A model as found on disk, with its settings.
struct Source {
    name: String,
    /// The model's folder.
    path: PathBuf,
    versions: Vec<VersionFolder>,
    config: Result<ModelConfig, String>,
    policy_override: Option<VersionPolicy>,
    labels_override: Option<BTreeMap<String, u64>>,
}

/// The model repository: the current snapshot, and the lifecycle that replaces it.
pub struct ModelRepository {
    dir: PathBuf,
    /// Where the admin APIs may point models: `--model-dir` and `--allow-model-paths`.
    roots: ModelRoots,
    pub(super) loader: Arc<Loader>,
    /// Swapped whole; held only to clone or replace the `Arc`, never across an await.
    snapshot: RwLock<Arc<Snapshot>>,
    /// One reconciliation, or one load on demand, at a time.
    pub(super) control: tokio::sync::Mutex<Control>,
    /// Applied to every backend right after it loads, before warmup; none in production.
    decorate: Option<BackendDecorator>,
    /// Set once the first reconciliation has finished, whatever its outcome: until then the
    /// server is live but not ready.
    initial_load_settled: AtomicBool,
    /// `--model-memory-budget`: `None` keeps every served version resident.
    pub(super) budget: Option<u64>,
    /// Use order and loads in progress under the budget.
    pub(super) residency: Residency,
    /// Measures each load's memory, one load at a time.
    measure: Arc<LoadMeasure>,
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
            loader: Arc::new(loader),
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            control: tokio::sync::Mutex::new(Control::default()),
            decorate: None,
            initial_load_settled: AtomicBool::new(false),
            budget: None,
            residency: Residency::default(),
            measure: Arc::new(LoadMeasure::default()),
        }
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

    /// Serves exactly `models` from the first reconciliation on, as [`Self::serve_only`]
    /// does later (`--model-config-file`, `--model-base-path`).
    #[must_use]
    pub fn serving_only(mut self, models: Vec<ServedModel>) -> Self {
        self.control.get_mut().served =
            Some(models.into_iter().map(|m| (m.name.clone(), m)).collect());
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

    fn publish(&self, change: impl FnOnce(&mut Snapshot)) {
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

    /// Brings every model in line with the directory (or the served list).
    pub async fn reconcile(&self) -> Result<(), ScanError> {
        let mut control = self.control.lock().await;
        let result = self.reconcile_locked(&mut control, None).await;
        if !self.initial_load_settled.swap(true, Ordering::AcqRel) {
            self.warn_if_pinned_exceed_budget();
        }
        result
    }

    /// Polls the directory every `period` until the task is aborted.
    pub fn watch(self: Arc<Self>, period: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.poll(period))
    }

    /// Polls the directory every `period`, forever; the first poll is one period from now.
    pub async fn poll(self: Arc<Self>, period: Duration) {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        // Logged when it starts or changes, not on every tick.
        let mut last_error = None;
        loop {
            ticks.tick().await;
            let error = self.reconcile().await.err().map(|err| err.to_string());
            if error != last_error {
                match &error {
                    Some(error) => tracing::error!(%error, "cannot poll the model directory"),
                    None => tracing::info!("the model directory can be read again"),
                }
            }
            last_error = error;
        }
    }

    /// Loads `name` (again): clears an earlier unload and reconciles it now.
    pub async fn load_model(&self, name: &str) -> Result<(), Error> {
        check_model_name(name)?;
        let mut control = self.control.lock().await;
        control.unloaded.remove(name);
        self.reconcile_locked(&mut control, Some(name))
            .await
            .map_err(|err| self.internal(&err))?;
        let snapshot = self.snapshot();
        let record = snapshot
            .model(name)
            .map_err(|_| Error::ModelNotFound(name.to_owned()))?;
        record.resolve(&super::VersionSelector::Latest).map(|_| ())
    }

    /// Unloads every version of `name`; it stays unloaded until loaded again.
    pub async fn unload_model(&self, name: &str) -> Result<(), Error> {
        check_model_name(name)?;
        let mut control = self.control.lock().await;
        self.snapshot().model(name)?;
        control.unloaded.insert(name.to_owned());
        self.reconcile_locked(&mut control, Some(name))
            .await
            .map_err(|err| self.internal(&err))
    }

    /// Serves exactly `models` from now on (TF Serving's HandleReloadConfigRequest).
    pub async fn serve_only(&self, models: Vec<ServedModel>) -> Result<(), Error> {
        let mut control = self.control.lock().await;
        control.unloaded.clear();
        control.served = Some(models.into_iter().map(|m| (m.name.clone(), m)).collect());
        self.reconcile_locked(&mut control, None)
            .await
            .map_err(|err| self.internal(&err))
    }

    /// The folder a reload-config entry's versions live in: `base_path` (empty: the model
    /// directory's folder of that name), confined to the model roots.
    pub fn model_path(&self, name: &str, base_path: &str) -> Result<PathBuf, ConfineError> {
        self.roots.resolve(name, base_path)
    }

    /// A failure to read the repository, as a client may see it: without the server's paths.
    fn internal(&self, err: &ScanError) -> Error {
        tracing::error!(error = %err, "cannot read the model repository");
        Error::Internal(self.roots.redact(&err.to_string()))
    }

    fn sources(&self, control: &Control) -> Result<Vec<Source>, ScanError> {
        let listed: Vec<(String, PathBuf, Option<&ServedModel>)> = match &control.served {
            Some(served) => served
                .values()
                .map(|m| (m.name.clone(), m.path.clone(), Some(m)))
                .collect(),
            None => subfolders(&self.dir)?
                .into_iter()
                .map(|(name, path)| (name, path, None))
                .collect(),
        };
        let mut sources = Vec::with_capacity(listed.len());
        for (name, path, served) in listed {
            let versions = match scan_model(&path) {
                Ok(versions) => versions,
                // A listed model whose folder vanished has no versions: it unloads.
                Err(_) if !path.exists() => Vec::new(),
                Err(err) => return Err(err),
            };
            sources.push(Source {
                config: ModelConfig::load(&path).map_err(|err| err.to_string()),
                policy_override: served.and_then(|m| m.policy.clone()),
                labels_override: served.and_then(|m| m.labels.clone()),
                name,
                path,
                versions,
            });
        }
        Ok(sources)
    }

    async fn reconcile_locked(
        &self,
        control: &mut Control,
        only: Option<&str>,
    ) -> Result<(), ScanError> {
        let result = self.reconcile_sources(control, only).await;
        self.sweep_retired(control);
        result
    }

    async fn reconcile_sources(
        &self,
        control: &mut Control,
        only: Option<&str>,
    ) -> Result<(), ScanError> {
        let sources = self.sources(control)?;
        let wanted = |name: &str| only.is_none_or(|only| only == name);

        // Models that are gone from disk (or from the served list) unload and disappear.
        let present: HashSet<&str> = sources.iter().map(|s| s.name.as_str()).collect();
        let gone: Vec<String> = self
            .snapshot()
            .models()
            .map(|m| m.name.clone())
            .filter(|name| wanted(name) && !present.contains(name.as_str()))
            .collect();
        for name in gone {
            self.retire_all(control, &name);
            self.publish(|snapshot| {
                snapshot.models.remove(&name);
            });
            control.reported.remove(&name);
            tracing::info!(model = %name, "model removed");
        }

        for source in sources.iter().filter(|s| wanted(&s.name)) {
            if control.unloaded.contains(&source.name) {
                self.retire_all(control, &source.name);
                continue;
            }
            self.reconcile_model(control, source).await;
        }
        Ok(())
    }

    async fn reconcile_model(&self, control: &mut Control, source: &Source) {
        let config = match &source.config {
            Ok(config) => config.clone(),
            Err(message) => {
                // Bad settings: report them on the newest version; keep whatever serves.
                if let Some(latest) = source.versions.last() {
                    if !self.is_serving(&source.name, latest.version) {
                        self.set_state(
                            &source.name,
                            latest.version,
                            VersionState::End {
                                error: Some(self.roots.redact(message)),
                            },
                        );
                    }
                }
                if control.is_new_problem(&source.name, message) {
                    tracing::error!(model = %source.name, error = %message, "invalid model settings");
                }
                return;
            }
        };
        let policy = match source
            .policy_override
            .clone()
            .map(Ok)
            .unwrap_or_else(|| config.policy())
        {
            Ok(policy) => policy,
            Err(message) => {
                if control.is_new_problem(&source.name, &message) {
                    tracing::error!(model = %source.name, error = %message, "invalid version policy");
                }
                return;
            }
        };
        let on_disk: Vec<u64> = source.versions.iter().map(|v| v.version).collect();
        let aspired = policy.aspired(&on_disk);
        if source.versions.is_empty() {
            let problem = no_version_problem(&source.path);
            if control.is_new_problem(&source.name, &problem) {
                tracing::warn!(model = %source.name, "{problem}");
            }
        } else {
            control.reported.remove(&source.name);
        }
        self.publish(|snapshot| {
            let record = snapshot
                .models
                .entry(source.name.clone())
                .or_insert_with(|| ModelRecord::new(&source.name));
            record.labels = source
                .labels_override
                .clone()
                .unwrap_or_else(|| config.version_labels.clone());
        });

        let to_load: Vec<(&VersionFolder, Fingerprint)> = source
            .versions
            .iter()
            .filter(|v| aspired.contains(&v.version))
            .filter(|v| !self.is_serving(&source.name, v.version))
            .map(|v| (v, fingerprint(&v.path)))
            .filter(|(v, print)| {
                control.failures.get(&(source.name.clone(), v.version)) != Some(print)
            })
            .collect();
        if self.budget.is_some() && !config.lifecycle.pinned {
            // Loads wait for the first request (see `residency`).
            for (folder, _) in to_load {
                let key = (source.name.clone(), folder.version);
                control
                    .standby
                    .insert(key, (folder.clone(), config.clone()));
                if !matches!(
                    self.state_of(&source.name, folder.version),
                    Some(VersionState::NotResident(_))
                ) {
                    self.set_state(
                        &source.name,
                        folder.version,
                        VersionState::NotResident(Residence::NotLoaded),
                    );
                }
            }
        } else {
            let unload_first =
                config.lifecycle.reload == ReloadMode::UnloadFirst && !to_load.is_empty();
            if unload_first {
                self.unload_before_reload(control, &source.name, &aspired)
                    .await;
            }
            for (folder, fingerprint) in to_load {
                let key = (source.name.clone(), folder.version);
                match self.load(&source.name, folder, &config).await {
                    Ok(alive) => {
                        control.failures.remove(&key);
                        control.alive.insert(key, alive);
                    }
                    Err(()) => {
                        control.failures.insert(key, fingerprint);
                    }
                }
            }
            if unload_first {
                self.residency.reloading().remove(&source.name);
            }
        }

        // Retire what is no longer aspired, unless nothing aspired serves yet.
        let snapshot = self.snapshot();
        let Ok(record) = snapshot.model(&source.name) else {
            return;
        };
        let aspired_serving = aspired.iter().any(|v| {
            matches!(
                record.versions.get(v),
                Some(
                    VersionState::Available(_)
                        | VersionState::NotResident(Residence::NotLoaded | Residence::Evicted)
                )
            )
        });
        let forgotten: Vec<u64> = record
            .versions
            .iter()
            .filter(|(v, state)| {
                !aspired.contains(v) && matches!(state, VersionState::NotResident(_))
            })
            .map(|(v, _)| *v)
            .collect();
        let retire: Vec<u64> = record
            .versions
            .iter()
            .filter(|(v, state)| {
                !aspired.contains(v) && matches!(state, VersionState::Available(_))
            })
            .map(|(v, _)| *v)
            .filter(|v| aspired_serving || !on_disk.contains(v))
            .collect();
        for version in retire {
            self.retire(control, &source.name, version);
        }
        for version in forgotten {
            control.standby.remove(&(source.name.clone(), version));
            self.set_state(&source.name, version, VersionState::End { error: None });
        }
        // Failures of versions no longer on disk are forgotten.
        control
            .failures
            .retain(|(model, v), _| model != &source.name || on_disk.contains(v));
    }

    /// Pinned models are loaded whatever the budget; if they hold all of it, nothing else
    /// can load, which an operator should learn at start rather than from refusals.
    fn warn_if_pinned_exceed_budget(&self) {
        let Some(budget) = self.budget else {
            return;
        };
        let pinned: u64 = self
            .snapshot()
            .models()
            .flat_map(|record| record.versions.values())
            .filter_map(|state| match state {
                VersionState::Available(model) if model.pinned => Some(model.memory_bytes()),
                _ => None,
            })
            .sum();
        if pinned >= budget {
            tracing::warn!(
                pinned,
                budget,
                "pinned models hold the whole --model-memory-budget: other models cannot load"
            );
        }
    }

    fn state_of(&self, model: &str, version: u64) -> Option<VersionState> {
        self.snapshot()
            .model(model)
            .ok()
            .and_then(|record| record.versions.get(&version).cloned())
    }

    /// `reload = "unload-first"`: drains and drops the versions that the new ones replace
    /// before those load. Requests meanwhile wait for the new version (see `residency`).
    async fn unload_before_reload(&self, control: &mut Control, model: &str, aspired: &[u64]) {
        let old: Vec<u64> = self
            .snapshot()
            .model(model)
            .map(|record| {
                record
                    .versions
                    .iter()
                    .filter(|(v, state)| {
                        !aspired.contains(v) && matches!(state, VersionState::Available(_))
                    })
                    .map(|(v, _)| *v)
                    .collect()
            })
            .unwrap_or_default();
        if old.is_empty() {
            return;
        }
        self.residency.reloading().insert(model.to_owned());
        for version in old {
            self.retire(control, model, version);
            if let Some(alive) = control.alive.remove(&(model.to_owned(), version)) {
                let _ = alive.await;
            }
            self.set_state(model, version, VersionState::End { error: None });
            tracing::info!(
                model,
                version,
                "unloaded before its successor loads (reload = unload-first)"
            );
        }
    }

    fn is_serving(&self, model: &str, version: u64) -> bool {
        self.snapshot()
            .model(model)
            .ok()
            .and_then(|record| record.versions.get(&version))
            .is_some_and(|state| {
                matches!(state, VersionState::Available(_) | VersionState::Loading)
            })
    }

    /// Loads and warms up one version off the reactor, then publishes it. Returns a receiver
    /// that closes when the loaded version is finally dropped.
    pub(super) async fn load(
        &self,
        model: &str,
        folder: &VersionFolder,
        config: &ModelConfig,
    ) -> Result<oneshot::Receiver<()>, ()> {
        tracing::info!(model, version = folder.version, "loading");
        if super::is_flat(folder) {
            tracing::info!(
                model,
                folder = %folder.path.display(),
                "the model file sits directly in the model folder (the MLServer / KServe \
                 layout): serving it as version 1"
            );
        }
        self.loader.metrics.register_model(model);
        if !config.ignored.is_empty() {
            tracing::warn!(
                model,
                ignored = %config.ignored.join("; "),
                "config.pbtxt sets fields this server does not apply"
            );
        }
        self.set_state(model, folder.version, VersionState::Loading);
        let (explicit, warmup) = match &config.warmup {
            Some(warmup) => (true, warmup.clone()),
            None => (
                false,
                WarmupConfig {
                    requests: 1,
                    batch_size: 1,
                    shapes: BTreeMap::new(),
                },
            ),
        };
        let loader = self.loader.clone();
        let task_folder = folder.clone();
        let task_config = config.clone();
        let name = model.to_owned();
        let decorate = self.decorate.clone();
        let measure = self.measure.clone();
        let loaded = tokio::task::spawn_blocking(move || {
          measure.measure(&task_folder.path, || {
            let backend = loader.load(&task_folder, &task_config).map_err(|err| err.to_string())?;
            let backend = match &decorate {
                Some(decorate) => decorate(&name, backend),
                None => backend,
            };
            // A warmup file is the model's own warmup: it replaces the generated one.
            let replayed = match warmup_log::find(&task_folder.path) {
                Some(file) => {
                    let requests = warmup_log::replay(backend.as_ref(), &file)
                        .map_err(|err| format!("warmup failed: {err}"))?;
                    tracing::info!(model = %name, version = task_folder.version, requests, "replayed the warmup file");
                    true
                }
                None => false,
            };
            match if replayed && !explicit {
                Ok(())
            } else {
                warmup::run(backend.as_ref(), &warmup)
            } {
                Ok(()) => {}
                // Only a warmup the model asked for can fail its load: generated inputs may
                // not suit every model.
                Err(err) if explicit => return Err(err),
                Err(err) => tracing::warn!(model = %name, version = task_folder.version, error = %err, "default warmup failed; serving anyway"),
            }
            Ok(backend)
          })
        })
        .await
        .map_err(|err| format!("loading failed: {err}"))
        .and_then(|result| result);
        match loaded {
            Ok((backend, memory_bytes)) => {
                let (alive_tx, alive_rx) = oneshot::channel();
                let memory = Arc::new(MemoryCharge::new(memory_bytes, backend.held_bytes()));
                let backend: Arc<dyn Backend> = Arc::new(Charged::new(
                    backend,
                    memory.clone(),
                    self.residency.growth_sender(self.budget),
                    alive_tx,
                ));
                let batching = config
                    .batching
                    .clone()
                    .unwrap_or_else(|| self.loader.default_batching.clone());
                let stats = Arc::new(ModelStats::default());
                let telemetry = Telemetry {
                    stats: stats.clone(),
                    metrics: self.loader.metrics.clone(),
                    version: folder.version,
                };
                let execution = Execution {
                    instances: self.loader.instances(config),
                    inline_max: self.loader.inline_run_max,
                };
                let batcher =
                    Batcher::spawn_with(model, backend.clone(), &batching, execution, telemetry);
                let loaded = LoadedModel {
                    name: Arc::from(model),
                    version: folder.version,
                    backend,
                    batcher,
                    stats,
                    memory,
                    pinned: config.lifecycle.pinned,
                    last_used: AtomicU64::new(0),
                };
                self.residency.touch(&loaded);
                self.set_state(
                    model,
                    folder.version,
                    VersionState::Available(Arc::new(loaded)),
                );
                self.loader
                    .metrics
                    .record_model_event(model, ModelEvent::Loaded);
                tracing::info!(model, version = folder.version, memory_bytes, "available");
                Ok(alive_rx)
            }
            Err(error) => {
                let serving = self
                    .snapshot()
                    .model(model)
                    .ok()
                    .and_then(|record| record.latest().ok())
                    .map(|loaded| loaded.version);
                match serving {
                    Some(serving) => {
                        tracing::error!(model, version = folder.version, %error, serving, "failed to load; the serving version stays")
                    }
                    None => {
                        tracing::error!(model, version = folder.version, %error, "failed to load; no version of this model serves")
                    }
                }
                self.set_state(
                    model,
                    folder.version,
                    VersionState::End {
                        error: Some(self.roots.redact(&error)),
                    },
                );
                self.loader
                    .metrics
                    .record_model_event(model, ModelEvent::LoadFailed);
                Err(())
            }
        }
    }

    /// Takes a version out of service. Requests that hold it finish; it is UNLOADING until
    /// the last of them lets go, then END.
    fn retire(&self, control: &mut Control, model: &str, version: u64) {
        control.standby.remove(&(model.to_owned(), version));
        self.set_state(model, version, VersionState::Unloading);
        self.loader
            .metrics
            .record_model_event(model, ModelEvent::Unloaded);
        tracing::info!(model, version, "unloading");
        if !control.alive.contains_key(&(model.to_owned(), version)) {
            self.set_state(model, version, VersionState::End { error: None });
        }
    }

    fn retire_all(&self, control: &mut Control, model: &str) {
        let snapshot = self.snapshot();
        let Ok(record) = snapshot.model(model) else {
            return;
        };
        let serving: Vec<u64> = record
            .versions
            .iter()
            .filter(|(_, state)| matches!(state, VersionState::Available(_)))
            .map(|(v, _)| *v)
            .collect();
        let not_resident: Vec<u64> = record
            .versions
            .iter()
            .filter(|(_, state)| matches!(state, VersionState::NotResident(_)))
            .map(|(v, _)| *v)
            .collect();
        drop(snapshot);
        for version in serving {
            self.retire(control, model, version);
        }
        for version in not_resident {
            control.standby.remove(&(model.to_owned(), version));
            self.set_state(model, version, VersionState::End { error: None });
        }
    }

    /// Marks retired versions whose last user has finished as END.
    fn sweep_retired(&self, control: &mut Control) {
        let snapshot = self.snapshot();
        let mut finished = Vec::new();
        control.alive.retain(|(model, version), alive| {
            let state = snapshot
                .model(model)
                .ok()
                .and_then(|record| record.versions.get(version));
            match state {
                Some(VersionState::Available(_)) => true,
                Some(VersionState::Unloading) => match alive.try_recv() {
                    Err(oneshot::error::TryRecvError::Empty) => true,
                    _ => {
                        finished.push((model.clone(), *version));
                        false
                    }
                },
                // Gone from the snapshot (model removed) or already ended.
                _ => false,
            }
        });
        drop(snapshot);
        for (model, version) in finished {
            self.set_state(&model, version, VersionState::End { error: None });
            tracing::info!(model = %model, version, "unloaded");
        }
    }
}

/// What is wrong with a model folder that has no version folder, and how to fix it.
fn no_version_problem(folder: &Path) -> String {
    // A single model file directly inside would have been served as version 1; several
    // are ambiguous.
    let mut loose: Vec<String> = std::fs::read_dir(folder)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| path.is_file() && super::scan::has_model_extension(path))
                .filter_map(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    loose.sort();
    if loose.len() > 1 {
        format!(
            "model folder has no numeric version folder and holds several model files ({}): \
             keep one, or move each version into a version folder such as {}; \
             {EXPECTED_LAYOUT}",
            loose.join(", "),
            folder.join("1").display()
        )
    } else {
        format!("model folder has no numeric version folder; {EXPECTED_LAYOUT}")
    }
}

pub(super) fn fingerprint(dir: &Path) -> Fingerprint {
    let mut files: Fingerprint = walk(dir)
        .into_iter()
        .filter_map(|path| {
            let meta = std::fs::metadata(&path).ok()?;
            Some((path, meta.len(), meta.modified().ok()))
        })
        .collect();
    files.sort();
    files
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .flat_map(|path| {
            if path.is_dir() {
                walk(&path)
            } else {
                vec![path]
            }
        })
        .collect()
}
