//! A gate in front of a real model's runs, so a test decides when they proceed.
//!
//! Tests that need requests to stay in flight or queued must not depend on a model being slow
//! enough: on a loaded machine a "slow" run finishes before the test looks. The gate wraps the
//! backend the repository loaded (the real ONNX Runtime session still runs every request) and,
//! once closed, holds each run until the test releases it. It also records the order in which
//! runs reached the backend, tagged with the first value of their `x` input, so tests assert
//! on order instead of on arrival times.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tensorport::backend::{Backend, BackendError, NamedTensor, OutputTarget, Signature};
use tensorport::repository::BackendDecorator;

/// How long a test waits for an event before it fails. Generous: a busy CI machine can be
/// slow to schedule a thread, and nothing here depends on the wait being short.
const EVENT_WAIT: Duration = Duration::from_secs(60);

#[derive(Default)]
struct State {
    closed: bool,
    /// Runs that may pass a closed gate.
    permits: usize,
    /// Tags of runs that may pass a closed gate, one run each.
    tagged: Vec<f32>,
    /// Runs that reached the backend, in order, by the first value of their `x` input.
    arrivals: Vec<f32>,
    /// Runs waiting at the gate now.
    waiting: usize,
}

/// Holds the runs of the models it decorates while closed.
#[derive(Default)]
pub struct Gate {
    state: Mutex<State>,
    changed: Condvar,
}

impl Gate {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A decorator that puts this gate in front of `model`'s backend (other models pass).
    pub fn decorator(self: &Arc<Self>, model: &'static str) -> BackendDecorator {
        let gate = self.clone();
        Arc::new(move |name: &str, inner: Arc<dyn Backend>| {
            if name == model {
                Arc::new(Gated {
                    gate: gate.clone(),
                    inner,
                }) as Arc<dyn Backend>
            } else {
                inner
            }
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on every run waits for a permit (warmup ran while the gate was open).
    pub fn close(&self) {
        self.lock().closed = true;
    }

    /// Lets `count` more runs through a closed gate.
    pub fn release(&self, count: usize) {
        self.lock().permits += count;
        self.changed.notify_all();
    }

    /// Lets the next run tagged `tag` through a closed gate; runs of other tags keep waiting.
    pub fn release_tag(&self, tag: f32) {
        self.lock().tagged.push(tag);
        self.changed.notify_all();
    }

    /// Lets every run through, now and later.
    pub fn open(&self) {
        self.lock().closed = false;
        self.changed.notify_all();
    }

    /// The `x` tags of the runs that reached the backend since the gate was closed or
    /// released, in order.
    pub fn arrivals(&self) -> Vec<f32> {
        self.lock().arrivals.clone()
    }

    /// Waits (without blocking the async runtime) until `count` runs wait at the gate.
    pub async fn wait_for_waiting(&self, count: usize) {
        self.wait_until(
            |state| state.waiting >= count,
            || format!("{count} runs waiting at the gate"),
        )
        .await;
    }

    /// Waits until `count` runs have been recorded as arriving.
    pub async fn wait_for_arrivals(&self, count: usize) {
        self.wait_until(
            |state| state.arrivals.len() >= count,
            || format!("{count} runs arriving at the gate"),
        )
        .await;
    }

    async fn wait_until(&self, done: impl Fn(&State) -> bool, what: impl Fn() -> String) {
        let deadline = Instant::now() + EVENT_WAIT;
        loop {
            if done(&self.lock()) {
                return;
            }
            assert!(Instant::now() < deadline, "never saw {}", what());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Called on the runtime's thread before each run: blocks while the gate is closed and
    /// no permit is left.
    fn pass(&self, tag: f32) {
        let mut state = self.lock();
        if !state.closed {
            return;
        }
        state.arrivals.push(tag);
        state.waiting += 1;
        let tagged = |state: &State| state.tagged.iter().position(|t| *t == tag);
        while state.closed && state.permits == 0 && tagged(&state).is_none() {
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        if state.closed {
            match tagged(&state) {
                Some(at) => {
                    state.tagged.remove(at);
                }
                None => state.permits -= 1,
            }
        }
        state.waiting -= 1;
    }
}

/// A test's handle on a gate, which opens it when dropped (at the end of the test, or when
/// an assertion fails), so no run stays held and the server can stop.
pub struct OpenOnDrop(pub Arc<Gate>);

impl std::ops::Deref for OpenOnDrop {
    type Target = Gate;

    fn deref(&self) -> &Gate {
        &self.0
    }
}

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// A backend behind a gate.
struct Gated {
    gate: Arc<Gate>,
    inner: Arc<dyn Backend>,
}

/// The first value of the `x` input, or NaN when there is none.
fn tag(inputs: &[NamedTensor]) -> f32 {
    inputs
        .iter()
        .find(|(name, _)| name == "x")
        .and_then(|(_, tensor)| tensor.view::<f32>().ok().and_then(|v| v.first().copied()))
        .unwrap_or(f32::NAN)
}

impl Backend for Gated {
    fn platform(&self) -> &'static str {
        self.inner.platform()
    }

    fn signatures(&self) -> &[Signature] {
        self.inner.signatures()
    }

    fn held_bytes(&self) -> Option<u64> {
        self.inner.held_bytes()
    }

    fn run(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        self.gate.pass(tag(&inputs));
        self.inner.run(signature, inputs, outputs)
    }

    fn run_into(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
        targets: &[OutputTarget],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        self.gate.pass(tag(&inputs));
        self.inner.run_into(signature, inputs, outputs, targets)
    }
}
