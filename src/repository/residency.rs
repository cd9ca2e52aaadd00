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

//!
//! This file holds the request side's state (use order, loads in progress) and the refusals;
//! on_demand.rs holds the loads and evictions that use them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, watch};

use super::error::ResidencyError;
use super::snapshot::LoadedModel;

/// A load's outcome once it ends: the version it made resident (`None` when there was nothing
/// to load), held here until its waiting requests have it, so that the next load's search for
/// room counts it as in use rather than idle.
pub(super) type LoadOutcome = Option<Result<Option<Arc<LoadedModel>>, ResidencyError>>;

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
    pub(super) fn take_growth(&self) -> Option<mpsc::Receiver<()>> {
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

    pub(super) fn pending(
        &self,
    ) -> MutexGuard<'_, HashMap<(String, u64), watch::Receiver<LoadOutcome>>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::repository::Residence;

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
