//! Many models in bounded memory (`--model-memory-budget`): versions load on their first
//! request and the least recently used make room.
//!
//! - Discovery publishes a version as [`Residence::NotLoaded`]; only `[lifecycle] pinned`
//!   models load at start (and are never evicted).
//! - A request for a version that is not resident starts its load, or joins the one already
//!   running: one load per version, shared through a watch channel, whoever asked first. Each
//!   waiter gives up at its own deadline; the load goes on for the others.
//! - Loads run one at a time under the reconcile lock, so two loads never spend the same
//!   room. Before a load, versions are evicted, least recently used first, until the
//!   resident total plus the new version's expected size fits: idle versions first, then
//!   versions with requests in flight, which stop taking requests and drain before the load
//!   starts. The expected size is the version's last measured figure, else its files' size.
//! - A version whose files (or whose measured load) exceed the whole budget is not loaded
//!   again and its requests get RESOURCE_EXHAUSTED: evicting everything would not make it fit.
//! - A resident version's charge grows when its runtime comes to hold more than at load (see
//!   `charge`); the budget is then settled again at once, least recently used first, the
//!   grown version included (its next request loads it afresh, at its load's size).
//! - An eviction returns once the version's session is gone (its batcher and every run,
//!   abandoned ones too, have let go) and the freed memory has been handed back to the
//!   system: the next load, and its measurement, start from what is really resident.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use super::error::{too_large_message, ResidencyError};
use super::lifecycle::Control;
use super::{LoadedModel, ModelRecord, ModelRepository, VersionSelector, VersionState};
use crate::error::Error;

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

/// A load's outcome once it ends: the version it made resident (`None` when there was nothing
/// to load), held here until its waiting requests have it, so that the next load's search for
/// room counts it as in use rather than idle.
type LoadOutcome = Option<Result<Option<Arc<LoadedModel>>, ResidencyError>>;

/// The request side of residency: use order and the loads in progress.
#[derive(Default)]
pub(super) struct Residency {
    /// Advanced on every use; a version's `last_used` is the tick of its last request.
    ticks: AtomicU64,
    /// Loads in progress, by model and version: later requests wait on the same one.
    pending: Mutex<HashMap<(String, u64), watch::Receiver<LoadOutcome>>>,
    /// Models between dropping the old version and serving the new (`reload =
    /// "unload-first"`): their requests wait for the new version.
    pub(super) reloading: Mutex<HashSet<String>>,
    /// Resident versions whose charge grew: the budget is settled again.
    growth: Growth,
}

/// Word from resident versions that their charge grew, to the task that settles the budget.
struct Growth {
    /// Cloned into each version loaded under a budget. One pending message is enough: a
    /// settling sees every growth so far.
    sender: mpsc::Sender<()>,
    /// Taken by the settling task when it starts (with the first load on demand).
    receiver: Mutex<Option<mpsc::Receiver<()>>>,
}

impl Default for Growth {
    fn default() -> Self {
        let (sender, receiver) = mpsc::channel(1);
        Self {
            sender,
            receiver: Mutex::new(Some(receiver)),
        }
    }
}

impl Residency {
    /// Where a version loaded under `budget` reports that its charge grew; none without one.
    pub(super) fn growth_sender(&self, budget: Option<u64>) -> Option<mpsc::Sender<()>> {
        budget.map(|_| self.growth.sender.clone())
    }

    /// The growth messages, for the one task that settles them; `None` once it has started.
    fn take_growth(&self) -> Option<mpsc::Receiver<()>> {
        self.growth
            .receiver
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    pub(super) fn touch(&self, model: &LoadedModel) {
        let tick = self.ticks.fetch_add(1, Ordering::Relaxed);
        model.last_used.store(tick, Ordering::Relaxed);
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<(String, u64), watch::Receiver<LoadOutcome>>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn reloading(&self) -> MutexGuard<'_, HashSet<String>> {
        self.reloading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

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
    ) -> Result<Arc<LoadedModel>, Error> {
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
                        .map_err(|_| Error::DeadlineExceeded {
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

    fn find(&self, name: &str, selector: &VersionSelector) -> Result<Found, Error> {
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
        let expected = control
            .measured
            .get(&key)
            .copied()
            .unwrap_or_else(|| super::files_size(&folder.path));
        if expected > budget {
            return Err(self.too_large(name, version, expected, budget));
        }
        self.make_room(&mut control, Some((name, version)), expected, budget)
            .await
            .map_err(|held| no_room(name, version, expected, held, budget))?;
        self.loader.metrics.record_load_on_demand(name);
        let Ok(alive) = self.load(name, &folder, &config).await else {
            control
                .failures
                .insert(key, super::lifecycle::fingerprint(&folder.path));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_map_to_overload_and_unavailable_with_their_reason() {
        let model = || "m".to_owned();
        let cases = [
            (
                ResidencyError::TooLarge {
                    model: model(),
                    version: 1,
                    needed: 300,
                    budget: 200,
                },
                429,
                "needs 300 bytes, more than the whole model memory budget of 200 bytes",
            ),
            (
                ResidencyError::NoRoom {
                    model: model(),
                    version: 1,
                    needed: 100,
                    held: 150,
                    budget: 200,
                },
                429,
                "pinned models hold 150 bytes",
            ),
            (
                ResidencyError::LoadFailed {
                    model: model(),
                    version: 1,
                    reason: "bad file".into(),
                },
                503,
                "failed to load: bad file",
            ),
        ];
        for (err, http, needle) in cases {
            let message = err.to_string();
            let row = Error::from(err).kind().table();
            assert_eq!(row.http_status, http, "{message}");
            assert!(message.contains(needle), "{message}");
        }
        assert_eq!(Residence::Evicted.reason(), "evicted");
        assert!(Residence::TooLarge {
            needed: 2,
            budget: 1
        }
        .reason()
        .contains("--model-memory-budget"));
    }
}
