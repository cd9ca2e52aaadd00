//! Hands memory freed by an eviction back to the operating system.
//!
//! glibc's malloc keeps freed memory in its arenas for reuse: with its dynamic mmap threshold
//! the buffers of an evicted session (tens of megabytes) stay resident, and the process grows
//! far past `--model-memory-budget` even though the accounting is right. `malloc_trim(0)`
//! returns the free pages of every arena to the kernel. Other C libraries have no such call
//! (musl returns large allocations by itself), so elsewhere this does nothing.
#![allow(unsafe_code)]

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
