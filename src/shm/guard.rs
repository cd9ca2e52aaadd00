//! Keeps a client's shared-memory object from killing the server.
//!
//! A registered region is the client's memory: its owner can `ftruncate` the object while a
//! request reads or writes the mapping, and a sparse object on a full tmpfs has pages that
//! cannot be allocated when written. Either way the access faults with SIGBUS, whose default
//! action kills the process. Checking the object's size before use narrows the window but
//! cannot close it (the runtime touches the memory later, on its own threads), and copying
//! every input out of the mapping would give up zero copy. So the faults are made survivable,
//! the way display servers survive client buffers:
//!
//! * every mapped region is listed in a fixed table the signal handler can read without locks
//!   or allocation;
//! * for a SIGBUS raised by the kernel at an address inside a listed region, the handler maps
//!   private anonymous pages over the whole region (`MAP_FIXED`, so the address range stays
//!   ours and the faulting access, run again, reads or writes zeros) and marks the region
//!   poisoned; whatever thread faulted (a runtime thread, the batcher gathering a batch, a
//!   copy on an async worker) carries on;
//! * the requests that used a poisoned region fail afterwards with INVALID_ARGUMENT, and the
//!   region refuses new requests until it is registered again;
//! * any other SIGBUS goes to the handler that was installed before (Rust's own stack-overflow
//!   handler, a native library's) or, when there was none, gets the default action.
//!
//! Replacing the whole region (not only the faulting page) means one signal per region, not
//! one per page of a truncated gigabyte, and none of the client's pages is touched again.
//!
//! The table and the saved handler are process-wide statics because a signal handler can
//! reach nothing else; nothing outside this module sees them.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::error::ShmError;

/// Regions that can be mapped at once, counting unregistered ones still used by requests.
pub const MAX_GUARDED: usize = 4096;

/// One mapped region: `[start, start + len)` page-aligned; `start == 0` marks a free slot.
#[derive(Debug)]
struct Slot {
    claimed: AtomicBool,
    start: AtomicUsize,
    len: AtomicUsize,
    poisoned: AtomicBool,
}

static TABLE: [Slot; MAX_GUARDED] = [const {
    Slot {
        claimed: AtomicBool::new(false),
        start: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        poisoned: AtomicBool::new(false),
    }
}; MAX_GUARDED];

/// The SIGBUS action in place before ours, set once before ours is installed.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// Whether installing the handler worked (errno otherwise), decided once.
static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();

/// Installs the SIGBUS handler, once per process.
pub fn install() -> Result<(), ShmError> {
    INSTALLED
        .get_or_init(install_handler)
        .map_err(|errno| ShmError::Guard(std::io::Error::from_raw_os_error(errno)))
}

fn install_handler() -> Result<(), i32> {
    // SAFETY: `sigaction` with a null new action only reads the current one into `previous`,
    // a zeroed plain C struct we own.
    let previous = unsafe {
        let mut previous: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) != 0 {
            return Err(errno());
        }
        previous
    };
    let _ = PREVIOUS.set(previous);
    // SAFETY: `on_sigbus` has the signature SA_SIGINFO requires and only does what a signal
    // handler may (atomics, mmap, sigaction, raise, and calling the previous handler).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) != 0 {
            return Err(errno());
        }
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A region's entry in the table; dropping it removes the entry. It must be dropped before
/// the mapping is unmapped, so that the handler never replaces pages no longer the region's.
#[derive(Debug)]
pub struct Guarded {
    slot: &'static Slot,
}

