//! What a resident version is charged against `--model-memory-budget`, and how the charge
//! follows what the version holds once it serves.
//!
//! A version's load is measured once (see `budget`), after its warmup. What its runtime holds
//! can grow after that: ONNX Runtime's arena keeps the largest working memory any run has
//! needed, so a version that warmed up on one row and then serves batches of thousands holds
//! far more than its load showed. The backend reports what its allocators hold
//! ([`Backend::held_bytes`]); the charge is the load's figure plus the growth since, and a
//! growth asks the repository to settle the budget again (evicting the least recently used
//! versions) right away rather than at the next load.
//!
//! The backend the repository hands to a version's batcher and requests is a [`Charged`]
//! wrapper, which also carries the version's `alive` sender: it is dropped only after the
//! runtime's session, once the batcher and every run (an abandoned one included) have let go,
//! so that an eviction that waits for it returns when the version's memory is really free.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::backend::{Backend, BackendError, NamedTensor, OutputTarget, Signature};

/// The memory one resident version is charged.
#[derive(Debug)]
pub struct MemoryCharge {
    /// Measured across its load and warmup.
    loaded: u64,
    /// What the runtime reported holding at the end of the load, where it reports anything:
    /// growth is counted from here, since the load's figure already includes it.
    held_at_load: Option<u64>,
    /// The most the runtime has reported holding (an arena does not shrink while its
    /// session lives).
    held: AtomicU64,
}

impl MemoryCharge {
    pub fn new(loaded: u64, held_at_load: Option<u64>) -> Self {
        Self {
            loaded,
            held_at_load,
            held: AtomicU64::new(held_at_load.unwrap_or(0)),
        }
    }

    /// What the version is charged now: its load, plus what its runtime grew by since.
    pub fn bytes(&self) -> u64 {
        self.loaded.saturating_add(self.growth())
    }

    /// What its load measured: what a fresh load of it is expected to take.
    pub fn loaded(&self) -> u64 {
        self.loaded
    }

    /// What the runtime holds beyond what it held at the end of the load.
    pub fn growth(&self) -> u64 {
        match self.held_at_load {
            Some(at_load) => self.held.load(Ordering::Relaxed).saturating_sub(at_load),
            None => 0,
        }
    }

    /// Records what the runtime reports holding now; true when that is more than before.
    fn observe(&self, held: u64) -> bool {
        self.held_at_load.is_some() && self.held.fetch_max(held, Ordering::Relaxed) < held
    }
}

/// A resident version's backend, as its batcher and its requests see it.
pub(super) struct Charged {
    /// Declared first, so dropped before `_alive`: the session is gone when the lifecycle
    /// learns that the version is.
    inner: Arc<dyn Backend>,
    charge: Arc<MemoryCharge>,
    /// Under a budget: told (without waiting; one pending message is enough) when the
    /// version's charge grew.
    grown: Option<mpsc::Sender<()>>,
    _alive: oneshot::Sender<()>,
}

impl Charged {
    pub(super) fn new(
        inner: Arc<dyn Backend>,
        charge: Arc<MemoryCharge>,
        grown: Option<mpsc::Sender<()>>,
        alive: oneshot::Sender<()>,
    ) -> Self {
        Self {
            inner,
            charge,
            grown,
            _alive: alive,
        }
    }

    fn after_run(&self) {
        let Some(held) = self.inner.held_bytes() else {
            return;
        };
        if self.charge.observe(held) {
            if let Some(grown) = &self.grown {
                // Full: a settling is already due, and it will see this growth too.
                let _ = grown.try_send(());
            }
        }
    }
}

impl Backend for Charged {
    fn platform(&self) -> &'static str {
        self.inner.platform()
    }

    fn signatures(&self) -> &[Signature] {
        self.inner.signatures()
    }

    fn signature_method(&self, signature: &str) -> Option<&str> {
        self.inner.signature_method(signature)
    }

    fn held_bytes(&self) -> Option<u64> {
        self.inner.held_bytes()
    }

    fn max_batch_size(&self) -> Option<usize> {
        self.inner.max_batch_size()
    }

    fn labels(&self, output: &str) -> Option<Arc<[String]>> {
        self.inner.labels(output)
    }

    fn run(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        let result = self.inner.run(signature, inputs, outputs);
        self.after_run();
        result
    }

    fn run_into(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
        targets: &[OutputTarget],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        let result = self.inner.run_into(signature, inputs, outputs, targets);
        self.after_run();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A backend whose arena is whatever the test says, and that says when it is dropped.
    struct Arena {
        held: AtomicU64,
        dropped: Arc<AtomicBool>,
    }

    impl Drop for Arena {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::SeqCst);
        }
    }

    impl Backend for Arena {
        fn platform(&self) -> &'static str {
            "test"
        }

        fn signatures(&self) -> &[Signature] {
            &[]
        }

        fn held_bytes(&self) -> Option<u64> {
            Some(self.held.load(Ordering::SeqCst))
        }

        fn run(
            &self,
            _signature: &Signature,
            _inputs: Vec<NamedTensor>,
            _outputs: &[String],
        ) -> Result<Vec<NamedTensor>, BackendError> {
            Ok(Vec::new())
        }
    }

    fn signature() -> Signature {
        Signature {
            name: String::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    #[test]
    fn the_charge_follows_the_runtime_s_growth_and_asks_once_to_settle() {
        let dropped = Arc::new(AtomicBool::new(false));
        let arena = Arc::new(Arena {
            held: AtomicU64::new(1000),
            dropped: dropped.clone(),
        });
        let charge = Arc::new(MemoryCharge::new(5000, Some(1000)));
        let (grown, mut told) = mpsc::channel(1);
        let (alive, mut gone) = oneshot::channel();
        let charged = Charged::new(arena.clone(), charge.clone(), Some(grown), alive);

        let _ = charged.run(&signature(), Vec::new(), &[]);
        assert_eq!(charge.bytes(), 5000);
        assert!(told.try_recv().is_err(), "nothing grew");

        arena.held.store(3000, Ordering::SeqCst);
        let _ = charged.run(&signature(), Vec::new(), &[]);
        arena.held.store(9000, Ordering::SeqCst);
        let _ = charged.run(&signature(), Vec::new(), &[]);
        assert_eq!(charge.bytes(), 13_000);
        assert_eq!(charge.loaded(), 5000);
        assert!(told.try_recv().is_ok());
        assert!(told.try_recv().is_err(), "one pending settling covers both");

        // The lifecycle hears of the version only once its session is gone: while anything
        // (a batcher, an abandoned run) still holds the backend, `alive` stays open.
        let held_elsewhere: Arc<dyn Backend> = Arc::new(charged);
        let batcher = held_elsewhere.clone();
        drop(arena);
        drop(held_elsewhere);
        assert!(gone.try_recv().is_err());
        assert!(!dropped.load(Ordering::SeqCst));
        drop(batcher);
        assert!(dropped.load(Ordering::SeqCst));
        assert!(gone
            .try_recv()
            .is_err_and(|err| err == oneshot::error::TryRecvError::Closed));
    }

    #[test]
    fn a_runtime_that_reports_nothing_is_charged_its_load() {
        let charge = MemoryCharge::new(700, None);
        assert!(!charge.observe(10_000));
        assert_eq!(charge.bytes(), 700);
    }
}
