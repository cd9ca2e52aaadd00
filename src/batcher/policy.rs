//! When to cut a batch, decided by a plain synchronous struct so that every rule is tested
//! without a runtime or a clock: the actor passes `now` in and acts on the answer.
//!
//! The rules, applied on every [`BatchQueue::step`](super::queue::BatchQueue::step) (queue.rs
//! keeps the entries so that a step's work does not grow with the queue's length):
//! 1. Entries past their deadline are handed back to be answered DEADLINE_EXCEEDED; entries
//!    whose client has gone are dropped, found before they would run or by a sweep of a few
//!    entries per step. Neither ever runs.
//! 2. Only entries with equal keys merge. A group's batch is its entries in arrival order, as
//!    many as fit in `max_batch_size` rows (and in `split_rows`, when set), stopping at the
//!    first that does not fit (so a large request is not overtaken forever by small ones),
//!    and no more requests than it may hold rows (requests of zero rows count as one).
//! 3. A group is cut when its batch is full (nothing queued or later could join it), when its
//!    oldest entry has waited `max_queue_delay`, or when the queue is closing (the batcher is
//!    stopping, or the server drains). Otherwise, if a prefix of the batch adds up to a
//!    preferred size, the longest such prefix is cut at once.
//! 4. An entry that cannot merge (no key, more rows than a batch, batching off) is ready at once.
//! 5. Of the ready batches, the one whose oldest entry arrived first runs.
//! 6. When every instance is busy but one can take a batch to start as soon as its run ends
//!    ([`Room::Behind`]), only the next batch in order is cut, and only if waiting could not
//!    grow it: it is full, or its request cannot merge. A batch cut early then loses no
//!    company, and no older group is overtaken.
//!
//! Priority: a high-priority entry is queued ahead of every default one (behind earlier
//! high-priority ones), so "arrival order" above means priority first, then arrival; and
//! [`BatchPolicy::admits`] lets high-priority requests into a reserve past `max_queue_size`.

use std::time::{Duration, Instant};

use super::priority::Priority;
use super::settings::{BatchSettings, MAX_QUEUE_SIZE};

/// The most pieces `split_rows` cuts one request into. Every piece takes a place in the queue
/// and a run, and all of them are queued at once; past a few thousand a request is better
/// sent in parts by its client (TF Serving refuses a request over its largest batch outright).
pub const MAX_PIECES: usize = 4096;

/// The settings the queue acts on, normalised so that any [`BatchSettings`] gives a working
/// policy (see [`BatchSettings::validate`] for the messages a config loader should show).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPolicy {
    /// At least 1; 1 means batching is off.
    max_batch_size: usize,
    max_queue_delay: Duration,
    /// Ascending, each between 1 and `max_batch_size`; empty when batching is off.
    preferred_batch_sizes: Vec<usize>,
    /// Between 1 and [`MAX_QUEUE_SIZE`].
    max_queue_size: usize,
    /// Most rows of one run, 0 for no bound past `max_batch_size`: larger requests are cut
    /// into pieces (`split.rs`), and no batch merges past it.
    split_rows: usize,
}

impl BatchPolicy {
    pub fn new(settings: &BatchSettings) -> Self {
        let max_batch_size = settings.max_batch_size.max(1);
        let mut preferred_batch_sizes: Vec<usize> = settings
            .preferred_batch_sizes
            .iter()
            .copied()
            .filter(|&size| max_batch_size > 1 && (1..=max_batch_size).contains(&size))
            .filter(|&size| settings.split_rows == 0 || size <= settings.split_rows)
            .collect();
        preferred_batch_sizes.sort_unstable();
        preferred_batch_sizes.dedup();
        Self {
            max_batch_size,
            max_queue_delay: settings.max_queue_delay(),
            preferred_batch_sizes,
            max_queue_size: settings.max_queue_size.clamp(1, MAX_QUEUE_SIZE),
            split_rows: settings.split_rows,
        }
    }