impl Guarded {
    /// Lists the mapping at `ptr` (`len` bytes, `len > 0`), widened to whole pages, all of
    /// which belong to the same mapping.
    pub fn new(ptr: *const u8, len: usize) -> Result<Self, ShmError> {
        install()?;
        let page = rustix::param::page_size();
        let first = ptr as usize & !(page - 1);
        let end = (ptr as usize)
            .checked_add(len)
            .and_then(|end| end.checked_next_multiple_of(page))
            .ok_or(ShmError::Overflow)?;
        let slot = TABLE
            .iter()
            .find(|slot| {
                slot.claimed
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or(ShmError::TooManyMapped(MAX_GUARDED))?;
        slot.poisoned.store(false, Ordering::Relaxed);
        slot.len.store(end - first, Ordering::Relaxed);
        // Publishing `start` last makes the entry visible to the handler complete.
        slot.start.store(first, Ordering::Release);
        Ok(Self { slot })
    }

    /// Whether a fault replaced the region's pages: what it holds is no longer the client's.
    pub fn poisoned(&self) -> bool {
        self.slot.poisoned.load(Ordering::Acquire)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.slot.start.store(0, Ordering::Release);
        self.slot.len.store(0, Ordering::Relaxed);
        self.slot.claimed.store(false, Ordering::Release);
    }
}

/// The entry holding `addr`. A fault inside a region means some request is using it, and a
/// request holds the region (hence its entry and mapping) until it ends, so an entry found
/// here cannot be removed while the handler works on it.
fn find(addr: usize) -> Option<(&'static Slot, usize, usize)> {
    TABLE.iter().find_map(|slot| {
        let start = slot.start.load(Ordering::Acquire);
        let len = slot.len.load(Ordering::Relaxed);
        (start != 0 && addr >= start && addr - start < len).then_some((slot, start, len))
    })
}

extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid `siginfo_t` to an SA_SIGINFO handler.
    let (from_kernel, addr) = unsafe { ((*info).si_code > 0, (*info).si_addr() as usize) };
    if from_kernel {
        if let Some((slot, start, len)) = find(addr) {
            // SAFETY: `[start, start + len)` is whole pages of a live mapping of ours (see
            // `find`); MAP_FIXED swaps them for private zero pages in one step, so no other
            // mapping can appear in between, and the range stays valid until the region's
            // own unmap.
            let mapped = unsafe {
                libc::mmap(
                    start as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if mapped != libc::MAP_FAILED {
                slot.poisoned.store(true, Ordering::Release);
                return;
            }
        }
    }
    chain(signal, info, context);
}

/// Hands a SIGBUS that is not ours to the previous handler, or to the default action.
fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let previous = PREVIOUS.get();
    let handler = previous.map_or(libc::SIG_DFL, |action| action.sa_sigaction);
    if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
        let flags = previous.map_or(0, |action| action.sa_flags);
        if flags & libc::SA_SIGINFO != 0 {
            // SAFETY: an SA_SIGINFO action's handler has this signature.
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(handler) };
            handler(signal, info, context);
        } else {
            // SAFETY: a plain action's handler takes the signal number only.
            let handler: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            handler(signal);
        }
        return;
    }
    // Default action (an ignored SIGBUS from a fault would loop forever, so that too): restore
    // it, then either return so that the faulting access runs again and the kernel ends the
    // process as it would have without us, or, for a signal sent by a process, send it again;
    // it is blocked until we return.
    // SAFETY: plain C struct, zeroed, then the documented default disposition.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(signal, &action, std::ptr::null_mut());
        if (*info).si_code <= 0 {
            libc::raise(signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    /// Set in the child process that must die.
    const CHILD: &str = "TENSORPORT_TEST_UNGUARDED_SIGBUS";

    /// A SIGBUS at an address no region holds is not ours to absorb: with the handler
    /// installed, a fault in an unregistered mapping still ends the process by SIGBUS. The
    /// fault runs in a child (this test binary again, this test only).
    #[test]
    fn a_fault_outside_every_region_still_kills() {
        if std::env::var_os(CHILD).is_some() {
            fault_outside_regions();
            return;
        }
        let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "shm::guard::tests::a_fault_outside_every_region_still_kills",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run the child");
        assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
    }

    fn fault_outside_regions() {
        super::install().expect("install the handler");
        let file = tempfile_in_dev_shm();
        file.set_len(4096).expect("size");
        let map = memmap2::MmapOptions::new()
            .len(4096)
            .map_raw(&file)
            .expect("map");
        file.set_len(0).expect("truncate");
        // SAFETY: deliberately reads a page past the end of the file: the fault under test.
        let byte = unsafe { std::ptr::read_volatile(map.as_ptr()) };
        // Not reached: the fault ends the process.
        std::process::exit(i32::from(byte) + 10);
    }

    fn tempfile_in_dev_shm() -> std::fs::File {
        let path = format!("/dev/shm/tensorport-test-unguarded-{}", std::process::id());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("create");
        let _ = std::fs::remove_file(&path);
        file
    }
}
