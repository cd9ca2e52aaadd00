//! Loading one version: off the reactor, measured, warmed up (by its warmup file or a
//! generated request), wrapped so that its memory is charged, given its batcher, and only then
//! published as available.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::charge::{Charged, MemoryCharge};
use super::lifecycle::ModelRepository;
use super::mlserver_settings::{check_signature, MLSERVER_SETTINGS_FILE};
use super::model_config::{ModelConfig, WarmupConfig};
use super::scan::VersionFolder;
use super::snapshot::{LoadedModel, VersionState};
use super::{warmup, warmup_log};
use crate::backend::Backend;
use crate::batcher::{BatchSettings, Batcher, Execution, Telemetry};
use crate::cache::CacheScope;
use crate::metrics::ModelEvent;
use crate::stats::ModelStats;

impl ModelRepository {
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
        if !config.mlserver.ignored.is_empty() {
            tracing::warn!(
                model,
                ignored = %config.mlserver.ignored.join("; "),
                "{MLSERVER_SETTINGS_FILE} sets fields this server does not apply"
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
        let (loaded, ensemble) = match &config.ensemble {
            Some(steps) => match self.check_ensemble(model, steps, config) {
                Ok((backend, ensemble)) => (Ok((backend, 0)), Some(ensemble)),
                Err(error) => (Err(error), None),
            },
            None => (
                self.load_backend(model, folder, config, explicit, warmup)
                    .await,
                None,
            ),
        };
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
                let batching = batch_settings(
                    config,
                    backend.max_batch_size(),
                    &self.loader.default_batching,
                );
                let stats = Arc::new(ModelStats::default());
                let telemetry = Telemetry {
                    stats: stats.clone(),
                    metrics: self.loader.metrics.clone(),
                    version: folder.version,
                };
                let execution = Execution {
                    instances: self.loader.instances(config),
                    inline_max: self.loader.inline_run_max,
                    flush: self.flush.clone(),
                };
                let batcher =
                    Batcher::spawn_with(model, backend.clone(), &batching, execution, telemetry);
                let loaded = LoadedModel {
                    name: Arc::from(model),
                    version: folder.version,
                    version_name: config.mlserver.version_name.as_deref().map(Arc::from),
                    backend,
                    batcher,
                    stats,
                    memory,
                    pinned: config.lifecycle.pinned,
                    ensemble,
                    last_used: AtomicU64::new(0),
                    response_cache: self.cache_scope(model, config),
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

    /// Loads one version's runtime off the reactor and warms it up: the backend and the
    /// memory its load took.
    async fn load_backend(
        &self,
        model: &str,
        folder: &VersionFolder,
        config: &ModelConfig,
        explicit: bool,
        warmup: WarmupConfig,
    ) -> Result<(Arc<dyn Backend>, u64), String> {
        let loader = self.loader.clone();
        let task_folder = folder.clone();
        let task_config = config.clone();
        let name = model.to_owned();
        let decorate = self.decorate.clone();
        let measure = self.measure.clone();
        tokio::task::spawn_blocking(move || {
          measure.measure(&task_folder.path, || {
            let backend = loader.load(&task_folder, &task_config).map_err(|err| err.to_string())?;
            check_signature(backend.signatures(), &task_config.mlserver)?;
            let backend = match &decorate {
                Some(decorate) => decorate(&name, backend),
                None => backend,
            };
            // A warmup file is the model's own warmup: it replaces the generated one.
            let replayed = warmup_log::ships(&task_folder.path);
            if replayed {
                let requests = warmup_log::replay(backend.as_ref(), &task_folder.path)
                    .map_err(|err| format!("warmup failed: {err}"))?;
                tracing::info!(model = %name, version = task_folder.version, requests, "replayed the warmup file");
            }
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
        .and_then(|result| result)
    }
}

impl ModelRepository {
    /// A share of the response cache for a new load of `model`, if it enables
    /// `response_cache`. Without a server cache it is served uncached, as Triton does (the
    /// cache must be enabled on both sides), with a warning that says how to turn it on.
    fn cache_scope(&self, model: &str, config: &ModelConfig) -> Option<CacheScope> {
        if !config.response_cache.enabled() {
            return None;
        }
        match &self.response_cache {
            Some(cache) => Some(cache.scope()),
            None => {
                tracing::warn!(
                    model,
                    "the model enables response_cache but the server has no cache \
                     (--cache-config local,size=BYTES): its answers are not cached"
                );
                None
            }
        }
    }
}

/// The batching of a model: its own `[batching]`; else, for a `config.pbtxt` whose
/// `max_batch_size` was completed from the model file (`contract`), dynamic batching up to it
/// with it preferred, as Triton completes it; else the server's, which never merges past the
/// model's `max_batch_size` (nor at all for a model without a batch dimension).
fn batch_settings(
    config: &ModelConfig,
    contracted: Option<usize>,
    server: &BatchSettings,
) -> BatchSettings {
    if let Some(own) = &config.batching {
        return own.clone();
    }
    match (config.max_batch_size, contracted) {
        (None, Some(completed)) if config.from_triton && completed > 1 => {
            return BatchSettings {
                max_batch_size: completed,
                preferred_batch_sizes: vec![completed],
                ..server.clone()
            }
        }
        _ => {}
    }
    match config.max_batch_size {
        Some(max) if max < server.max_batch_size => BatchSettings {
            max_batch_size: max,
            preferred_batch_sizes: server
                .preferred_batch_sizes
                .iter()
                .copied()
                .filter(|&size| size <= max)
                .collect(),
            ..server.clone()
        },
        _ => server.clone(),
    }
}
