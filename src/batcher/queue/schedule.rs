//! Which batches may be cut now, and when the others may: the leaders of the queue's batches
//! in two ordered sets, so that the next batch to cut and the next wake-up are each the first
//! of one.

use std::collections::BTreeSet;
use std::time::Instant;

use super::place::Place;

#[derive(Debug, Default)]
pub(super) struct Schedule {
    /// Leaders whose batch may be cut now, in line.
    ready: BTreeSet<Place>,
    /// The other leaders, by when the delay of their first entry runs out. A leader whose
    /// delay cannot be represented is in neither set until its batch is ready for another
    /// reason (it fills, or the queue closes).
    waiting: BTreeSet<(Instant, Place)>,
}

impl Schedule {
    pub(super) fn ready(&mut self, leader: Place) {
        self.ready.insert(leader);
    }

    /// Files `leader` to become ready at `due`.
    pub(super) fn wait(&mut self, leader: Place, due: Option<Instant>) {
        if let Some(due) = due {
            self.waiting.insert((due, leader));
        }
    }

    /// Takes `leader`, filed as waiting until `due` or as ready, out of the schedule.
    pub(super) fn unfile(&mut self, leader: Place, due: Option<Instant>) {
        if !self.ready.remove(&leader) {
            if let Some(due) = due {
                self.waiting.remove(&(due, leader));
            }
        }
    }

    /// The first leader in line that is ready by `now`, those whose delay has run out moved
    /// to the ready ones first.
    pub(super) fn first_ready(&mut self, now: Instant) -> Option<Place> {
        while let Some(&(due, leader)) = self.waiting.first() {
            if due > now {
                break;
            }
            self.waiting.remove(&(due, leader));
            self.ready.insert(leader);
        }
        self.ready.first().copied()
    }

    /// When the next waiting leader becomes ready.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.waiting.first().map(|&(due, _)| due)
    }

    /// Every one of `leaders` is ready from now on.
    pub(super) fn all_ready(&mut self, leaders: impl IntoIterator<Item = Place>) {
        self.waiting.clear();
        self.ready.extend(leaders);
    }
}
