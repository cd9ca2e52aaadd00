//! Starting a batcher: the handle side builds the runner, the channel and the queue count,
//! spawns the actor (task.rs) and hands back the [`BatcherHandle`] requests go through. It
//! stands above both, so that the actor never builds its own handle and the imports run one
//! way: start -> handle, task -> runner -> execute -> the leaves.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::handle::BatcherHandle;
use super::policy::BatchPolicy;
use super::runner::{Execution, Runner};
use super::settings::BatchSettings;
use super::task::Batcher;
use super::telemetry::Telemetry;
use crate::backend::Backend;

impl Batcher {
    /// Starts the actor for `model` with one instance and every request through the queue,
    /// on the current Tokio runtime (it must be called from within one), and returns the
    /// handle requests go through.
    pub fn spawn(
        model: impl Into<String>,
        backend: Arc<dyn Backend>,
        settings: &BatchSettings,
        telemetry: Telemetry,
    ) -> BatcherHandle {
        Self::spawn_with(model, backend, settings, Execution::default(), telemetry)
    }

    /// Like [`Batcher::spawn`], running up to `instances` batches at once (at least one). The
    /// backend must be able to run that many at once to gain from it; see
    /// `repository::Loader` for how the runtimes do.
    pub fn spawn_instances(
        model: impl Into<String>,
        backend: Arc<dyn Backend>,
        settings: &BatchSettings,
        instances: usize,
        telemetry: Telemetry,
    ) -> BatcherHandle {
        let execution = Execution {
            instances,
            ..Execution::default()
        };
        Self::spawn_with(model, backend, settings, execution, telemetry)
    }

    /// Like [`Batcher::spawn`], with instances, inline runs and the drain as `execution`
    /// says.
    pub fn spawn_with(
        model: impl Into<String>,
        backend: Arc<dyn Backend>,
        settings: &BatchSettings,
        execution: Execution,
        telemetry: Telemetry,
    ) -> BatcherHandle {
        let model = model.into();
        let policy = BatchPolicy::new(settings);
        // Admission is counted in `depth`, which never exceeds `capacity`, and a
        // message in the channel is always counted: so the channel cannot fill up, and its
        // bound only backs the count up.
        let (sender, receiver) = mpsc::channel(policy.capacity());
        let depth = Arc::new(AtomicUsize::new(0));
        let flush = execution.flush.subscribe();
        let runner = Arc::new(Runner::new(&model, backend, execution, telemetry));
        let batcher = Batcher::new(
            model.clone(),
            runner.clone(),
            receiver,
            flush,
            policy.clone(),
            depth.clone(),
        );
        let actor = tokio::spawn(batcher.run());
        BatcherHandle::new(model, policy, sender, depth, runner, actor)
    }
}
