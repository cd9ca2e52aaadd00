//! The waiting requests of one model version, kept so that one [`BatchQueue::step`] costs the
//! same however long the queue is: the rules it applies are in policy.rs.
//!
//! A step used to walk the whole queue twice (for entries to drop, then for the earliest
//! deadline), and once more per group; a request cut into thousands of pieces then made each
//! step, and the run of all its pieces, cost the square of their number. Now:
//! - deadlines are kept in order, so the expired are taken from the front and the next
//!   deadline is the first;
//! - each key's entries form a group whose next batch is kept up to date as entries come and
//!   go (group.rs), and the groups' first entries are kept in line order, split into those
//!   ready to cut and those waiting, the latter by when their delay runs out; so the next
//!   batch is the first ready one, after moving in those whose delay has run out;
//! - a client that went away is found when its entry is about to run (it is then dropped
//!   instead), or by a sweep that looks at a few entries per step, in turn, so that a queue
//!   of abandoned entries empties without any step walking it.
//!
//! Each step thus costs a constant (the sweep, the batch it cuts and the recount of that
//! group) and a logarithm of the length per entry it adds or removes; [`BatchQueue::examined`]
//! counts the entries looked at, which the tests hold to that.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::ops::Bound;
use std::time::Instant;

use super::policy::{BatchPolicy, Next, Queued, Room, Step};
use group::Group;
use place::Place;
use schedule::Schedule;

mod group;
mod place;
mod schedule;
#[cfg(test)]
mod tests;

/// How many entries each step asks about their client, besides those it is about to run.
const SWEEP: usize = 16;

/// The waiting requests of one model version, in line.
#[derive(Debug)]
pub struct BatchQueue<K, T> {
    policy: BatchPolicy,
    /// No request will arrive any more, or the server is draining: waiting for company is
    /// pointless, every group is ready at once.
    closing: bool,
    arrivals: u64,
    entries: BTreeMap<Place, Queued<K, T>>,
    groups: HashMap<K, Group>,
    /// Each group's first entry, and every entry that cannot merge: where a batch starts.
    leaders: BTreeSet<Place>,
    /// Which leaders may be cut now, and when the others may.
    schedule: Schedule,
    deadlines: BTreeSet<(Instant, Place)>,
    /// The last entry the sweep asked about.
    swept: Option<Place>,
    examined: u64,
}

impl<K: Eq + Hash + Clone, T> BatchQueue<K, T> {
    pub fn new(policy: BatchPolicy) -> Self {
        Self {
            policy,
            closing: false,
            arrivals: 0,
            entries: BTreeMap::new(),
            groups: HashMap::new(),
            leaders: BTreeSet::new(),
            schedule: Schedule::default(),
            deadlines: BTreeSet::new(),
            swept: None,
            examined: 0,
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

    /// How many times an entry has been looked at since the queue was made: its rows, its
    /// client or its deadline. The measure of a step's work, for tests and profiles.
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// Queues `entry`, taking away its key when it cannot merge under this policy. A
    /// high-priority entry goes behind the last high-priority one, ahead of default ones.
    pub fn push(&mut self, mut entry: Queued<K, T>) {
        if !self.policy.batching_enabled() || entry.rows > self.policy.merge_limit() {
            entry.key = None;
        }
        let place = Place::new(entry.priority, self.arrivals);
        self.arrivals += 1;
        self.examined += 1;
        if let Some(deadline) = entry.deadline {
            self.deadlines.insert((deadline, place));
        }
        let Some(key) = &entry.key else {
            self.entries.insert(place, entry);
            self.leaders.insert(place);
            self.schedule.ready(place);
            return;
        };
        let old_leader = self.first_of(key);
        if old_leader.is_none() {
            self.groups.insert(key.clone(), Group::default());
        }
        if let Some(leader) = old_leader {
            self.unfile(leader);
        }
        let rows = entry.rows;
        self.entries.insert(place, entry);
        let Some(group) = self
            .entries
            .get(&place)
            .and_then(|entry| entry.key.as_ref())
            .and_then(|key| self.groups.get_mut(key))
        else {
            return;
        };
        if !group.append(place, rows, &self.policy) {
            self.examined += group.recount(&self.entries, &self.policy);
        }
        let leader = group.members.first().copied();
        if let Some(old) = old_leader {
            self.leaders.remove(&old);
        }
        if let Some(leader) = leader {
            self.leaders.insert(leader);
            self.file(leader);
        }
    }

    /// From now on every group is ready at once: the queue is being drained.
    pub fn close(&mut self) {
        if self.closing {
            return;
        }
        self.closing = true;
        self.schedule.all_ready(self.leaders.iter().copied());
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
        let past: Vec<Place> = self
            .deadlines
            .iter()
            .take_while(|&&(deadline, _)| deadline <= now)
            .map(|&(_, place)| place)
            .collect();
        for entry in self.remove_all(&past) {
            if is_abandoned(&entry.item) {
                abandoned.push(entry.item);
            } else {
                expired.push(entry.item);
            }
        }
        self.sweep(&is_abandoned, &mut abandoned);
        let next = match room {
            Room::Free => self.next(now, &is_abandoned, &mut abandoned),
            Room::Behind => self.next_that_cannot_grow(&is_abandoned, &mut abandoned),
            Room::None => wake_or_idle(self.earliest_deadline()),
        };
        Step {
            expired,
            abandoned,
            next,
        }
    }

    fn earliest_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(deadline, _)| deadline)
    }

