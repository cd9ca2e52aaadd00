//! Loads on demand and evictions under `--model-memory-budget` (the rules are in residency.rs):
//! a request for a version that is not resident waits for its one shared load, which makes
//! room first by evicting the least recently used.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use super::control::Control;
use super::error::{RepositoryError, ResidencyError};
use super::lifecycle::ModelRepository;
use super::residency::LoadOutcome;
use super::snapshot::{LoadedModel, ModelRecord, Residence, VersionState};
use super::VersionSelector;

/// What a request finds for the version it names.
enum Found {
    Serving(Arc<LoadedModel>),
    /// Not resident (or loading): wait for this version's load.
    Load(u64),
}

impl ModelRepository {
    /// The serving version `selector` names, loading it first when it is not resident. Waits
    /// at most until `deadline`. Without a budget (and outside an unload-first reload) this
    /// is the snapshot's answer, as it always was.
    pub async fn resolve_serving(
        self: &Arc<Self>,
        name: &str,
        selector: &VersionSelector,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Arc<LoadedModel>, RepositoryError> {
        let waiting = Instant::now();
        let mut waited = false;
        // Counts this request among those waiting for a load, from its first wait to its answer.
        let mut waiter = None;
        // A version can be evicted between its load and this request's look at it (when the
        // budget holds few versions); each round loads it again.
        for _ in 0..8 {
            let version = match self.find(name, selector)? {
                Found::Serving(model) => {
                    self.residency.touch(&model);
                    if waited {
                        self.loader
                            .metrics
                            .observe_load_wait(name, waiting.elapsed());
                    }
                    return Ok(model);
                }
                Found::Load(version) => version,
            };
            waited = true;
            if waiter.is_none() {
                waiter = Some(self.loader.metrics.wait_for_load(name));
            }
            let mut done = self.shared_load(name, version);
            let outcome = {
                let wait = done.wait_for(Option::is_some);
                match deadline {
                    Some(deadline) => tokio::time::timeout_at(deadline, wait)
                        .await
                        .map_err(|_| RepositoryError::LoadDeadline {
                            model: name.to_owned(),
                        })?
                        .map(|outcome| outcome.clone()),
                    None => wait.await.map(|outcome| outcome.clone()),
                }
            };
            match outcome {
                // The version this wait was for: used as it is, even if another load has
                // evicted it since (its eviction then waits for this request, as for any
                // request already running on it), so that requests cycling through more models
                // than fit cannot push each other's versions out forever.
                Ok(Some(Ok(Some(model)))) => {
                    self.residency.touch(&model);
                    self.loader
                        .metrics
                        .observe_load_wait(name, waiting.elapsed());
                    return Ok(model);
                }
                Ok(Some(Err(err))) => return Err(err.into()),
                Ok(_) => {}
                Err(_) => {
                    return Err(ResidencyError::LoadFailed {
                        model: name.to_owned(),
                        version,
                        reason: "the load stopped".into(),
                    }
                    .into())
                }
            }
        }
        Err(ResidencyError::EvictedAgain {
            model: name.to_owned(),
        }
        .into())
    }

    fn find(&self, name: &str, selector: &VersionSelector) -> Result<Found, RepositoryError> {
        let snapshot = self.snapshot();
        let record = snapshot.model(name)?;
        let reloading = || self.residency.reloading().contains(name);
        let Some(budget) = self.budget else {
            return match record.resolve(selector) {
                Ok(model) => Ok(Found::Serving(model)),
                Err(_) if reloading() => Ok(Found::Load(loading_version(record).unwrap_or(0))),
                Err(err) => Err(err),
            };
        };
        let version = match selector {
            VersionSelector::Latest => record
                .versions
                .iter()
                .rev()
                .find(|(_, state)| {
                    matches!(
                        state,
                        VersionState::Available(_)
                            | VersionState::NotResident(_)
                            | VersionState::Loading
                    )
                })
                .map(|(v, _)| *v),
            VersionSelector::Specific(version) => Some(*version),
            VersionSelector::Label(label) => record.labels.get(label).copied(),
        };
        let Some(version) = version else {
            return record.resolve(selector).map(Found::Serving);
        };
        match record.versions.get(&version) {
            Some(VersionState::Available(model)) => Ok(Found::Serving(model.clone())),
            Some(VersionState::NotResident(Residence::TooLarge { needed, .. })) => {
                Err(ResidencyError::TooLarge {
                    model: name.to_owned(),
                    version,
                    needed: *needed,
                    budget,
                }
                .into())
            }
            Some(VersionState::NotResident(_) | VersionState::Loading) => Ok(Found::Load(version)),
            _ => record.resolve(selector).map(Found::Serving),
        }
    }

    /// The load of `version` in progress, or a new one.
    fn shared_load(self: &Arc<Self>, name: &str, version: u64) -> watch::Receiver<LoadOutcome> {
        let key = (name.to_owned(), version);
        let mut pending = self.residency.pending();
        if let Some(load) = pending.get(&key) {
            return load.clone();
        }
        let (done, load) = watch::channel(None);
        pending.insert(key.clone(), load.clone());
        drop(pending);
        if let Some(growth) = self.residency.take_growth() {
            tokio::spawn(settle_growth(Arc::downgrade(self), growth));
        }
        let repository = self.clone();
        tokio::spawn(async move {
            let outcome = repository.load_on_demand(&key.0, key.1).await;
            done.send_replace(Some(outcome));
            repository.residency.pending().remove(&key);
        });
        load
    }

    /// Loads one version for the requests waiting on it, making room first.
    async fn load_on_demand(
        &self,
        name: &str,
        version: u64,
    ) -> Result<Option<Arc<LoadedModel>>, ResidencyError> {
        let mut control = self.control.lock().await;
        let key = (name.to_owned(), version);
        let state = self
            .snapshot()
            .model(name)
            .ok()
            .and_then(|record| record.versions.get(&version).cloned());
        let failed = |reason: &str| ResidencyError::LoadFailed {
            model: name.to_owned(),
            version,
            reason: reason.to_owned(),
        };
        match state {
            Some(VersionState::NotResident(Residence::NotLoaded | Residence::Evicted)) => {}
            // Loaded by someone else (or failed) while this load waited for the lock.
            Some(VersionState::Available(_)) | None => return Ok(None),
            Some(VersionState::End { error: Some(error) }) => return Err(failed(&error)),
            Some(_) if self.budget.is_none() => return Ok(None),
            Some(_) => return Err(failed("the version is no longer served")),
        }
        let Some(budget) = self.budget else {
            return Ok(None);
        };
        let Some((folder, config)) = control.standby.get(&key).cloned() else {
            return Err(failed("the version is no longer served"));
        };
        let expected = match control.measured.get(&key).copied() {
            Some(measured) => measured,
            None => {
                // The folder is walked on a blocking thread: its size is a floor, and a walk
                // that fails to finish leaves nothing to count.
                let path = folder.path.clone();
                tokio::task::spawn_blocking(move || super::files_size(&path))
                    .await
                    .unwrap_or(0)
            }
        };
        if expected > budget {
            return Err(self.too_large(name, version, expected, budget));
        }
        self.make_room(&mut control, Some((name, version)), expected, budget)
            .await
            .map_err(|held| no_room(name, version, expected, held, budget))?;
        self.loader.metrics.record_load_on_demand(name);
        let Ok(alive) = self.load(name, &folder, &config).await else {
            let print = super::control::fingerprints(vec![folder.path.clone()]).await;
            control
                .failures
                .insert(key, print.into_iter().next().unwrap_or_default());
            let reason = match self
                .snapshot()
                .model(name)
                .ok()
                .and_then(|r| r.versions.get(&version).cloned())
            {
                Some(VersionState::End { error: Some(error) }) => error,
                _ => "see the server log".to_owned(),
            };
            return Err(failed(&reason));
        };
        control.alive.insert(key.clone(), alive);
        let measured = self
            .snapshot()
            .resolve(name, &VersionSelector::Specific(version))
            .map(|model| {
                self.residency.touch(&model);
                model.memory.loaded()
            })
            .unwrap_or(expected);
        control.measured.insert(key, measured);
        if measured > budget {
            self.evict(
                &mut control,
                name,
                version,
                Residence::TooLarge {
                    needed: measured,
                    budget,
                },
            )
            .await;
            return Err(self.too_large(name, version, measured, budget));
        }
        // The measured figure may exceed the expected one: settle the difference.
        self.make_room(&mut control, Some((name, version)), 0, budget)
            .await
            .map_err(|held| no_room(name, version, measured, held, budget))?;
        // Still resident: evictions happen only under `control`, which this load holds.
        Ok(self
            .snapshot()
            .resolve(name, &VersionSelector::Specific(version))
            .ok())
    }

    fn too_large(&self, name: &str, version: u64, needed: u64, budget: u64) -> ResidencyError {
        tracing::error!(
            model = name,
            version,
            needed,
            budget,
            "the model is larger than the whole memory budget; it is not loaded"
        );
        self.set_state(
            name,
            version,
            VersionState::NotResident(Residence::TooLarge { needed, budget }),
        );
        ResidencyError::TooLarge {
            model: name.to_owned(),
            version,
            needed,
            budget,
        }
    }

    /// Settles the budget after resident versions' charges grew: evicts the least recently
    /// used until the charges fit again.
    async fn settle_grown(&self) {
        let Some(budget) = self.budget else {
            return;
        };
        let mut control = self.control.lock().await;
        if let Err(pinned) = self.make_room(&mut control, None, 0, budget).await {
            tracing::warn!(
                pinned,
                budget,
                "pinned models hold more than the model memory budget since their runtimes \
                 grew; nothing else is left to evict"
            );
        }
    }

    /// Evicts least recently used versions (never pinned ones, never `keep`) until `needed`
    /// more bytes fit in the budget. When nothing is left to evict, the error is what the
    /// pinned versions hold.
    async fn make_room(
        &self,
        control: &mut Control,
        keep: Option<(&str, u64)>,
        needed: u64,
        budget: u64,
    ) -> Result<(), u64> {
        loop {
            let (total, victim) = {
                let snapshot = self.snapshot();
                let resident: Vec<&Arc<LoadedModel>> = snapshot
                    .models()
                    .flat_map(|record| record.versions.values())
                    .filter_map(|state| match state {
                        VersionState::Available(model) => Some(model),
                        _ => None,
                    })
                    .collect();
                let total: u64 = resident.iter().map(|m| m.memory_bytes()).sum();
                // In flight: someone besides the current snapshot holds the version.
                let victim = resident
                    .iter()
                    .filter(|m| !m.pinned)
                    .filter(|m| Some((&*m.name, m.version)) != keep)
                    .min_by_key(|m| {
                        (
                            Arc::strong_count(m) > 1,
                            m.last_used.load(Ordering::Relaxed),
                        )
                    })
                    .map(|m| (m.name.clone(), m.version));
                let pinned: u64 = resident
                    .iter()
                    .filter(|m| m.pinned)
                    .map(|m| m.memory_bytes())
                    .sum();
                (total, victim.ok_or(pinned))
            };
            if total.saturating_add(needed) <= budget {
                return Ok(());
            }
            match victim {
                Ok((victim, victim_version)) => {
                    self.evict(control, &victim, victim_version, Residence::Evicted)
                        .await;
                }
                Err(held) => return Err(held),
            }
        }
    }

    /// Takes a version out of memory: no new request reaches it; the ones it holds finish,
    /// its batcher drains, and its session is dropped and its memory handed back to the
    /// system before this returns.
    async fn evict(&self, control: &mut Control, name: &str, version: u64, residence: Residence) {
        let counted = residence == Residence::Evicted;
        self.set_state(name, version, VersionState::NotResident(residence));
        if counted {
            self.loader.metrics.record_eviction(name);
            tracing::info!(model = name, version, "evicted to make room");
        }
        if let Some(alive) = control.alive.remove(&(name.to_owned(), version)) {
            let _ = alive.await;
            // The session is gone: give its memory back, so that the process follows the
            // budget and the next load's measurement starts from what is really resident.
            let _ = tokio::task::spawn_blocking(super::trim::release_freed_memory).await;
        }
    }
}

/// Settles the budget each time resident versions report growth, while the repository lives
/// (the task holds it only while settling, so it does not keep it alive).
async fn settle_growth(repository: Weak<ModelRepository>, mut grown: mpsc::Receiver<()>) {
    while grown.recv().await.is_some() {
        let Some(repository) = repository.upgrade() else {
            return;
        };
        repository.settle_grown().await;
    }
}

fn no_room(name: &str, version: u64, needed: u64, held: u64, budget: u64) -> ResidencyError {
    ResidencyError::NoRoom {
        model: name.to_owned(),
        version,
        needed,
        held,
        budget,
    }
}

/// The version of `record` that is loading, if any.
fn loading_version(record: &ModelRecord) -> Option<u64> {
    record
        .versions
        .iter()
        .find(|(_, state)| matches!(state, VersionState::Loading))
        .map(|(v, _)| *v)
}
