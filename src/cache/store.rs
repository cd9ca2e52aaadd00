//! The byte-bounded, least-recently-used store of answers: one for the server, shared by every
//! model that enables the cache.
//!
//! Entries sit in a slab threaded on one recency list (most recent at the head); a map from
//! hash to slab slots finds them. A hit compares the whole key, so two requests whose hashes
//! collide never share an answer. Every entry is charged its key, its outputs and a fixed
//! overhead, and inserting evicts from the tail until the total fits the capacity: the bytes
//! held stay bounded whatever keys clients send.
//!
//! The charge is what the entry's allocations take, as the allocator rounds them, not a count
//! of its elements: a string answer is copied into one buffer with an offset per element (two
//! allocations), never one allocation per element, which for short strings cost three times
//! what their bytes were charged.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

use super::key::{self, KeyParts, RequestKey};
use crate::backend::NamedTensor;
use crate::tensor::{Strings, Tensor, TensorData};

/// What an entry costs beyond its key and outputs: its slab slot (twice: the slab grows by
/// doubling), its place in the map (a bucket and its control byte, three times: the map keeps
/// an eighth free and grows by doubling), the map's first block of slots for its hash, the
/// answer's header and rounding, and the key's shared header and the alignment padding its
/// buffer was allocated with.
pub const ENTRY_OVERHEAD: u64 = 2 * size_of::<Option<Slot>>() as u64
    + 3 * (size_of::<(u64, Vec<usize>)>() as u64 + 1)
    + 48
    + 32
    + 32
    + 64;
/// What each output tensor costs beyond its name's, shape's and data's blocks: its place in
/// the answer, and the shared header its data's buffer gets when a hit first hands it out.
const TENSOR_OVERHEAD: u64 = size_of::<NamedTensor>() as u64 + 32;

/// Past this size glibc's malloc maps a block of its own, rounded to whole pages.
const MMAP_THRESHOLD: u64 = 128 << 10;
const PAGE: u64 = 4096;

/// A stored answer: the outputs, in the order the request asked for them.
pub type Answer = Arc<[NamedTensor]>;

/// How many entries and bytes the store holds, and what it has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreUsage {
    pub entries: u64,
    pub bytes: u64,
    pub evictions: u64,
    /// Answers not kept because they alone are larger than the whole store.
    pub refused: u64,
}

pub struct ResponseStore {
    capacity: u64,
    /// Keyed per process, so that clients cannot aim keys at one bucket.
    hasher: RandomState,
    lru: Mutex<Lru>,
}

impl ResponseStore {
    /// A store that holds at most `capacity` bytes of entries.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            hasher: RandomState::new(),
            lru: Mutex::new(Lru::default()),
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The key of a request and its inputs over the key's copy (see [`key::build`]).
    pub fn key(&self, parts: &KeyParts<'_>) -> Option<(RequestKey, Vec<NamedTensor>)> {
        key::build(parts, &self.hasher)
    }

    /// The answer stored for `key`, made the most recent.
    pub fn get(&self, key: &RequestKey) -> Option<Answer> {
        self.locked().get(key)
    }

    /// Stores a copy of `outputs` as the answer to `key` under `scope` (the load it came
    /// from), evicting the least recently used entries until it fits. An answer larger than
    /// the whole store is not kept. Returns whether it was stored.
    pub fn insert(&self, scope: u64, key: RequestKey, outputs: &[NamedTensor]) -> bool {
        let answer: Answer = outputs
            .iter()
            .map(|(name, tensor)| (name.clone(), owned_copy(tensor)))
            .collect();
        let bytes = entry_bytes(&key, &answer);
        if bytes > self.capacity {
            self.locked().usage.refused += 1;
            return false;
        }
        self.locked().insert(
            Entry {
                scope,
                key,
                answer,
                bytes,
            },
            self.capacity,
        );
        true
    }

    /// Drops every entry of `scope`: its load is gone.
    pub fn drop_scope(&self, scope: u64) {
        self.locked().drop_scope(scope);
    }

