//! Taking versions out of service: a retired version leaves the snapshot first, the requests
//! that hold it finish, then it is END; `reload = "unload-first"` waits for that before its
//! successor loads.

use tokio::sync::oneshot;

use super::control::Control;
use super::lifecycle::ModelRepository;
use super::snapshot::VersionState;
use crate::metrics::ModelEvent;

impl ModelRepository {
    /// `reload = "unload-first"`: drains and drops the versions that the new ones replace
    /// before those load. Requests meanwhile wait for the new version (see `residency`).
    pub(super) async fn unload_before_reload(
        &self,
        control: &mut Control,
        model: &str,
        aspired: &[u64],
    ) {
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

    /// Takes a version out of service. Requests that hold it finish; it is UNLOADING until
    /// the last of them lets go, then END.
    pub(super) fn retire(&self, control: &mut Control, model: &str, version: u64) {
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

    pub(super) fn retire_all(&self, control: &mut Control, model: &str) {
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
    pub(super) fn sweep_retired(&self, control: &mut Control) {
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
