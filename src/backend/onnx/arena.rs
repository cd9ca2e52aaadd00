//! One session and what its CPU arena holds, measured after the runs that can have grown it,
//! so that [`crate::backend::Backend::held_bytes`] reads a number instead of asking the
//! runtime.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::Session;

use crate::backend::onnx_raw;

/// One session, run from as many threads at once as the version has instances sharing it.
pub(super) struct Instance {
    pub(super) session: Session,
    /// A handle on the session's CPU allocator, which every output the session allocates
    /// holds, so that an output still being sent keeps its memory after the version is gone.
    /// (`ort`'s allocators are `Send` but not `Sync`: runs on several threads take turns
    /// for the instant it takes to clone the handle.)
    output_allocator: Mutex<Allocator>,
    meter: ArenaMeter,
    /// The bytes the session's arena has taken from the system, as of the last measurement.
    held: AtomicU64,
}

/// Measures one session's CPU arena.
struct ArenaMeter {
    /// The session's arena; `None` where the runtime cannot report it (or it has none).
    arena: Option<Mutex<Allocator>>,
    /// The most input elements a run of the session has had. The arena grows when a run
    /// needs more than it holds, which follows the inputs' size: it is measured again after a
    /// run larger than any before (the first one included), so that runs of sizes already
    /// seen pay nothing for the measurement.
    widest_input: AtomicUsize,
}

/// An arena's statistic: the bytes it has taken from the system, in use or not.
const ARENA_TOTAL: &std::ffi::CStr = c"TotalAllocated";

fn cpu_allocator(session: &Session, kind: AllocatorType) -> Option<Allocator> {
    MemoryInfo::new(AllocationDevice::CPU, 0, kind, MemoryType::Default)
        .and_then(|info| Allocator::new(session, info))
        .ok()
}

impl Instance {
    pub(super) fn new(session: Session) -> Result<Self, String> {
        // A session has one CPU allocator: its arena, or (with the arena turned off) a plain
        // one.
        let arena = cpu_allocator(&session, AllocatorType::Arena);
        let output_allocator = if arena.is_some() {
            cpu_allocator(&session, AllocatorType::Arena)
        } else {
            cpu_allocator(&session, AllocatorType::Device)
        }
        .ok_or("the session has no CPU allocator")?;
        let mut meter = ArenaMeter {
            arena: arena.map(Mutex::new),
            widest_input: AtomicUsize::new(0),
        };
        let held = meter.bytes();
        if held.is_none() {
            meter.arena = None;
        }
        Ok(Self {
            session,
            output_allocator: Mutex::new(output_allocator),
            meter,
            held: AtomicU64::new(held.unwrap_or(0)),
        })
    }

    /// The allocator outputs are handed over with (see `onnx_raw::run`).
    pub(super) fn output_allocator(&self) -> &Mutex<Allocator> {
        &self.output_allocator
    }

    pub(super) fn reports(&self) -> bool {
        self.meter.arena.is_some()
    }

    /// What the arena held when last measured.
    pub(super) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// After a run with `elements` input elements: measures the arena again if the run was
    /// larger than any before.
    pub(super) fn after_run(&self, elements: usize) {
        if self
            .meter
            .widest_input
            .fetch_max(elements, Ordering::Relaxed)
            >= elements
        {
            return;
        }
        if let Some(bytes) = self.meter.bytes() {
            self.held.store(bytes, Ordering::Relaxed);
        }
    }
}

impl ArenaMeter {
    /// What the arena holds now, where it reports it.
    fn bytes(&self) -> Option<u64> {
        let arena = self
            .arena
            .as_ref()?
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        onnx_raw::allocator_stat(&arena, ARENA_TOTAL).ok().flatten()
    }
}
