//! Reconciling the repository with the model directory (or the served list): at start, on
//! every poll, and after each explicit API call. Which versions are aspired, which load now
//! and which wait for their first request, and which retire.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::control::{fingerprints, Control, Fingerprint, ServedModel};
use super::ensemble::is_ensemble;
use super::lifecycle::ModelRepository;
use super::mlserver_layout::model_folders;
use super::mlserver_settings::{self, MlserverModel};
use super::model_config::{ModelConfig, ReloadMode, VersionPolicy};
use super::rollout::Rollout;
use super::scan::{scan_model, ScanError, VersionFolder, EXPECTED_LAYOUT, FLAT_VERSION};
use super::snapshot::{ModelRecord, Residence, VersionState};
use crate::payload_log::PayloadWriter;

/// The version folders of a model folder of this server's own layout.
fn versions_of(path: &Path) -> Result<Vec<VersionFolder>, ScanError> {
    match scan_model(path) {
        Ok(versions) => Ok(versions),
        // A model whose folder vanished has no versions: it unloads.
        Err(_) if !path.exists() => Ok(Vec::new()),
        Err(err) => Err(err),
    }
}

/// An MLServer model folder's one version and settings. Refused settings still give the
/// folder a version, so that the repository index shows why it does not serve.
fn mlserver_source(
    path: &Path,
    settings: Result<MlserverModel, String>,
) -> (Vec<VersionFolder>, Result<ModelConfig, String>) {
    match settings {
        Ok(model) => (vec![model.version], Ok(model.config)),
        Err(error) => (
            vec![VersionFolder {
                version: FLAT_VERSION,
                path: path.to_path_buf(),
            }],
            Err(error),
        ),
    }
}

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

/// `config` with models.config's `logging_config` in place of its `[logging]`, checked.
fn with_served_logging(
    config: Result<ModelConfig, String>,
    served: Option<&ServedModel>,
) -> Result<ModelConfig, String> {
    let Some(mut logging) = served.and_then(|m| m.logging.clone()) else {
        return config;
    };
    let mut config = config?;
    // The format and file size models.config cannot say come from config.toml.
    if let Some(own) = &config.logging {
        logging.format = own.format.clone();
        logging.max_file_bytes = own.max_file_bytes.clone();
    }
    config.logging = Some(logging);
    config
        .payload_log()
        .map_err(|err| format!("models.config logging_config: {err}"))?;
    Ok(config)
}

/// The models of the served list, or else of the scanned directory `dir`. Blocks.
fn read_sources(
    dir: &Path,
    served: Option<&BTreeMap<String, ServedModel>>,
) -> Result<Vec<Source>, ScanError> {
    let Some(served) = served else {
        return scanned_sources(dir);
    };
    let mut sources = Vec::with_capacity(served.len());
    for served in served.values() {
        let path = served.path.clone();
        // A listed folder may be MLServer's: its settings apply, the list names it.
        let mlserver = mlserver_settings::read(&path)
            .map_err(|err| err.to_string())
            .transpose();
        let (versions, config) = match mlserver {
            Some(settings) => mlserver_source(&path, settings),
            None => (
                versions_of(&path)?,
                ModelConfig::load(&path).map_err(|err| err.to_string()),
            ),
        };
        sources.push(Source {
            config: with_served_logging(config, Some(served)),
            policy_override: served.policy.clone(),
            labels_override: served.labels.clone(),
            name: served.name.clone(),
            path,
            versions,
        });
    }
    Ok(sources)
}

/// The models of the scanned directory `dir`, MLServer's model folders among them. Blocks.
fn scanned_sources(dir: &Path) -> Result<Vec<Source>, ScanError> {
    let mut sources = Vec::new();
    for folder in model_folders(dir)? {
        let (versions, config) = match folder.mlserver {
            Some(settings) => mlserver_source(&folder.path, settings),
            None => (
                versions_of(&folder.path)?,
                ModelConfig::load(&folder.path).map_err(|err| err.to_string()),
            ),
        };
        sources.push(Source {
            name: folder.name,
            path: folder.path,
            versions,
            config,
            policy_override: None,
            labels_override: None,
        });
    }
    Ok(sources)
}

