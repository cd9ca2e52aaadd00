//! Metrics of model versions' lives: loads, unloads, failed loads, and which versions serve.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::labels::{ModelEvent, ModelLabels, VersionLabels};

/// The lifecycle families; [`super::Metrics`] holds one and forwards its public methods here.
pub(super) struct ModelLifecycle {
    loads: Family<ModelLabels, Counter>,
    unloads: Family<ModelLabels, Counter>,
    load_failures: Family<ModelLabels, Counter>,
    ready: Family<VersionLabels, Gauge>,
}

impl ModelLifecycle {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let lifecycle = Self {
            loads: Family::default(),
            unloads: Family::default(),
            load_failures: Family::default(),
            ready: Family::default(),
        };
        registry.register(
            "model_loads",
            "Model versions loaded",
            lifecycle.loads.clone(),
        );
        registry.register(
            "model_unloads",
            "Model versions unloaded",
            lifecycle.unloads.clone(),
        );
        registry.register(
            "model_load_failures",
            "Model versions that failed to load or to warm up",
            lifecycle.load_failures.clone(),
        );
        registry.register(
            "model_ready",
            "1 while a model version serves, 0 while it loads, failed, or was unloaded",
            lifecycle.ready.clone(),
        );
        lifecycle
    }

    /// Creates a model's counters at zero.
    pub(super) fn register_model(&self, name: &str) {
        let labels = ModelLabels {
            model: name.to_owned(),
        };
        for family in [&self.loads, &self.unloads, &self.load_failures] {
            drop(family.get_or_create(&labels));
        }
    }

    pub(super) fn set_model_ready<'a>(
        &self,
        versions: impl IntoIterator<Item = (&'a str, u64, bool)>,
    ) {
        self.ready.clear();
        for (model, version, serving) in versions {
            self.ready
                .get_or_create(&VersionLabels {
                    model: model.to_owned(),
                    version: version.to_string(),
                })
                .set(i64::from(serving));
        }
    }

    pub(super) fn record_model_event(&self, name: &str, event: ModelEvent) {
        let family = match event {
            ModelEvent::Loaded => &self.loads,
            ModelEvent::Unloaded => &self.unloads,
            ModelEvent::LoadFailed => &self.load_failures,
        };
        family
            .get_or_create(&ModelLabels {
                model: name.to_owned(),
            })
            .inc();
    }
}
