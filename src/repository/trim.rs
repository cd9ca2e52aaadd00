//! Hands memory freed by an eviction back to the operating system, or, without a budget,
//! keeps memory freed by one request for the next.
//!
//! glibc's malloc keeps freed memory in its arenas for reuse, and two of its habits keep an
//! evicted session's memory resident, so that the process grows far past
//! `--model-memory-budget` even though the accounting is right:
//!
//! - `malloc_trim(0)` returns the free pages inside every arena, but not the free top of a
//!   thread's arena, which glibc gives back only when it exceeds its trim threshold;
//! - that threshold, and the size from which a block gets a mapping of its own, rise with the
//!   largest mapped block freed so far (up to 64 MiB and 32 MiB): once a model file's buffer
//!   has been freed, a session's blocks of tens of megabytes come from the arenas, and after
//!   an eviction they can stay at the top of a thread's arena. (Checked on glibc 2.36: a
//!   10 MiB block freed at the top of a thread's arena after a 24 MiB one was freed stays
//!   resident through `malloc_trim(0)`, and goes at once with the threshold fixed.)
//!
//! Under a budget, [`return_large_allocations`] fixes the mapping threshold at 1 MiB, which
//! also stops both thresholds from rising: blocks of a megabyte or more are unmapped the
//! moment they are freed, arena tops past glibc's default 128 KiB trim threshold are trimmed
//! as they form, and [`release_freed_memory`] takes the rest. Measured on the red team's case
//! (six 24 MiB models round-robin under an 80 MiB budget, debug build): the process peaked
//! 106 to 108 MiB above its base with the threshold fixed, 112 to 159 MiB without. The cost
//! is a fresh mapping, and its page faults, for each large block that a load, a run outside
//! ONNX Runtime's arena or a request allocates: loads get slower. An operator's own
//! `MALLOC_MMAP_THRESHOLD_` (or glibc tunable) is left alone. Other C libraries have no such
//! calls (musl returns large allocations by itself), so elsewhere these do nothing.
//!
//! Without a budget, [`keep_freed_memory_for_reuse`] does the opposite for the serving
//! process: a request of a megabyte of tensors allocates buffers of its size on the way in
//! (the body, gRPC's message buffer), and glibc handed them back to the kernel when they
//! were freed (a mapping of their own below the dynamic threshold, or a trimmed arena top),
//! so every such request faulted its buffers in again: 12% of the server's CPU time at one
//! client on 1,000-row ranking requests (`perf record`: `exc_page_fault` and memcg charges
//! under the body's and tonic's copies). Blocks up to 32 MiB then come from the arenas, and
//! an arena keeps up to 64 MiB of free top for the next request (docs/BENCHMARKS.md,
//! "Against native Triton"). Kept for good, that memory would make one burst's peak the
//! process's size: [`KeptFreedMemory`] lets the idle trimmer (`idle_trim.rs`) give arena
//! tops back between bursts, and [`release_freed_memory`] takes the rest once idle.
#![allow(unsafe_code)]

/// Blocks of at least this many bytes get a mapping of their own under a budget.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const OWN_MAPPING_FROM: libc::c_int = 1 << 20;

/// Returns the memory malloc holds free to the kernel, where the C library allows it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(super) fn release_freed_memory() {
    // SAFETY: malloc_trim takes no pointer and touches only malloc's own arenas, under their
    // locks; glibc allows it from any thread at any time. Its result (whether any memory was
    // released) needs no handling.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn release_freed_memory() {}

/// Makes large blocks go back to the system as soon as they are freed, for a process whose
/// models live under a memory budget; unless the operator has set glibc's threshold.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(super) fn return_large_allocations() {
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
        || tunables.contains("glibc.malloc.mmap_threshold")
    {
        return;
    }
    // SAFETY: mallopt takes no pointer; glibc sets the parameter under the main arena's lock
    // and allows the call from any thread at any time. It fails only for an unknown
    // parameter or a value above its maximum (32 MiB here), neither of which this is.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_FROM);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn return_large_allocations() {}

/// Blocks below this many bytes come from the arenas when freed memory is kept (glibc's
/// largest mapping threshold).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENA_BLOCKS_UP_TO: libc::c_int = 32 << 20;

/// Free memory an arena keeps at its top when freed memory is kept.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const KEPT_ARENA_TOP: libc::c_int = 64 << 20;

/// Free top an arena keeps while the idle trimmer gives memory back: glibc's default trim
/// threshold.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const GIVEN_BACK_ARENA_TOP: libc::c_int = 128 << 10;

/// Keeps memory freed by a request's large buffers in malloc's arenas for the next request,
/// for a serving process without a memory budget; unless the operator has set glibc's
/// thresholds. Called once, by the server's `main` only: the setting is the process's, and
/// a library user (a test binary running servers with and without budgets) keeps its own.
/// `Some` when the thresholds were set: the server's idle trimmer then switches the arena
/// tops between kept and given back (`ServerOptions::kept_freed_memory`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn keep_freed_memory_for_reuse() -> Option<KeptFreedMemory> {
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
        || std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_some()
        || tunables.contains("glibc.malloc.mmap_threshold")
        || tunables.contains("glibc.malloc.trim_threshold")
    {
        return None;
    }
    // SAFETY: as in `return_large_allocations`: mallopt takes no pointer and may be called
    // from any thread; both values are within glibc's limits (32 MiB is the largest mapping
    // threshold it takes).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, ARENA_BLOCKS_UP_TO);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_ARENA_TOP);
    }
    Some(KeptFreedMemory(()))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn keep_freed_memory_for_reuse() -> Option<KeptFreedMemory> {
    None
}

/// Made only by [`keep_freed_memory_for_reuse`] once it has set the thresholds, so that
/// whoever holds one may switch the arena tops and leaves an operator's own thresholds (or a
/// budget's) alone.
///
/// glibc gives a thread arena's free top back only from `free`, when a block of 64 KiB or
/// more is freed in that arena while the top is over the trim threshold; `malloc_trim`
/// returns the pages of free blocks inside every arena and the main arena's top, never a
/// thread arena's top. So the tops that a burst's last frees leave stay, whatever is trimmed
/// later, unless the threshold was already down when those frees ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptFreedMemory(());

impl KeptFreedMemory {
    /// `true`: arenas keep up to 64 MiB of free top for the next request (as tuned);
    /// `false`: a large free trims its arena's top down to glibc's default, as untuned.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    pub(super) fn keep_arena_tops(self, keep: bool) {
        let threshold = if keep {
            KEPT_ARENA_TOP
        } else {
            GIVEN_BACK_ARENA_TOP
        };
        // SAFETY: as in `keep_freed_memory_for_reuse`; the value is within glibc's limits.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, threshold);
        }
    }

    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    pub(super) fn keep_arena_tops(self, _keep: bool) {}
}