    /// Asks about the client of the next [`SWEEP`] entries after the last one asked about,
    /// going round to the front, and drops those that went away.
    fn sweep(&mut self, is_abandoned: &impl Fn(&T) -> bool, abandoned: &mut Vec<T>) {
        let (after, before) = match self.swept {
            Some(place) => (Bound::Excluded(place), Bound::Included(place)),
            // The first round starts at the front and has nothing to go round to.
            None => (Bound::Unbounded, Bound::Excluded(Place::FRONT)),
        };
        let mut asked = Vec::with_capacity(SWEEP.min(self.entries.len()));
        let round = self
            .entries
            .range((after, Bound::Unbounded))
            .chain(self.entries.range((Bound::Unbounded, before)));
        for (&place, entry) in round.take(SWEEP) {
            asked.push((place, is_abandoned(&entry.item)));
        }
        self.examined += asked.len() as u64;
        self.swept = asked.last().map(|&(place, _)| place);
        let gone: Vec<Place> = asked
            .into_iter()
            .filter_map(|(place, gone)| gone.then_some(place))
            .collect();
        abandoned.extend(self.remove_all(&gone).into_iter().map(|entry| entry.item));
    }

    fn next(
        &mut self,
        now: Instant,
        is_abandoned: &impl Fn(&T) -> bool,
        abandoned: &mut Vec<T>,
    ) -> Next<K, T> {
        while let Some(leader) = self.schedule.first_ready(now) {
            let count = self.cut_size(leader, now);
            if let Some(batch) = self.cut(leader, count, is_abandoned, abandoned) {
                return Next::Run(batch);
            }
        }
        wake_or_idle(earliest(self.earliest_deadline(), self.schedule.next_due()))
    }

    /// The next batch in order if waiting could not grow it (rule 6), else the wake-up for
    /// the next deadline.
    fn next_that_cannot_grow(
        &mut self,
        is_abandoned: &impl Fn(&T) -> bool,
        abandoned: &mut Vec<T>,
    ) -> Next<K, T> {
        while let Some(&leader) = self.leaders.first() {
            let count = match self.group_of(leader) {
                None => 1,
                Some(group) if group.full => group.batch,
                Some(_) => break,
            };
            if let Some(batch) = self.cut(leader, count, is_abandoned, abandoned) {
                return Next::Run(batch);
            }
        }
        wake_or_idle(self.earliest_deadline())
    }

    /// How many entries the batch led by `leader`, which is ready, takes now: all of it when
    /// it is full, past its delay or the queue closes, else its preferred prefix.
    fn cut_size(&self, leader: Place, now: Instant) -> usize {
        let Some(group) = self.group_of(leader) else {
            return 1;
        };
        let due = self.due(leader);
        if group.full || self.closing || due.is_some_and(|due| due <= now) || group.preferred == 0 {
            group.batch
        } else {
            group.preferred
        }
    }

