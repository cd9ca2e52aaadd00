//! What one step costs, counted in entries looked at ([`BatchQueue::examined`]) and clients
//! asked about: the same for a queue of 300 entries as for one of 30,000.
//! The behaviour of the steps is tested in policy/tests.rs.

use std::cell::Cell;
use std::time::Duration;

use super::*;
use crate::batcher::priority::Priority;
use crate::batcher::settings::{BatchSettings, MAX_QUEUE_SIZE};

const SHORT: usize = 300;
const LONG: usize = 30_000;
const HOUR: Duration = Duration::from_secs(3600);

/// The settings of the review's attack: every request alone (`max_batch_size = 1`), as a
/// request cut by `split_rows = 1` is, in a queue long enough to hold all of its pieces.
fn one_by_one() -> BatchPolicy {
    BatchPolicy::new(&BatchSettings {
        max_batch_size: 1,
        max_queue_size: MAX_QUEUE_SIZE,
        split_rows: 1,
        ..BatchSettings::default()
    })
}

fn batching(max_batch_size: usize) -> BatchPolicy {
    BatchPolicy::new(&BatchSettings {
        max_batch_size,
        max_queue_delay_us: 1_000,
        max_queue_size: MAX_QUEUE_SIZE,
        ..BatchSettings::default()
    })
}

fn entry(id: usize, key: Option<usize>, at: Instant, deadline: Instant) -> Queued<usize, usize> {
    Queued {
        key,
        rows: 1,
        enqueued: at,
        deadline: Some(deadline),
        priority: Priority::Default,
        item: id,
    }
}

/// What one step did: entries looked at, clients asked about, and its answer.
struct Cost {
    examined: u64,
    asked: usize,
    ran: Option<Vec<usize>>,
    expired: usize,
}

fn step(queue: &mut BatchQueue<usize, usize>, now: Instant, room: Room) -> Cost {
    let before = queue.examined();
    let asked = Cell::new(0);
    let step = queue.step(now, room, |_| {
        asked.set(asked.get() + 1);
        false
    });
    Cost {
        examined: queue.examined() - before,
        asked: asked.get(),
        ran: match step.next {
            Next::Run(batch) => Some(batch.into_iter().map(|entry| entry.item).collect()),
            _ => None,
        },
        expired: step.expired.len(),
    }
}

/// A queue of `len` entries, each alone (key `None`) or of a key of its own, all queued at
/// `t0` with a deadline an hour on, after one step has settled it.
fn filled(policy: BatchPolicy, len: usize, keys: bool, t0: Instant) -> BatchQueue<usize, usize> {
    let mut queue = BatchQueue::new(policy);
    for id in 0..len {
        queue.push(entry(id, keys.then_some(id), t0, t0 + HOUR));
    }
    queue.step(t0, Room::None, |_| false);
    queue
}

#[test]
fn a_step_costs_the_same_however_long_the_queue() {
    let t0 = Instant::now();
    let cost = |len| {
        let mut queue = filled(one_by_one(), len, false, t0);
        let free = step(&mut queue, t0, Room::Free);
        assert_eq!(free.ran, Some(vec![0]));
        let busy = step(&mut queue, t0, Room::None);
        assert_eq!(busy.ran, None);
        let behind = step(&mut queue, t0, Room::Behind);
        assert_eq!(behind.ran, Some(vec![1]));
        [free, busy, behind].map(|cost| (cost.examined, cost.asked))
    };
    let (short, long) = (cost(SHORT), cost(LONG));
    assert_eq!(short, long);
    // A few entries each: the sweep, and the one that runs.
    assert!(
        short
            .iter()
            .all(|&(examined, asked)| examined <= 20 && asked <= 20),
        "{short:?}"
    );
}

#[test]
fn a_step_over_many_waiting_groups_costs_the_same_however_many() {
    let t0 = Instant::now();
    let cost = |len| {
        // Every entry a group of its own, none ready until the delay runs out.
        let mut queue = filled(batching(8), len, true, t0);
        let waiting = step(&mut queue, t0, Room::Free);
        assert_eq!(waiting.ran, None);
        let due = step(&mut queue, t0 + Duration::from_millis(1), Room::Free);
        assert_eq!(due.ran, Some(vec![0]));
        [waiting, due].map(|cost| (cost.examined, cost.asked))
    };
    assert_eq!(cost(SHORT), cost(LONG));
}

#[test]
fn expiring_entries_cost_the_same_however_long_the_queue() {
    let t0 = Instant::now();
    let cost = |len| {
        let mut queue = filled(batching(8), len, false, t0);
        // Ten more, in one group, whose deadline passes first.
        for id in len..len + 10 {
            queue.push(entry(id, Some(0), t0, t0 + Duration::from_millis(1)));
        }
        let cost = step(&mut queue, t0 + Duration::from_millis(1), Room::None);
        assert_eq!(cost.expired, 10);
        assert_eq!(queue.len(), len);
        (cost.examined, cost.asked)
    };
    assert_eq!(cost(SHORT), cost(LONG));
}

#[test]
fn a_full_group_is_cut_at_the_cost_of_its_batch() {
    let t0 = Instant::now();
    let cost = |len| {
        // One group as long as the queue: each cut takes a batch of eight and works out the
        // next one, whatever follows.
        let mut queue = BatchQueue::new(batching(8));
        for id in 0..len {
            queue.push(entry(id, Some(0), t0, t0 + HOUR));
        }
        let first = step(&mut queue, t0, Room::Free);
        assert_eq!(first.ran, Some((0..8).collect()));
        let second = step(&mut queue, t0, Room::Free);
        assert_eq!(second.ran, Some((8..16).collect()));
        (second.examined, second.asked)
    };
    assert_eq!(cost(SHORT), cost(LONG));
}

#[test]
fn abandoned_entries_are_all_found_by_the_sweep_in_turn() {
    let t0 = Instant::now();
    let mut queue = filled(one_by_one(), 100, false, t0);
    let mut dropped = Vec::new();
    // Every client has gone; no instance is free, so only the sweep finds them.
    for _ in 0..100_usize.div_ceil(SWEEP) {
        let step = queue.step(t0, Room::None, |_| true);
        assert!(step.abandoned.len() <= SWEEP);
        dropped.extend(step.abandoned);
    }
    dropped.sort_unstable();
    assert_eq!(dropped, (0..100).collect::<Vec<_>>());
    assert!(queue.is_empty());
}

#[test]
fn a_gone_client_is_dropped_before_its_batch_runs() {
    let t0 = Instant::now();
    let mut queue = BatchQueue::new(batching(4));
    for id in 0..40 {
        queue.push(entry(id, Some(0), t0, t0 + HOUR));
    }
    // The first step's sweep asks about the first sixteen; the next one's about the sixteen
    // after, so entry 1 is found gone only as its batch is about to run.
    let first = step(&mut queue, t0, Room::None);
    assert_eq!(first.asked, SWEEP);
    let step = queue.step(t0, Room::Free, |&id| id == 1);
    let Next::Run(batch) = step.next else {
        panic!("expected a batch");
    };
    let ran: Vec<usize> = batch.into_iter().map(|entry| entry.item).collect();
    assert_eq!(ran, vec![0, 2, 3, 4]);
    assert_eq!(step.abandoned, vec![1]);
}
