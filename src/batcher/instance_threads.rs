//! Long runs on one long-lived thread per instance.
//!
//! Batches run on tokio's shared blocking pool, on whichever thread wakes first, and the
//! kernel often wakes it on the CPU where another run is already going: with two instances of
//! a compute-bound model on two cores, both runs shared one CPU about a quarter of the time.
//! A thread that only ever runs one instance's batches is woken where it last ran when that
//! CPU is free, so concurrent runs keep to separate cores (docs/BENCHMARKS.md, "Instances on
//! threads of their own").
//!
//! Only runs expected to take at least [`LONG_RUN`], on a process that may use more than one
//! CPU, go there. The batch still goes to the blocking pool, whose thread passes it on and
//! waits, so tokio counts the run as blocking work as before (a paused test clock does not
//! move while it runs, and the runtime's shutdown waits for it); that extra hand-off costs
//! tens of microseconds, which a run of a millisecond or more hides and a shorter one does
//! not (measured: 34 to 87 us more per request for runs of 0.1 to 0.3 ms on one core).

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread::Result as Caught;
use std::time::Duration;

/// Runs expected to take at least this long go to their instance's thread.
pub(super) const LONG_RUN: Duration = Duration::from_millis(1);

type Job = Box<dyn FnOnce() + Send>;

/// The run threads of one model version's batcher, started as instances are first given a
/// long run and ended when the batcher (and every batch it started) is gone.
pub(super) struct InstanceThreads {
    threads: Vec<Option<mpsc::Sender<Job>>>,
    /// Whether the process may use more than one CPU: on one, there is nowhere to spread to.
    spread: bool,
}

impl Default for InstanceThreads {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Self::with_cpus(cpus)
    }
}

impl InstanceThreads {
    fn with_cpus(cpus: usize) -> Self {
        Self {
            threads: Vec::new(),
            spread: cpus > 1,
        }
    }

    /// Where a batch of `instance` runs: its thread when `long` (the run is expected to take
    /// at least [`LONG_RUN`]) and there are CPUs to spread over, else the pool thread itself.
    pub(super) fn runner(&mut self, instance: usize, long: bool) -> RunOn {
        if !(long && self.spread) {
            return RunOn { thread: None };
        }
        if self.threads.len() <= instance {
            self.threads.resize_with(instance + 1, || None);
        }
        let thread = self.threads.get_mut(instance).and_then(|slot| {
            if slot.is_none() {
                *slot = start(instance);
            }
            slot.clone()
        });
        RunOn { thread }
    }
}

/// A thread that runs jobs in the order sent until every sender is gone, inside the runtime
/// that started it (as blocking-pool threads are), or `None` if the system will not start one.
fn start(instance: usize) -> Option<mpsc::Sender<Job>> {
    let (sender, jobs) = mpsc::channel::<Job>();
    let runtime = tokio::runtime::Handle::try_current().ok();
    let started = std::thread::Builder::new()
        .name(format!("tensorport-run-{instance}"))
        .spawn(move || {
            let _inside = runtime.as_ref().map(tokio::runtime::Handle::enter);
            for job in jobs {
                job();
            }
        });
    match started {
        Ok(_) => Some(sender),
        Err(err) => {
            tracing::warn!(
                instance,
                "cannot start a run thread ({err}); running on the pool"
            );
            None
        }
    }
}

/// Where one batch runs.
pub(super) struct RunOn {
    thread: Option<mpsc::Sender<Job>>,
}

impl RunOn {
    /// Whether the work goes to the instance's own thread.
    pub(super) fn on_thread(&self) -> bool {
        self.thread.is_some()
    }

    /// Runs `work` on the instance's thread and waits for it, or runs it here when there is
    /// no such thread. A panic in `work` resumes here, where the batcher catches it as it
    /// would one from the blocking pool.
    pub(super) fn run<T: Send + 'static>(self, work: impl FnOnce() -> T + Send + 'static) -> T {
        let Some(thread) = self.thread else {
            return work();
        };
        let (done, outcome) = mpsc::sync_channel::<Caught<T>>(1);
        let job: Job = Box::new(move || {
            // The receiver only goes away if this thread's caller did, and then no one waits.
            let _ = done.send(catch_unwind(AssertUnwindSafe(work)));
        });
        if let Err(mpsc::SendError(job)) = thread.send(job) {
            // The thread is gone (it only ends once no sender is left): run here instead.
            job();
        }
        match outcome.recv() {
            Ok(Ok(value)) => value,
            Ok(Err(panic)) => resume_unwind(panic),
            // The job was dropped without running, which only a thread that died could do.
            Err(mpsc::RecvError) => resume_unwind(Box::new("the instance's run thread ended")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or_default().to_owned()
    }

    #[test]
    fn each_instance_runs_on_its_own_thread_every_time() {
        let mut threads = InstanceThreads::with_cpus(2);
        let first = threads.runner(0, true).run(thread_name);
        let second = threads.runner(1, true).run(thread_name);
        assert_eq!(first, "tensorport-run-0");
        assert_eq!(second, "tensorport-run-1");
        let ids: Vec<_> = (0..3)
            .map(|_| threads.runner(1, true).run(|| std::thread::current().id()))
            .collect();
        assert!(ids.windows(2).all(|pair| pair[0] == pair[1]));
        assert_ne!(ids[0], std::thread::current().id());
    }

    #[test]
    fn short_runs_and_single_cpu_processes_run_where_they_are() {
        let here = std::thread::current().id();
        let mut threads = InstanceThreads::with_cpus(2);
        assert_eq!(
            threads.runner(0, false).run(|| std::thread::current().id()),
            here
        );
        let mut one_cpu = InstanceThreads::with_cpus(1);
        assert_eq!(
            one_cpu.runner(0, true).run(|| std::thread::current().id()),
            here
        );
        assert!(one_cpu.threads.is_empty());
    }

    #[test]
    fn a_panic_in_a_run_reaches_the_caller_and_the_thread_lives_on() {
        let mut threads = InstanceThreads::with_cpus(2);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            threads
                .runner(0, true)
                .run(|| -> u32 { std::panic::panic_any("model failed") })
        }));
        let payload = caught.err().and_then(|p| p.downcast::<&str>().ok());
        assert_eq!(payload.as_deref(), Some(&"model failed"));
        assert_eq!(threads.runner(0, true).run(thread_name), "tensorport-run-0");
    }

    #[test]
    fn the_threads_end_with_their_batcher() {
        /// Tells when the thread that holds it ends (thread-locals drop at thread exit).
        struct OnExit(mpsc::Sender<()>);
        impl Drop for OnExit {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        thread_local!(static EXIT: std::cell::RefCell<Option<OnExit>> = const {
            std::cell::RefCell::new(None)
        });
        let mut threads = InstanceThreads::with_cpus(2);
        let (tell, told) = mpsc::channel();
        threads
            .runner(0, true)
            .run(move || EXIT.with(|exit| *exit.borrow_mut() = Some(OnExit(tell))));
        assert_eq!(told.try_recv(), Err(mpsc::TryRecvError::Empty));
        drop(threads);
        assert_eq!(told.recv(), Ok(()));
    }

    #[tokio::test]
    async fn runs_see_the_runtime_that_started_their_thread() {
        let mut threads = InstanceThreads::with_cpus(2);
        let runner = threads.runner(0, true);
        let inside = tokio::task::spawn_blocking(move || {
            runner.run(|| tokio::runtime::Handle::try_current().is_ok())
        })
        .await;
        assert!(matches!(inside, Ok(true)));
    }
}
