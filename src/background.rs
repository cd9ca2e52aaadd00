//! The long-lived tasks the server depends on, watched.
//!
//! The repository's load and its watch of the model directory run beside the request path;
//! if one dies (a panic in a dependency, a bug), new versions stop loading and reloads stop
//! answering while every probe still says ready. A task spawned here that panics, or that
//! ends although it should run until the server stops, turns readiness off for good and
//! leaves its reason where the readiness endpoints report it, and in the log.

use std::any::Any;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;

/// Whether a task is expected to run for the server's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// It finishes on its own when its work is done.
    Finite,
    /// It runs until it is aborted; returning early is a failure.
    UntilStopped,
}

/// The watched tasks' first failure. Shared by whoever spawns tasks (`main`) and the server's
/// health, which reads it.
#[derive(Debug, Default)]
pub struct Background {
    /// The first failure's description; later ones are logged only.
    failure: Mutex<Option<String>>,
}

impl Background {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Runs `task` on the runtime and watches it. Aborting the returned handle (the server
    /// stopping) is not a failure.
    pub fn spawn(
        self: &Arc<Self>,
        name: &'static str,
        lifetime: Lifetime,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> AbortHandle {
        let handle = tokio::spawn(task);
        let abort = handle.abort_handle();
        let watch = self.clone();
        tokio::spawn(async move {
            let reason = match handle.await {
                Ok(()) if lifetime == Lifetime::Finite => return,
                Ok(()) => "it ended while the server still needs it".to_owned(),
                Err(err) if err.is_cancelled() => return,
                Err(err) => match err.try_into_panic() {
                    Ok(payload) => format!("it panicked: {}", panic_message(payload.as_ref())),
                    Err(err) => format!("it failed: {err}"),
                },
            };
            watch.record(format!("the {name} task stopped: {reason}"));
        });
        abort
    }

    /// Records a failure: the server is unready from now on.
    pub fn record(&self, failure: String) {
        tracing::error!(%failure, "a background task the server needs has stopped; not ready");
        let mut first = self
            .failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        first.get_or_insert(failure);
    }

    /// Why the server cannot be ready, if a watched task failed.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_panics_or_ends_early_is_a_failure_and_an_abort_is_not() {
        let background = Background::new();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let aborted = background.spawn("watch", Lifetime::UntilStopped, async move {
            let _keep = done_tx;
            std::future::pending::<()>().await;
        });
        aborted.abort();
        // The sender drops when the aborted task is dropped.
        let _ = done_rx.await;
        tokio::task::yield_now().await;
        assert_eq!(background.failure(), None);

        let finite = background.spawn("load", Lifetime::Finite, async {});
        while !finite.is_finished() {
            tokio::task::yield_now().await;
        }
        tokio::task::yield_now().await;
        assert_eq!(background.failure(), None);

        background.spawn("repository watch", Lifetime::UntilStopped, async {
            #[allow(clippy::panic)]
            {
                panic!("boom");
            }
        });
        let failure = loop {
            if let Some(failure) = background.failure() {
                break failure;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(
            failure,
            "the repository watch task stopped: it panicked: boom"
        );
    }
}
