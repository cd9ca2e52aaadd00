//! Hands memory freed by an eviction back to the operating system.
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