    /// The most rows a request may have and still run whole; `None` when any may.
    pub fn split_rows(&self) -> Option<usize> {
        (self.split_rows > 0).then_some(self.split_rows)
    }

    /// The most pieces one request may be cut into: [`MAX_PIECES`], and no more than the
    /// queue holds, since every piece is queued at once (a request that could never fit is
    /// refused as such, not as a full queue to retry).
    pub fn max_pieces(&self) -> usize {
        MAX_PIECES.min(self.max_queue_size)
    }

    /// Whether `count` more requests of `priority` may wait when `waiting` already do: the
    /// pieces of one request are admitted together or not at all.
    pub fn admits_all(&self, waiting: usize, count: usize, priority: Priority) -> bool {
        match count.checked_sub(1) {
            None => true,
            Some(more) => waiting
                .checked_add(more)
                .is_some_and(|last| self.admits(last, priority)),
        }
    }

    /// The most rows one batch merges.
    pub(super) fn merge_limit(&self) -> usize {
        match self.split_rows() {
            Some(split) => self.max_batch_size.min(split),
            None => self.max_batch_size,
        }
    }

    pub fn batching_enabled(&self) -> bool {
        self.max_batch_size > 1
    }

    pub fn max_batch_size(&self) -> usize {
        self.max_batch_size
    }

    pub fn max_queue_size(&self) -> usize {
        self.max_queue_size
    }

    /// How long the oldest request of a batch may wait for others to join it.
    pub fn max_queue_delay(&self) -> Duration {
        self.max_queue_delay
    }

    /// The batch sizes cut at once when the queue holds them, ascending.
    pub fn preferred_batch_sizes(&self) -> &[usize] {
        &self.preferred_batch_sizes
    }

    /// Places past `max_queue_size` that only high-priority requests may take: a quarter of
    /// the queue, at least one. A full queue of default requests then still admits urgent
    /// ones, and the total stays bounded.
    pub fn priority_reserve(&self) -> usize {
        (self.max_queue_size / 4).max(1)
    }

    /// The most requests that can ever wait at once, reserve included: the channel's bound.
    pub fn capacity(&self) -> usize {
        self.max_queue_size + self.priority_reserve()
    }

    /// Whether one more request of `priority` may wait when `waiting` already do.
    pub fn admits(&self, waiting: usize, priority: Priority) -> bool {
        match priority {
            Priority::Default => waiting < self.max_queue_size,
            Priority::High => waiting < self.capacity(),
        }
    }

    pub(super) fn is_preferred(&self, rows: usize) -> bool {
        self.preferred_batch_sizes.binary_search(&rows).is_ok()
    }
}

/// One waiting request, as the policy sees it.
#[derive(Debug)]
pub struct Queued<K, T> {
    /// Entries merge only with entries of an equal key; `None` never merges.
    pub key: Option<K>,
    /// Dimension 0 of the request's inputs.
    pub rows: usize,
    pub enqueued: Instant,
    pub deadline: Option<Instant>,
    pub priority: Priority,
    /// What the caller needs back to run and answer the request.
    pub item: T,
}

/// What the actor should do next.
#[derive(Debug)]
pub enum Next<K, T> {
    /// Run these entries as one batch, in this order.
    Run(Vec<Queued<K, T>>),
    /// Nothing is ready; step again at this instant (or when a request arrives).
    WakeAt(Instant),
    /// Nothing is ready and no time will change that; wait for a request.
    Idle,
}

/// What the actor could start when it steps the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// An instance is free: the next ready batch is cut.
    Free,
    /// Every instance is busy, but one can take a batch to start the moment its run ends
    /// (see rule 6 in the module documentation).
    Behind,
    /// Nothing can start.
    None,
}

/// The answer of one [`BatchQueue::step`](super::queue::BatchQueue::step).
#[derive(Debug)]
pub struct Step<K, T> {
    /// Past their deadline: answer them, do not run them.
    pub expired: Vec<T>,
    /// Their client has gone: drop them.
    pub abandoned: Vec<T>,
    pub next: Next<K, T>,
}

#[cfg(test)]
mod tests;