impl ModelRepository {
    /// Brings every model in line with the directory (or the served list).
    pub async fn reconcile(&self) -> Result<(), ScanError> {
        let mut control = self.control.lock().await;
        if control.startup_only.is_some() {
            // Taken only once the folder could be read, so that a retry still honours it.
            let sources = self.sources(&control).await?;
            let named = control.startup_only.take().unwrap_or_default();
            let others: Vec<String> = sources
                .into_iter()
                .map(|source| source.name)
                .filter(|name| !named.contains(name))
                .collect();
            if !others.is_empty() {
                tracing::info!(
                    models = %others.join(", "),
                    "not loaded at start (--startup-models): the load API loads them"
                );
            }
            control.unloaded.extend(others);
        }
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

    /// Every model's folder and settings, read on a blocking thread: a pass reads a file or
    /// more of every model folder, and whatever those files are (on a slow mount, say), the
    /// runtime that answers health checks and inference never waits on them.
    async fn sources(&self, control: &Control) -> Result<Vec<Source>, ScanError> {
        let dir = self.dir.clone();
        let served = control.served.clone();
        tokio::task::spawn_blocking(move || read_sources(&dir, served.as_ref()))
            .await
            .map_err(|err| ScanError::Stopped(err.to_string()))?
    }

    pub(super) async fn reconcile_locked(
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
        let sources = self.sources(control).await?;
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

        let waiting: BTreeSet<String> = sources
            .iter()
            .filter(|s| control.unloaded.contains(&s.name))
            .map(|s| s.name.clone())
            .collect();
        self.publish(|snapshot| snapshot.waiting = waiting);
        // Ensembles last: they are checked against the step models serving when they load.
        let (ensembles, models): (Vec<&Source>, Vec<&Source>) = sources
            .iter()
            .filter(|s| wanted(&s.name))
            .partition(|s| is_ensemble(&s.config));
        for source in models.into_iter().chain(ensembles) {
            if control.unloaded.contains(&source.name) {
                self.retire_all(control, &source.name);
                continue;
            }
            self.reconcile_model(control, source).await;
        }
        self.refresh_sticky_headers();
        Ok(())
    }

    /// Tells the outermost layer which headers the models' splits are sticky on now.
    fn refresh_sticky_headers(&self) {
        let snapshot = self.snapshot();
        let names = snapshot
            .models()
            .filter_map(|record| {
                record
                    .rollout
                    .as_ref()?
                    .split
                    .as_ref()?
                    .sticky_header
                    .clone()
            })
            .collect();
        self.sticky.set(names);
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
        let labels = source
            .labels_override
            .clone()
            .unwrap_or_else(|| config.version_labels.clone());
        let rollout = self.checked_rollout(control, source, &config, &labels, &aspired);
        let payload_log = self.payload_writer(&source.name, &config);
        self.publish(|snapshot| {
            let record = snapshot
                .models
                .entry(source.name.clone())
                .or_insert_with(|| ModelRecord::new(&source.name));
            record.labels = labels;
            record.rollout = rollout;
            record.payload_log = payload_log;
        });

        let candidates: Vec<&VersionFolder> = source
            .versions
            .iter()
            .filter(|v| aspired.contains(&v.version))
            .filter(|v| !self.is_serving(&source.name, v.version))
            .collect();
        let prints = fingerprints(candidates.iter().map(|v| v.path.clone()).collect()).await;
        let to_load: Vec<(&VersionFolder, Fingerprint)> = candidates
            .into_iter()
            .zip(prints)
            .map(|(v, mut print)| {
                if let Some(steps) = &config.ensemble {
                    print.extend(self.ensemble_steps_print(steps));
                }
                (v, print)
            })
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

    /// The model's `[logging]` writer: the one it has while the settings are unchanged, else a
    /// new one (the old one flushes and closes when the last request holding it ends).
    fn payload_writer(&self, model: &str, config: &ModelConfig) -> Option<Arc<PayloadWriter>> {
        let settings = config.payload_log().ok().flatten()?;
        let snapshot = self.snapshot();
        let current = snapshot
            .model(model)
            .ok()
            .and_then(|r| r.payload_log.clone());
        if let Some(writer) = current.filter(|w| *w.config() == settings) {
            return Some(writer);
        }
        let counts = self.loader.metrics.payload_log().counts(model);
        Some(Arc::new(PayloadWriter::start(model, settings, counts)))
    }

    /// The model's `[traffic]` and `[metrics]` under its effective labels. A refused table is
    /// logged and serves nothing (requests then take the latest version); a target the
    /// version policy does not serve is warned about once, and requests drawn for it take the
    /// latest version until it serves.
    fn checked_rollout(
        &self,
        control: &mut Control,
        source: &Source,
        config: &ModelConfig,
        labels: &BTreeMap<String, u64>,
        aspired: &[u64],
    ) -> Option<Arc<Rollout>> {
        let checked = Rollout::from_config(&config.traffic, &config.metrics, labels);
        let rollout = match checked {
            Ok(rollout) => rollout?,
            Err(message) => {
                if control.is_new_traffic_problem(&source.name, &message) {
                    tracing::error!(model = %source.name, error = %message, "invalid [traffic] settings");
                }
                return None;
            }
        };
        let unserved = rollout.unserved(aspired, labels);
        if !unserved.is_empty() {
            let message = format!(
                "[traffic] names versions the version policy does not serve: {} (serve them with [version_policy] all = true)",
                unserved.join(", ")
            );
            if control.is_new_traffic_problem(&source.name, &message) {
                tracing::warn!(model = %source.name, "{message}");
            }
        }
        if let Some(split) = &rollout.split {
            let weights = split.targets.iter().map(|t| (t.written.as_str(), t.weight));
            self.loader
                .metrics
                .traffic()
                .set_split_weights(&source.name, weights);
        }
        if rollout.shadow.is_some() {
            self.loader.metrics.traffic().announce_shadow(&source.name);
        }
        Some(Arc::new(rollout))
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
