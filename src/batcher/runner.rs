//! What runs a batch, shared by the actor (which runs on blocking threads) and the request
//! side (which runs fast models inline): the backend, the instances, and where each run is
//! reported.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::execute::{execute, Outcome, Run};
use super::flush::Flush;
use super::instances::{Instances, RunPlace};
use super::telemetry::Telemetry;
use crate::backend::{Backend, NamedTensor};
use crate::metrics::{ModelMetrics, SecondsCounter};

/// How a version's runs are spread: over how many instances, which may skip the queue, and
/// when its queue stops waiting for company.
#[derive(Debug, Clone)]
pub struct Execution {
    /// How many batches may run at once (at least one).
    pub instances: usize,
    /// A request that finds the queue empty and an instance free runs on the caller's
    /// thread, without the actor, when the version's runs are expected to take at most this
    /// long (see `instances::RunEstimate` for how that is measured). Zero turns this off.
    pub inline_max: Duration,
    /// The server's drain: once started, queued requests run without waiting out the delay.
    pub flush: Flush,
}

impl Default for Execution {
    /// One instance, every request through the queue.
    fn default() -> Self {
        Self {
            instances: 1,
            inline_max: Duration::ZERO,
            flush: Flush::default(),
        }
    }
}

/// One model version's backend and the places its runs are counted.
pub(super) struct Runner {
    backend: Arc<dyn Backend>,
    pub(super) telemetry: Telemetry,
    pub(super) histograms: ModelMetrics,
    /// Each instance's busy-time counter, by index.
    busy: Vec<SecondsCounter>,
    pub(super) instances: Instances,
    pub(super) inline_max: Duration,
}

impl Runner {
    pub(super) fn new(
        model: &str,
        backend: Arc<dyn Backend>,
        execution: Execution,
        telemetry: Telemetry,
    ) -> Self {
        let count = execution.instances.max(1);
        let histograms = telemetry.metrics.model(model, telemetry.version);
        let busy = (0..count)
            .map(|instance| {
                telemetry
                    .metrics
                    .instance_busy(model, telemetry.version, instance)
            })
            .collect();
        Self {
            backend,
            telemetry,
            histograms,
            busy,
            instances: Instances::new(count),
            inline_max: execution.inline_max,
        }
    }

    /// The backend's signatures, which a split request's pieces are checked against.
    pub(super) fn signatures(&self) -> &[crate::backend::Signature] {
        self.backend.signatures()
    }

    /// How many batches may run at once.
    pub(super) fn instance_count(&self) -> usize {
        self.busy.len()
    }

    /// Records how long a request waited before its batch was cut.
    pub(super) fn record_queue_wait(&self, waited: Duration) {
        self.telemetry.stats.queue.record(waited);
        self.histograms.observe_queue_wait(waited);
    }

    /// Runs one batch on the current thread as instance `instance` (which the caller has
    /// taken), and records its busy time, its execution and its duration in the run-time
    /// estimate, as run at `place`. The caller gives the instance back.
    pub(super) fn run(
        &self,
        instance: usize,
        place: RunPlace,
        run: Run<'_>,
        requests: Vec<Vec<NamedTensor>>,
    ) -> Outcome {
        let inferences = run.inferences;
        let started = Instant::now();
        let mut clock = started;
        let outcome = execute(
            self.backend.as_ref(),
            run,
            requests,
            &self.telemetry,
            &mut clock,
        );
        let took = match outcome {
            Ok(_) => clock.saturating_duration_since(started),
            Err(_) => started.elapsed(),
        };
        self.telemetry.stats.record_busy(instance, took);
        if let Some(busy) = self.busy.get(instance) {
            busy.inc_by(took.as_secs_f64());
        }
        if outcome.is_ok() {
            self.telemetry.stats.record_execution(inferences);
            self.histograms.observe_execution(took, inferences);
        }
        self.instances.record(took, inferences, place);
        outcome
    }
}