    /// Takes the first `count` entries led by `leader`, unless one of their clients went
    /// away: those are dropped into `abandoned` instead and `None` says to choose again.
    fn cut(
        &mut self,
        leader: Place,
        count: usize,
        is_abandoned: &impl Fn(&T) -> bool,
        abandoned: &mut Vec<T>,
    ) -> Option<Vec<Queued<K, T>>> {
        let members: Vec<Place> = match self.group_of(leader) {
            Some(group) => group.members.iter().take(count).copied().collect(),
            None => vec![leader],
        };
        self.examined += members.len() as u64;
        let gone: Vec<Place> = members
            .iter()
            .copied()
            .filter(|place| {
                self.entries
                    .get(place)
                    .is_some_and(|entry| is_abandoned(&entry.item))
            })
            .collect();
        if gone.is_empty() {
            return Some(self.remove_all(&members));
        }
        abandoned.extend(self.remove_all(&gone).into_iter().map(|entry| entry.item));
        None
    }

    /// Takes the entries at `places` out of the queue and out of every index, in that order
    /// (skipping any not queued). Each group touched is worked out again once, at the end.
    fn remove_all(&mut self, places: &[Place]) -> Vec<Queued<K, T>> {
        // The groups touched, and whether their batch changed.
        let mut touched: HashMap<K, bool> = HashMap::new();
        let mut removed = Vec::with_capacity(places.len());
        for &place in places {
            let Some(entry) = self.entries.remove(&place) else {
                continue;
            };
            self.examined += 1;
            if let Some(deadline) = entry.deadline {
                self.deadlines.remove(&(deadline, place));
            }
            match &entry.key {
                // Never waiting: it is ready from the start.
                None => {
                    self.schedule.unfile(place, None);
                    self.leaders.remove(&place);
                }
                Some(key) => {
                    if !touched.contains_key(key) {
                        if let Some(leader) = self.first_of(key) {
                            let due = if leader == place {
                                self.due_of(&entry)
                            } else {
                                self.due(leader)
                            };
                            self.schedule.unfile(leader, due);
                            self.leaders.remove(&leader);
                        }
                    }
                    let changed = self.groups.get_mut(key).is_some_and(|group| {
                        let changed = group.affects_batch(place);
                        group.members.remove(&place);
                        changed
                    });
                    match touched.get_mut(key) {
                        Some(touched) => *touched |= changed,
                        None => {
                            touched.insert(key.clone(), changed);
                        }
                    }
                }
            }
            removed.push(entry);
        }
        for (key, changed) in touched {
            let Some(group) = self.groups.get_mut(&key) else {
                continue;
            };
            let Some(leader) = group.members.first().copied() else {
                self.groups.remove(&key);
                continue;
            };
            if changed {
                self.examined += group.recount(&self.entries, &self.policy);
            }
            self.leaders.insert(leader);
            self.file(leader);
        }
        removed
    }

    fn first_of(&self, key: &K) -> Option<Place> {
        self.groups
            .get(key)
            .and_then(|group| group.members.first().copied())
    }

    /// Files `leader` as ready or waiting, as its batch and the queue now stand.
    fn file(&mut self, leader: Place) {
        let ready = self.closing
            || self
                .group_of(leader)
                .is_none_or(|group| group.full || group.preferred > 0);
        if ready {
            self.schedule.ready(leader);
        } else {
            let due = self.due(leader);
            self.schedule.wait(leader, due);
        }
    }

    /// Takes `leader` out of the schedule, before its group changes.
    fn unfile(&mut self, leader: Place) {
        let due = self.due(leader);
        self.schedule.unfile(leader, due);
    }

    /// When the delay of the entry at `place` runs out (`None`: too far to represent).
    fn due(&self, place: Place) -> Option<Instant> {
        self.entries
            .get(&place)
            .and_then(|entry| self.due_of(entry))
    }

    fn due_of(&self, entry: &Queued<K, T>) -> Option<Instant> {
        entry.enqueued.checked_add(self.policy.max_queue_delay())
    }

    /// The group the entry at `place` belongs to; `None` for an entry that cannot merge.
    fn group_of(&self, place: Place) -> Option<&Group> {
        let key = self.entries.get(&place)?.key.as_ref()?;
        self.groups.get(key)
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
