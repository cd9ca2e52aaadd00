//! One key's waiting entries and the batch they would make now, kept up to date as entries
//! come and go, so that deciding whether the group is ready never walks the queue.

use std::collections::{BTreeMap, BTreeSet};

use super::place::Place;
use crate::batcher::policy::{BatchPolicy, Queued};

/// The entries of one key, in line, and their next batch: the longest prefix that fits.
#[derive(Debug, Default)]
pub(super) struct Group {
    pub(super) members: BTreeSet<Place>,
    /// How many of the first members make the next batch (at least 1 while any wait).
    pub(super) batch: usize,
    rows: usize,
    /// Nothing queued or later could join the batch: it holds the most rows or requests a
    /// batch may, or the member after it does not fit (it may not be overtaken).
    pub(super) full: bool,
    /// The longest prefix of the batch whose rows are a preferred size (0: none).
    pub(super) preferred: usize,
    /// The batch's last member, and the first member past it: removing either, or a member
    /// in between, changes the batch; removing a later one cannot.
    last: Option<Place>,
    edge: Option<Place>,
}

impl Group {
    /// Adds `place`, of `rows` rows. Behind every member (the usual case) it joins the batch
    /// if it fits; ahead of some (high priority) the batch changes from there on, and `false`
    /// says the caller must recount.
    pub(super) fn append(&mut self, place: Place, rows: usize, policy: &BatchPolicy) -> bool {
        if self.members.last().is_some_and(|&last| last > place) {
            self.members.insert(place);
            return false;
        }
        self.members.insert(place);
        if !self.full {
            self.join(place, rows, policy);
        }
        true
    }

    /// Whether removing `place` can change the batch.
    pub(super) fn affects_batch(&self, place: Place) -> bool {
        self.last.is_some_and(|last| place <= last) || self.edge == Some(place)
    }

    /// Works the batch out again from the first member; returns how many entries it looked
    /// at (at most one more than a batch holds).
    pub(super) fn recount<K, T>(
        &mut self,
        entries: &BTreeMap<Place, Queued<K, T>>,
        policy: &BatchPolicy,
    ) -> u64 {
        self.batch = 0;
        self.rows = 0;
        self.full = false;
        self.preferred = 0;
        self.last = None;
        self.edge = None;
        let mut examined = 0;
        // Taken out while walked, since `join` changes the rest of the group.
        let members = std::mem::take(&mut self.members);
        for &place in &members {
            examined += 1;
            let rows = entries.get(&place).map_or(0, |entry| entry.rows);
            self.join(place, rows, policy);
            if self.full {
                break;
            }
        }
        self.members = members;
        examined
    }

    /// Adds the member at `place` to a batch that is not full, or marks the batch full
    /// when it does not fit.
    fn join(&mut self, place: Place, rows: usize, policy: &BatchPolicy) {
        let limit = policy.merge_limit();
        let Some(total) = self.rows.checked_add(rows).filter(|&total| total <= limit) else {
            self.full = true;
            self.edge = Some(place);
            return;
        };
        self.rows = total;
        self.batch += 1;
        self.last = Some(place);
        if policy.is_preferred(total) {
            self.preferred = self.batch;
        }
        // A batch also holds at most `limit` requests: requests of zero rows would
        // otherwise make a batch of any length.
        if total == limit || self.batch == limit {
            self.full = true;
        }
    }
}
