//! The response cache holds what it is charged, measured by the allocator rather than
//! trusted: a counting global allocator keeps, per thread, the bytes of the blocks live now,
//! each as glibc's malloc holds it (`malloc_usable_size` and the block's header), and the
//! store's inserts run on the test's own thread, so what they leave allocated there is what
//! the store holds. The attack: answers of many one-byte strings, each once held in a block of
//! its own with a 32-byte handle, while charged 33 bytes.

// The counting allocator is the one `unsafe` here: it forwards every call to the system
// allocator unchanged and asks glibc how large the block is, so it upholds `GlobalAlloc`'s
// contract exactly as `System` does.
#![allow(unsafe_code)]
// Test code fails loudly: a panic is a failed test with its message.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::Bytes;
use tensorport::backend::NamedTensor;
use tensorport::cache::{KeyParts, ResponseStore};
use tensorport::tensor::Tensor;

thread_local! {
    /// Bytes of the blocks this thread allocated and has not freed (or that another thread
    /// freed: none here).
    static LIVE: Cell<i64> = const { Cell::new(0) };
}

/// What glibc holds for the block at `ptr`: its usable bytes and its header (8 bytes in the
/// heap, 16 for a block mapped on its own, which is whole pages).
fn held(ptr: *mut u8) -> i64 {
    if ptr.is_null() {
        return 0;
    }
    // SAFETY: `ptr` is a live block that `System` (glibc's malloc) returned and not yet freed.
    let usable = unsafe { libc::malloc_usable_size(ptr.cast()) } as i64;
    if (usable + 16) % 4096 == 0 && usable >= (128 << 10) - 16 {
        usable + 16
    } else {
        usable + 8
    }
}

fn count(bytes: i64) {
    // `try_with`: a thread being torn down has no thread-locals left; it is not counted.
    let _ = LIVE.try_with(|live| live.set(live.get() + bytes));
}

struct Counting;

// SAFETY: every method forwards its arguments to `System` unchanged and returns its result;
// counting reads the block's size from glibc and touches a const-initialised thread-local,
// neither of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        let ptr = unsafe { System.alloc(layout) };
        count(held(ptr));
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        count(held(ptr));
        ptr
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let before = held(ptr);
        // SAFETY: as for `alloc`; `ptr` was allocated by this allocator with `layout`.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            count(held(moved) - before);
        }
        moved
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-held(ptr));
        // SAFETY: as for `alloc`; `ptr` was allocated by this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> i64 {
    LIVE.with(Cell::get)
}

/// An answer of `count` one-byte strings, as a runtime's output holds them.
fn one_byte_strings(count: usize) -> Vec<NamedTensor> {
    let strings = (0..count)
        .map(|i| Bytes::from(vec![b'a' + (i % 26) as u8]))
        .collect();
    vec![(
        "y".to_owned(),
        Tensor::strings(vec![1, count], strings).unwrap(),
    )]
}

/// Stores `answer` under the key of request number `request`, the key built inside the
/// measured window (the store keeps it too).
fn insert(store: &ResponseStore, request: u32, answer: &[NamedTensor]) -> bool {
    let inputs = vec![(
        "x".to_owned(),
        Tensor::from_vec(vec![1], vec![request as f32]).unwrap(),
    )];
    let outputs = vec!["y".to_owned()];
    let parts = KeyParts {
        model: "m",
        load: 1,
        signature: 0,
        inputs: &inputs,
        outputs: &outputs,
    };
    let (key, over_key) = store.key(&parts).unwrap();
    drop(over_key);
    store.insert(1, key, answer)
}

#[test]
fn a_cache_of_one_byte_strings_holds_no_more_than_it_is_charged_or_its_size() {
    let capacity = 64u64 << 20;
    let store = ResponseStore::new(capacity);
    let answer = one_byte_strings(40_000);
    let before = live();
    // 160 distinct answers, as in the review; about 180 fit once charged what they hold.
    for request in 0..160 {
        assert!(insert(&store, request, &answer));
    }
    let held = u64::try_from(live() - before).unwrap();
    let usage = store.usage();
    assert!(
        held <= usage.bytes,
        "the store holds {held} bytes but is charged {} for its {} entries",
        usage.bytes,
        usage.entries
    );
    assert!(
        held <= capacity,
        "{held} bytes held by a {capacity}-byte cache"
    );
    // Charged what it holds, not a multiple of it: the charge is an upper bound, not a guess.
    assert!(
        usage.bytes - held <= usage.bytes / 10,
        "charged {} for {held} held",
        usage.bytes
    );
    drop(store);
    assert_eq!(live(), before, "dropping the store gives back what it held");
}

#[test]
fn evictions_keep_what_the_store_holds_within_its_size() {
    // Room for a few such answers only: most inserts evict, and what is held follows.
    let capacity = 2u64 << 20;
    let store = ResponseStore::new(capacity);
    let answer = one_byte_strings(40_000);
    let before = live();
    let mut most = 0;
    for request in 0..64 {
        assert!(insert(&store, request, &answer));
        most = most.max(live() - before);
    }
    let most = u64::try_from(most).unwrap();
    assert!(store.usage().evictions > 50, "{:?}", store.usage());
    assert!(
        most <= capacity,
        "{most} bytes held by a {capacity}-byte cache"
    );
}
