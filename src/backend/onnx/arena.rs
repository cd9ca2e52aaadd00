//! What a session's CPU arena holds, measured after the runs that can have grown it, so that
//! [`crate::backend::Backend::held_bytes`] reads a number instead of asking the runtime.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::Session;

use crate::backend::onnx_raw;

/// One instance: its session, and what its arena held when last measured.
pub(super) struct Instance {
    pub(super) session: Mutex<Metered>,
    /// The bytes the session's arena has taken from the system, as of the last measurement;
    /// read without the session's lock.
    pub(super) held: AtomicU64,
}

/// A session and what measures its arena.
pub(super) struct Metered {
    pub(super) session: Session,
    pub(super) meter: ArenaMeter,
}

/// Measures one session's CPU arena.
pub(super) struct ArenaMeter {
    /// The session's arena; `None` where the runtime cannot report it.
    arena: Option<Allocator>,
    /// The most input elements a run of the session has had. The arena grows when a run
    /// needs more than it holds, which follows the inputs' size: it is measured again after a
    /// run larger than any before (the first one included), so that runs of sizes already
    /// seen pay nothing for the measurement.
    widest_input: usize,
}

/// An arena's statistic: the bytes it has taken from the system, in use or not.
const ARENA_TOTAL: &std::ffi::CStr = c"TotalAllocated";

impl Instance {
    pub(super) fn new(session: Session) -> Self {
        let arena = MemoryInfo::new(
            AllocationDevice::CPU,
            0,
            AllocatorType::Arena,
            MemoryType::Default,
        )
        .and_then(|info| Allocator::new(&session, info))
        .ok();
        let mut meter = ArenaMeter {
            arena,
            widest_input: 0,
        };
        let held = meter.bytes();
        if held.is_none() {
            meter.arena = None;
        }
        Self {
            session: Mutex::new(Metered { session, meter }),
            held: AtomicU64::new(held.unwrap_or(0)),
        }
    }

    pub(super) fn reports(&self) -> bool {
        self.session
            .lock()
            .is_ok_and(|metered| metered.meter.arena.is_some())
    }
}

impl ArenaMeter {
    /// What the arena holds now, where it reports it.
    fn bytes(&self) -> Option<u64> {
        let arena = self.arena.as_ref()?;
        onnx_raw::allocator_stat(arena, ARENA_TOTAL).ok().flatten()
    }

    /// After a run with `elements` input elements: measures the arena again into `held` if
    /// the run was larger than any before.
    pub(super) fn after_run(&mut self, elements: usize, held: &AtomicU64) {
        if elements <= self.widest_input {
            return;
        }
        self.widest_input = elements;
        if let Some(bytes) = self.bytes() {
            held.store(bytes, Ordering::Relaxed);
        }
    }
}
