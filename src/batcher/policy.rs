//! When to cut a batch, decided by a plain synchronous struct so that every rule is tested
//! without a runtime or a clock: the actor passes `now` in and acts on the answer.
//!
//! The rules, applied on every [`BatchQueue::step`]:
//! 1. Entries whose client has gone are dropped; entries past their deadline are handed back
//!    to be answered DEADLINE_EXCEEDED. Neither ever runs.
//! 2. Only entries with equal keys merge. A group's batch is its entries in arrival order, as
//!    many as fit in `max_batch_size` rows (and in `split_rows`, when set), stopping at the
//!    first that does not fit (so a large request is not overtaken forever by small ones).
//! 3. A group is cut when its batch is full (nothing queued or later could join it), when its
//!    oldest entry has waited `max_queue_delay`, or when the queue is closing. Otherwise, if a
//!    prefix of the batch adds up to a preferred size, the longest such prefix is cut at once.
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

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::priority::Priority;
use super::settings::{BatchSettings, MAX_QUEUE_SIZE};

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

    /// The most rows one batch merges.
    fn merge_limit(&self) -> usize {
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

    fn is_preferred(&self, rows: usize) -> bool {
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

impl<K, T> Queued<K, T> {
    fn is_expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|deadline| deadline <= now)
    }
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

/// The answer of one [`BatchQueue::step`].
#[derive(Debug)]
pub struct Step<K, T> {
    /// Past their deadline: answer them, do not run them.
    pub expired: Vec<T>,
    /// Their client has gone: drop them.
    pub abandoned: Vec<T>,
    pub next: Next<K, T>,
}

/// The waiting requests of one model version, in arrival order.
#[derive(Debug)]
pub struct BatchQueue<K, T> {
    policy: BatchPolicy,
    entries: VecDeque<Queued<K, T>>,
    /// No request will arrive any more, so waiting for company is pointless.
    closing: bool,
}

/// How a group stands.
enum Plan {
    /// Cut these entry indices (ascending) now.
    Cut(Vec<usize>),
    /// Not ready; due at this instant (`None`: the delay is too long to represent).
    Wait(Option<Instant>),
}

impl<K: PartialEq, T> BatchQueue<K, T> {
    pub fn new(policy: BatchPolicy) -> Self {
        Self {
            policy,
            entries: VecDeque::new(),
            closing: false,
        }
    }

    pub fn policy(&self) -> &BatchPolicy {
        &self.policy
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Queues `entry`, taking away its key when it cannot merge under this policy. A
    /// high-priority entry goes behind the last high-priority one, ahead of default ones.
    pub fn push(&mut self, mut entry: Queued<K, T>) {
        if !self.policy.batching_enabled() || entry.rows > self.policy.merge_limit() {
            entry.key = None;
        }
        match entry.priority {
            Priority::Default => self.entries.push_back(entry),
            Priority::High => {
                // Entries are kept sorted by priority, so the boundary is a binary search.
                let at = self
                    .entries
                    .partition_point(|queued| queued.priority == Priority::High);
                self.entries.insert(at, entry);
            }
        }
    }

    /// From now on every group is ready at once: the queue is being drained.
    pub fn close(&mut self) {
        self.closing = true;
    }

    /// Drops what must not run, then says what to run or when to look again. With
    /// [`Room::None`] (every instance is running a batch) nothing is cut, and with it and
    /// [`Room::Behind`] the wake-up is the next request deadline (no instance frees up on a
    /// timer), so that expired requests are answered on time even then.
    pub fn step(
        &mut self,
        now: Instant,
        room: Room,
        is_abandoned: impl Fn(&T) -> bool,
    ) -> Step<K, T> {
        let mut expired = Vec::new();
        let mut abandoned = Vec::new();
        // Most steps drop nothing; only rebuild the queue when something goes.
        if self
            .entries
            .iter()
            .any(|entry| is_abandoned(&entry.item) || entry.is_expired(now))
        {
            let mut kept = VecDeque::with_capacity(self.entries.len());
            for entry in self.entries.drain(..) {
                if is_abandoned(&entry.item) {
                    abandoned.push(entry.item);
                } else if entry.is_expired(now) {
                    expired.push(entry.item);
                } else {
                    kept.push_back(entry);
                }
            }
            self.entries = kept;
        }
        let next = match room {
            Room::Free => self.next(now),
            Room::Behind => self.next_that_cannot_grow(),
            Room::None => wake_or_idle(self.earliest_deadline()),
        };
        Step {
            expired,
            abandoned,
            next,
        }
    }

    fn earliest_deadline(&self) -> Option<Instant> {
        self.entries.iter().filter_map(|entry| entry.deadline).min()
    }

    fn next(&mut self, now: Instant) -> Next<K, T> {
        let mut wake = self.earliest_deadline();
        // Index of the first entry of each group seen so far: each group is planned once,
        // oldest group first.
        let mut leaders: Vec<usize> = Vec::new();
        for first in 0..self.entries.len() {
            let Some(entry) = self.entries.get(first) else {
                break;
            };
            let Some(key) = &entry.key else {
                return Next::Run(self.take(&[first]));
            };
            let seen = leaders.iter().any(|&leader| {
                self.entries
                    .get(leader)
                    .is_some_and(|other| other.key.as_ref() == Some(key))
            });
            if seen {
                continue;
            }
            leaders.push(first);
            match self.plan(first, key, entry.enqueued, now) {
                Plan::Cut(indices) => return Next::Run(self.take(&indices)),
                Plan::Wait(due) => wake = earliest(wake, due),
            }
        }
        wake_or_idle(wake)
    }

    /// The next batch in order if waiting could not grow it (rule 6), else the wake-up for
    /// the next deadline.
    fn next_that_cannot_grow(&mut self) -> Next<K, T> {
        let Some(first) = self.entries.front() else {
            return Next::Idle;
        };
        let Some(key) = &first.key else {
            return Next::Run(self.take(&[0]));
        };
        let (members, full) = self.members(0, key);
        if full {
            return Next::Run(self.take(&members));
        }
        wake_or_idle(self.earliest_deadline())
    }

    /// The entry indices (ascending) of the batch of the group whose oldest entry is at
    /// `first`, and whether that batch is full: nothing queued or later could join it.
    fn members(&self, first: usize, key: &K) -> (Vec<usize>, bool) {
        let max = self.policy.merge_limit();
        let mut members = Vec::new();
        let mut rows = 0usize;
        for (index, entry) in self.entries.iter().enumerate().skip(first) {
            if entry.key.as_ref() != Some(key) {
                continue;
            }
            let Some(total) = rows.checked_add(entry.rows).filter(|&total| total <= max) else {
                return (members, true);
            };
            rows = total;
            members.push(index);
            if rows == max {
                return (members, true);
            }
        }
        (members, false)
    }

    /// The batch of the group whose oldest entry is at `first`, and whether it is ready.
    fn plan(&self, first: usize, key: &K, oldest: Instant, now: Instant) -> Plan {
        // `members` is never empty: push() keeps only entries of at most `merge_limit()`
        // rows mergeable, so the group's first entry always fits.
        let (mut members, full) = self.members(first, key);
        let due = oldest.checked_add(self.policy.max_queue_delay);
        if full || self.closing || due.is_some_and(|due| due <= now) {
            return Plan::Cut(members);
        }
        let mut rows = 0usize;
        let mut preferred_len = 0;
        for (at, &index) in members.iter().enumerate() {
            rows = rows.saturating_add(self.entries.get(index).map_or(0, |entry| entry.rows));
            if self.policy.is_preferred(rows) {
                preferred_len = at + 1;
            }
        }
        if preferred_len > 0 {
            members.truncate(preferred_len);
            return Plan::Cut(members);
        }
        Plan::Wait(due)
    }

    /// Removes the entries at `indices` (ascending) and returns them in that order.
    fn take(&mut self, indices: &[usize]) -> Vec<Queued<K, T>> {
        let is_prefix = indices.iter().enumerate().all(|(at, &index)| at == index);
        if is_prefix {
            let count = indices.len().min(self.entries.len());
            return self.entries.drain(..count).collect();
        }
        let mut taken = Vec::with_capacity(indices.len());
        let mut kept = VecDeque::with_capacity(self.entries.len());
        let mut wanted = indices.iter().copied().peekable();
        for (index, entry) in self.entries.drain(..).enumerate() {
            if wanted.next_if_eq(&index).is_some() {
                taken.push(entry);
            } else {
                kept.push_back(entry);
            }
        }
        self.entries = kept;
        taken
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn wake_or_idle<K, T>(wake: Option<Instant>) -> Next<K, T> {
    match wake {
        Some(at) => Next::WakeAt(at),
        None => Next::Idle,
    }
}

#[cfg(test)]
mod tests;
