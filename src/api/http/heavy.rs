//! Decoding and encoding large JSON bodies without stalling the runtime worker they arrive on.
//!
//! A 1 MiB float32 tensor is about 5 MB of JSON text and takes milliseconds to read or write.
//! Done in place, that holds a runtime worker, and every connection and request queued on it,
//! for as long. Past [`HEAVY_BYTES`] the work runs under `block_in_place`, which hands the
//! worker's queue and the I/O it drives to another thread for the duration, so the requests
//! behind it go on. Unlike `spawn_blocking` it needs no owned copy of the body: the work may
//! borrow it. Below the threshold the hand-off would cost more than the work.

use tokio::runtime::{Handle, RuntimeFlavor};

/// JSON text (or tensor bytes to be written as JSON) past which the work leaves the worker:
/// about 0.2 ms of decoding at the scanner's speed, several times the hand-off's cost.
pub const HEAVY_BYTES: usize = 256 << 10;

/// About how much JSON text `elements` numbers become, for deciding whether writing them is
/// heavy: a float prints as 10 to 20 characters, a small integer as 2.
pub fn json_text_estimate(elements: usize) -> usize {
    elements.saturating_mul(8)
}

/// Runs `work`, which reads or writes about `bytes` bytes, letting the runtime worker's other
/// tasks move to another thread meanwhile when `bytes` is large.
///
/// Only where the runtime has two or more workers: with one (a server given one core) the
/// thread that takes the worker's place competes with `work` for that core, and a 1 MiB JSON
/// request measured 20% slower (150 against 120 req/s, server pinned to one core) for no
/// gain. On a current-thread runtime, or outside any, `work` simply runs.
pub fn run_heavy<T>(bytes: usize, work: impl FnOnce() -> T) -> T {
    let spare_worker = Handle::try_current().is_ok_and(|runtime| {
        runtime.runtime_flavor() == RuntimeFlavor::MultiThread
            && runtime.metrics().num_workers() > 1
    });
    if bytes >= HEAVY_BYTES && spare_worker {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    fn runtime(workers: usize) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// On a runtime of `workers` workers with every worker but one held by a task that blocks
    /// its thread, runs `run_heavy(bytes, ...)` on the free one, where the work looks for a
    /// message from a task it spawned just before. That task can run only if the work's
    /// worker was handed to another thread. The work waits up to `patience` for it.
    fn message_seen_by_work(
        workers: usize,
        bytes: usize,
        patience: Duration,
    ) -> Result<&'static str, mpsc::RecvTimeoutError> {
        let runtime = runtime(workers);
        let (release, released) = mpsc::channel::<()>();
        let released = std::sync::Arc::new(std::sync::Mutex::new(released));
        let (started, all_started) = mpsc::channel();
        for _ in 1..workers {
            let (started, released) = (started.clone(), released.clone());
            runtime.spawn(async move {
                let _ = started.send(());
                let _ = released.lock().map(|r| r.recv());
            });
        }
        for _ in 1..workers {
            all_started.recv().expect("a holder started");
        }
        let seen = runtime.block_on(async move {
            tokio::spawn(async move {
                let (sender, receiver) = mpsc::channel();
                tokio::spawn(async move { sender.send("from the other task") });
                run_heavy(bytes, move || receiver.recv_timeout(patience))
            })
            .await
            .expect("task")
        });
        for _ in 1..workers {
            let _ = release.send(());
        }
        seen
    }

    /// A large body is worked on while the worker's other tasks move to another thread.
    #[test]
    fn other_tasks_run_while_heavy_work_holds_the_worker() {
        let seen = message_seen_by_work(2, HEAVY_BYTES, Duration::from_secs(30));
        assert_eq!(seen, Ok("from the other task"));
    }

    /// Below the threshold the work runs in place: the other task waits for it to return.
    #[test]
    fn small_work_runs_in_place() {
        let seen = message_seen_by_work(2, HEAVY_BYTES - 1, Duration::ZERO);
        assert_eq!(seen, Err(mpsc::RecvTimeoutError::Timeout));
    }

    /// With one worker there is no core to hand over to: even large work runs in place.
    #[test]
    fn one_worker_runs_heavy_work_in_place() {
        let seen = message_seen_by_work(1, HEAVY_BYTES, Duration::ZERO);
        assert_eq!(seen, Err(mpsc::RecvTimeoutError::Timeout));
    }

    #[test]
    fn runs_on_a_current_thread_runtime_and_outside_any() {
        assert_eq!(run_heavy(HEAVY_BYTES, || 7), 7);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        assert_eq!(runtime.block_on(async { run_heavy(HEAVY_BYTES, || 8) }), 8);
    }
}