    pub fn usage(&self) -> StoreUsage {
        self.locked().usage
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, Lru> {
        // The list is consistent between statements that could panic, so a poisoned lock's
        // state is still a valid list.
        self.lru.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A copy of `tensor` in memory of the store's own: an output may be a view of a client's
/// shared-memory region (which the client rewrites) or a slice of a whole batch's buffer
/// (which would keep the batch alive and uncharged).
fn owned_copy(tensor: &Tensor) -> Tensor {
    let copy = match tensor.data() {
        TensorData::Dense(bytes) => Tensor::dense(
            tensor.dtype(),
            tensor.shape().to_vec(),
            Bytes::copy_from_slice(bytes),
        ),
        TensorData::Strings(strings) => {
            Tensor::from_strings(tensor.shape().to_vec(), packed_copy(strings))
        }
    };
    // The copy has the original's dtype, shape and element count, which already agreed.
    copy.unwrap_or_else(|_| tensor.clone())
}

/// The elements of `strings` end to end in one buffer of exactly their bytes, with one
/// offset each (allocated once, for all of them and the end).
fn packed_copy(strings: &Strings) -> Strings {
    let mut buffer = Vec::with_capacity(strings.payload_len());
    let mut starts = Vec::with_capacity(strings.len() + 1);
    for element in strings.iter() {
        starts.push(buffer.len());
        buffer.extend_from_slice(element);
    }
    // The starts are in order and within the buffer by construction.
    Strings::contiguous(Bytes::from(buffer), starts)
        .unwrap_or_else(|_| Strings::from_handles(strings.to_vec()))
}

/// What an entry is charged: its key, each output's name, shape and data as the allocator
/// holds them, and overheads.
fn entry_bytes(key: &RequestKey, answer: &[NamedTensor]) -> u64 {
    let outputs: u64 = answer
        .iter()
        .map(|(name, tensor)| {
            let data = match tensor.data() {
                TensorData::Dense(bytes) => allocation(bytes.len() as u64),
                // The packed copy: the elements' bytes, and an offset per element and the end.
                TensorData::Strings(strings) => {
                    allocation(strings.payload_len() as u64)
                        + allocation(8 * (strings.len() as u64 + 1))
                }
            };
            TENSOR_OVERHEAD
                + allocation(name.len() as u64)
                + allocation(8 * tensor.shape().len() as u64)
                + data
        })
        .sum();
    ENTRY_OVERHEAD + allocation(key.len() as u64) + outputs
}

/// What a block of `bytes` takes from glibc's malloc: an 8-byte header, rounded to 16, at
/// least 32; past [`MMAP_THRESHOLD`], a mapping of its own rounded to whole pages (an upper
/// bound too when malloc has raised its threshold and keeps the block in its heap).
pub fn allocation(bytes: u64) -> u64 {
    if bytes == 0 {
        return 0;
    }
    if bytes >= MMAP_THRESHOLD {
        return (bytes + 16).next_multiple_of(PAGE);
    }
    ((bytes + 8).next_multiple_of(16)).max(32)
}

struct Entry {
    scope: u64,
    key: RequestKey,
    answer: Answer,
    bytes: u64,
}

struct Slot {
    entry: Entry,
    /// Towards the head (more recent) and the tail (less recent).
    newer: Option<usize>,
    older: Option<usize>,
}

#[derive(Default)]
struct Lru {
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    by_hash: HashMap<u64, Vec<usize>>,
    newest: Option<usize>,
    oldest: Option<usize>,
    usage: StoreUsage,
}

impl Lru {
    fn find(&self, key: &RequestKey) -> Option<usize> {
        self.by_hash.get(&key.hash)?.iter().copied().find(|&index| {
            self.slot(index)
                .is_some_and(|slot| slot.entry.key.bytes == key.bytes)
        })
    }

    fn slot(&self, index: usize) -> Option<&Slot> {
        self.slots.get(index).and_then(Option::as_ref)
    }

    fn slot_mut(&mut self, index: usize) -> Option<&mut Slot> {
        self.slots.get_mut(index).and_then(Option::as_mut)
    }

    fn get(&mut self, key: &RequestKey) -> Option<Answer> {
        let index = self.find(key)?;
        self.unlink(index);
        self.link_newest(index);
        self.slot(index).map(|slot| slot.entry.answer.clone())
    }

    fn insert(&mut self, entry: Entry, capacity: u64) {
        // A racing miss of the same request stored it first: keep one.
        if let Some(index) = self.find(&entry.key) {
            self.remove(index);
        }
        while self.usage.bytes + entry.bytes > capacity {
            let Some(oldest) = self.oldest else { break };
            self.remove(oldest);
            self.usage.evictions += 1;
        }
        let hash = entry.key.hash;
        self.usage.bytes += entry.bytes;
        self.usage.entries += 1;
        let slot = Slot {
            entry,
            newer: None,
            older: None,
        };
        let index = match self.free.pop() {
            Some(index) => {
                self.slots[index] = Some(slot);
                index
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.by_hash.entry(hash).or_default().push(index);
        self.link_newest(index);
    }

    fn drop_scope(&mut self, scope: u64) {
        let doomed: Vec<usize> = (0..self.slots.len())
            .filter(|&index| {
                self.slot(index)
                    .is_some_and(|slot| slot.entry.scope == scope)
            })
            .collect();
        for index in doomed {
            self.remove(index);
        }
    }

    fn remove(&mut self, index: usize) {
        self.unlink(index);
        let Some(slot) = self.slots.get_mut(index).and_then(Option::take) else {
            return;
        };
        let hash = slot.entry.key.hash;
        if let Some(indices) = self.by_hash.get_mut(&hash) {
            indices.retain(|&other| other != index);
            if indices.is_empty() {
                self.by_hash.remove(&hash);
            }
        }
        self.usage.bytes -= slot.entry.bytes;
        self.usage.entries -= 1;
        self.free.push(index);
    }

    fn unlink(&mut self, index: usize) {
        let Some((newer, older)) = self.slot(index).map(|slot| (slot.newer, slot.older)) else {
            return;
        };
        match newer.and_then(|newer| self.slot_mut(newer)) {
            Some(slot) => slot.older = older,
            None => self.newest = older,
        }
        match older.and_then(|older| self.slot_mut(older)) {
            Some(slot) => slot.newer = newer,
            None => self.oldest = newer,
        }
        if let Some(slot) = self.slot_mut(index) {
            slot.newer = None;
            slot.older = None;
        }
    }

    fn link_newest(&mut self, index: usize) {
        let previous = self.newest;
        if let Some(slot) = self.slot_mut(index) {
            slot.older = previous;
            slot.newer = None;
        }
        match previous.and_then(|previous| self.slot_mut(previous)) {
            Some(slot) => slot.newer = Some(index),
            None => self.oldest = Some(index),
        }
        self.newest = Some(index);
    }
}

#[cfg(test)]
mod tests;
