use super::*;
use crate::batcher::queue::BatchQueue;

const DELAY: Duration = Duration::from_millis(10);

fn settings(max_batch_size: usize, preferred: &[usize]) -> BatchSettings {
    BatchSettings {
        max_batch_size,
        max_queue_delay_us: u64::try_from(DELAY.as_micros()).unwrap(),
        preferred_batch_sizes: preferred.to_vec(),
        max_queue_size: 100,
        split_rows: 0,
    }
}

fn queue(max_batch_size: usize, preferred: &[usize]) -> BatchQueue<char, u32> {
    BatchQueue::new(BatchPolicy::new(&settings(max_batch_size, preferred)))
}

/// Entry `id` of group `key` (`None`: cannot merge) with `rows` rows, queued at `at`.
fn entry(id: u32, key: Option<char>, rows: usize, at: Instant) -> Queued<char, u32> {
    Queued {
        key,
        rows,
        enqueued: at,
        deadline: None,
        priority: Priority::Default,
        item: id,
    }
}

fn push_all(
    queue: &mut BatchQueue<char, u32>,
    entries: &[(u32, Option<char>, usize)],
    at: Instant,
) {
    for &(id, key, rows) in entries {
        queue.push(entry(id, key, rows, at));
    }
}

/// Steps with an instance free and nothing abandoned; returns the ids to run, or the wake-up.
fn step(queue: &mut BatchQueue<char, u32>, now: Instant) -> Result<Vec<u32>, Option<Instant>> {
    step_in(queue, now, Room::Free)
}

/// Steps for a batch to start behind a running one (see [`step`]).
fn step_behind(
    queue: &mut BatchQueue<char, u32>,
    now: Instant,
) -> Result<Vec<u32>, Option<Instant>> {
    step_in(queue, now, Room::Behind)
}

fn step_in(
    queue: &mut BatchQueue<char, u32>,
    now: Instant,
    room: Room,
) -> Result<Vec<u32>, Option<Instant>> {
    match queue.step(now, room, |_| false).next {
        Next::Run(batch) => Ok(batch.into_iter().map(|entry| entry.item).collect()),
        Next::WakeAt(at) => Err(Some(at)),
        Next::Idle => Err(None),
    }
}

#[test]
fn a_full_batch_is_cut_at_once() {
    let t0 = Instant::now();
    let mut queue = queue(4, &[]);
    push_all(
        &mut queue,
        &[(1, Some('a'), 1), (2, Some('a'), 1), (3, Some('a'), 2)],
        t0,
    );
    assert_eq!(step(&mut queue, t0), Ok(vec![1, 2, 3]));
    assert!(queue.is_empty());
    assert_eq!(step(&mut queue, t0), Err(None));
}

#[test]
fn a_request_that_does_not_fit_closes_the_batch() {
    let t0 = Instant::now();
    let mut queue = queue(4, &[]);
    push_all(
        &mut queue,
        &[(1, Some('a'), 3), (2, Some('a'), 2), (3, Some('a'), 1)],
        t0,
    );
    // 3 + 2 overflows: the batch cannot grow, and 3 may not jump ahead of 2.
    assert_eq!(step(&mut queue, t0), Ok(vec![1]));
    assert_eq!(step(&mut queue, t0), Err(Some(t0 + DELAY)));
    assert_eq!(step(&mut queue, t0 + DELAY), Ok(vec![2, 3]));
}

#[test]
fn waits_for_the_delay_of_the_oldest_entry() {
    let t0 = Instant::now();
    let mut queue = queue(8, &[]);
    queue.push(entry(1, Some('a'), 1, t0));
    assert_eq!(step(&mut queue, t0), Err(Some(t0 + DELAY)));
    queue.push(entry(2, Some('a'), 1, t0 + DELAY / 2));
    assert_eq!(step(&mut queue, t0 + DELAY / 2), Err(Some(t0 + DELAY)));
    assert_eq!(step(&mut queue, t0 + DELAY), Ok(vec![1, 2]));
}

#[test]
fn zero_delay_cuts_whatever_is_queued() {
    let t0 = Instant::now();
    let mut queue = BatchQueue::new(BatchPolicy::new(&BatchSettings {
        max_batch_size: 8,
        ..BatchSettings::default()
    }));
    push_all(&mut queue, &[(1, Some('a'), 1), (2, Some('a'), 1)], t0);
    assert_eq!(step(&mut queue, t0), Ok(vec![1, 2]));
}

#[test]
fn preferred_sizes_cut_the_largest_reachable_one_early() {
    let t0 = Instant::now();
    let mut queue = queue(8, &[2, 4]);
    let ones: Vec<_> = (1..=5).map(|id| (id, Some('a'), 1)).collect();
    push_all(&mut queue, &ones, t0);
    assert_eq!(step(&mut queue, t0), Ok(vec![1, 2, 3, 4]));
    // One row left: not a preferred size, so it waits for the delay.
    assert_eq!(step(&mut queue, t0), Err(Some(t0 + DELAY)));
    assert_eq!(step(&mut queue, t0 + DELAY), Ok(vec![5]));
}

#[test]
fn preferred_sizes_count_rows_not_requests() {
    let t0 = Instant::now();
    let mut queue = queue(8, &[4]);
    push_all(&mut queue, &[(1, Some('a'), 3), (2, Some('a'), 3)], t0);
    // 3 and 6 rows: no prefix is 4 rows, so nothing is cut before the delay.
    assert_eq!(step(&mut queue, t0), Err(Some(t0 + DELAY)));
    queue.push(entry(3, Some('a'), 1, t0));
    assert_eq!(step(&mut queue, t0), Err(Some(t0 + DELAY)));
    let mut queue = queue_with(&[(1, 3), (2, 1), (3, 3)], t0);
    assert_eq!(step(&mut queue, t0), Ok(vec![1, 2]));
}

fn queue_with(rows: &[(u32, usize)], at: Instant) -> BatchQueue<char, u32> {
    let mut queue = queue(8, &[4]);
    for &(id, rows) in rows {
        queue.push(entry(id, Some('a'), rows, at));
    }
    queue
}

#[test]
fn different_keys_never_merge() {
    let t0 = Instant::now();
    let mut queue = queue(2, &[]);
    push_all(
        &mut queue,
        &[
            (1, Some('a'), 1),
            (2, Some('b'), 1),
            (3, Some('a'), 1),
            (4, Some('b'), 1),
        ],
        t0,
    );
    assert_eq!(step(&mut queue, t0), Ok(vec![1, 3]));
    assert_eq!(step(&mut queue, t0), Ok(vec![2, 4]));
}

#[test]
fn a_ready_younger_group_runs_before_a_waiting_older_one() {
    let t0 = Instant::now();
    let mut queue = queue(2, &[]);
    push_all(
        &mut queue,
        &[(1, Some('a'), 1), (2, Some('b'), 1), (3, Some('b'), 1)],
        t0,
    );
    assert_eq!(step(&mut queue, t0), Ok(vec![2, 3]));
    assert_eq!(step(&mut queue, t0), Err(Some(t0 + DELAY)));
}

#[test]
fn unbatchable_and_oversized_requests_run_alone_at_once() {
    let t0 = Instant::now();
    let mut queue = queue(4, &[]);
    push_all(
        &mut queue,
        &[(1, Some('a'), 1), (2, None, 1), (3, Some('a'), 5)],
        t0,
    );
    assert_eq!(step(&mut queue, t0), Ok(vec![2]));
    assert_eq!(step(&mut queue, t0), Ok(vec![3]));
    assert_eq!(step(&mut queue, t0), Err(Some(t0 + DELAY)));
}

#[test]
fn batching_off_runs_each_request_alone_in_order() {
    let t0 = Instant::now();
    for max in [0, 1] {
        let mut queue = queue(max, &[1]);
        push_all(
            &mut queue,
            &[(1, Some('a'), 1), (2, Some('a'), 1), (3, Some('a'), 1)],
            t0,
        );
        for id in 1..=3 {
            assert_eq!(step(&mut queue, t0), Ok(vec![id]), "max_batch_size {max}");
        }
    }
}

#[test]
fn expired_and_abandoned_entries_are_handed_back_not_run() {
    let t0 = Instant::now();
    let mut queue = queue(4, &[]);
    queue.push(Queued {
        deadline: Some(t0 + Duration::from_millis(1)),
        ..entry(1, Some('a'), 1, t0)
    });
    push_all(&mut queue, &[(2, Some('a'), 1), (3, Some('a'), 1)], t0);
    let step = queue.step(t0 + DELAY, Room::Free, |&id| id == 3);
    assert_eq!(step.expired, vec![1]);
    assert_eq!(step.abandoned, vec![3]);
    let Next::Run(batch) = step.next else {
        panic!("expected a batch");
    };
    assert_eq!(
        batch.iter().map(|entry| entry.item).collect::<Vec<_>>(),
        vec![2]
    );
}

#[test]
fn a_request_deadline_earlier_than_the_delay_wakes_the_actor() {
    let t0 = Instant::now();
    let mut queue = queue(4, &[]);
    let deadline = t0 + DELAY / 4;
    queue.push(Queued {
        deadline: Some(deadline),
        ..entry(1, Some('a'), 1, t0)
    });
    assert_eq!(step(&mut queue, t0), Err(Some(deadline)));
    let step = queue.step(deadline, Room::Free, |_| false);
    assert_eq!(step.expired, vec![1]);
    assert!(matches!(step.next, Next::Idle));
}

#[test]
fn while_busy_only_drops_and_wakes_for_deadlines() {
    let t0 = Instant::now();
    let mut queue = queue(4, &[]);
    push_all(&mut queue, &[(1, None, 1), (2, Some('a'), 4)], t0);
    assert!(matches!(
        queue.step(t0, Room::None, |_| false).next,
        Next::Idle
    ));
    let deadline = t0 + Duration::from_secs(1);
    queue.push(Queued {
        deadline: Some(deadline),
        ..entry(3, Some('b'), 1, t0)
    });
    assert!(
        matches!(queue.step(t0, Room::None, |_| false).next, Next::WakeAt(at) if at == deadline)
    );
    assert_eq!(queue.len(), 3);
    let step = queue.step(deadline, Room::None, |&id| id == 1);
    assert_eq!((step.expired, step.abandoned), (vec![3], vec![1]));
    assert_eq!(queue.len(), 1);
}

#[test]
fn behind_a_run_only_a_batch_that_cannot_grow_is_cut_and_in_order() {
    let t0 = Instant::now();
    let mut queue = queue(4, &[2]);
    // A group short of full waits, even past its delay and at a preferred size: the time
    // until an instance frees up is time for company to arrive. No timer frees an instance,
    // so the only wake-up is a deadline.
    push_all(&mut queue, &[(1, Some('a'), 1), (2, Some('a'), 1)], t0);
    assert_eq!(step_behind(&mut queue, t0 + 2 * DELAY), Err(None));
    // A full group behind it is not cut ahead of it.
    push_all(&mut queue, &[(3, Some('b'), 4)], t0);
    assert_eq!(step_behind(&mut queue, t0 + 2 * DELAY), Err(None));
    let deadline = t0 + 3 * DELAY;
    queue.push(Queued {
        deadline: Some(deadline),
        ..entry(4, Some('b'), 1, t0)
    });
    assert_eq!(step_behind(&mut queue, t0), Err(Some(deadline)));
    // Filled up, the oldest group is cut; then the full group, then what cannot merge.
    push_all(&mut queue, &[(5, Some('a'), 2)], t0);
    queue.push(entry(6, None, 1, t0));
    assert_eq!(step_behind(&mut queue, t0), Ok(vec![1, 2, 5]));
    assert_eq!(step_behind(&mut queue, t0), Ok(vec![3]));
    assert_eq!(step_behind(&mut queue, t0), Err(Some(deadline)));
    assert_eq!(step(&mut queue, t0 + DELAY), Ok(vec![4]));
    assert_eq!(step_behind(&mut queue, t0), Ok(vec![6]));
    assert_eq!(step_behind(&mut queue, t0), Err(None));
}

#[test]
fn behind_a_run_a_piece_at_the_split_size_is_full() {
    let t0 = Instant::now();
    let mut queue = BatchQueue::new(BatchPolicy::new(&BatchSettings {
        split_rows: 500,
        ..settings(1024, &[])
    }));
    push_all(&mut queue, &[(1, Some('a'), 500), (2, Some('a'), 500)], t0);
    assert_eq!(step_behind(&mut queue, t0), Ok(vec![1]));
    assert_eq!(step_behind(&mut queue, t0), Ok(vec![2]));
}

#[test]
fn closing_flushes_without_waiting() {
    let t0 = Instant::now();
    let mut queue = queue(4, &[]);
    push_all(
        &mut queue,
        &[(1, Some('a'), 1), (2, Some('b'), 1), (3, Some('a'), 1)],
        t0,
    );
    queue.close();
    assert_eq!(step(&mut queue, t0), Ok(vec![1, 3]));
    assert_eq!(step(&mut queue, t0), Ok(vec![2]));
}

#[test]
fn a_huge_delay_waits_for_requests_instead_of_overflowing() {
    let t0 = Instant::now();
    let mut queue = BatchQueue::new(BatchPolicy::new(&BatchSettings {
        max_batch_size: 4,
        max_queue_delay_us: u64::MAX,
        ..BatchSettings::default()
    }));
    queue.push(entry(1, Some('a'), 1, t0));
    // Far in the future or never, depending on the platform's clock range; either way no
    // panic and no batch.
    assert!(step(&mut queue, t0).is_err());
}

#[test]
fn settings_are_normalised() {
    let policy = BatchPolicy::new(&BatchSettings {
        max_batch_size: 8,
        max_queue_delay_us: 0,
        preferred_batch_sizes: vec![16, 4, 0, 2, 4],
        max_queue_size: 0,
        split_rows: 0,
    });
    assert_eq!(policy.preferred_batch_sizes, vec![2, 4]);
    assert_eq!(policy.max_queue_size(), 1);
    assert!(policy.admits(0, Priority::Default));
    assert!(!policy.admits(1, Priority::Default));
    assert!(policy.admits(1, Priority::High));
    assert!(!policy.admits(2, Priority::High));
    let off = BatchPolicy::new(&BatchSettings::default());
    assert!(!off.batching_enabled());
    assert_eq!(off.max_batch_size(), 1);
    let huge = BatchPolicy::new(&BatchSettings {
        max_queue_size: usize::MAX,
        ..BatchSettings::default()
    });
    assert_eq!(huge.max_queue_size(), MAX_QUEUE_SIZE);
}

#[test]
fn high_priority_has_a_reserve_past_the_queue_limit() {
    let policy = BatchPolicy::new(&settings(1, &[]));
    // settings() queues 100: default requests stop there, high ones a quarter later.
    assert!(policy.admits(99, Priority::Default));
    assert!(!policy.admits(100, Priority::Default));
    assert!(policy.admits(100, Priority::High));
    assert!(policy.admits(124, Priority::High));
    assert!(!policy.admits(125, Priority::High));
    assert_eq!(policy.capacity(), 125);
}

#[test]
fn high_priority_entries_run_before_default_ones_in_their_own_arrival_order() {
    let t0 = Instant::now();
    let mut queue = queue(1, &[]);
    let high = |id| Queued {
        priority: Priority::High,
        ..entry(id, None, 1, t0)
    };
    push_all(&mut queue, &[(1, None, 1), (2, None, 1)], t0);
    queue.push(high(3));
    queue.push(entry(4, None, 1, t0));
    queue.push(high(5));
    let order: Vec<u32> = (0..5)
        .filter_map(|_| step(&mut queue, t0).ok())
        .flatten()
        .collect();
    assert_eq!(order, vec![3, 5, 1, 2, 4]);
}

#[test]
fn a_high_priority_entry_leads_its_batch() {
    let t0 = Instant::now();
    let mut queue = queue(2, &[]);
    push_all(&mut queue, &[(1, Some('a'), 1), (2, Some('a'), 1)], t0);
    queue.push(Queued {
        priority: Priority::High,
        ..entry(3, Some('a'), 1, t0)
    });
    assert_eq!(step(&mut queue, t0 + DELAY), Ok(vec![3, 1]));
    assert_eq!(step(&mut queue, t0 + DELAY), Ok(vec![2]));
}

#[test]
fn no_batch_merges_past_split_rows_and_larger_entries_run_alone() {
    let t0 = Instant::now();
    let mut queue = BatchQueue::new(BatchPolicy::new(&BatchSettings {
        max_batch_size: 1024,
        split_rows: 500,
        ..BatchSettings::default()
    }));
    assert_eq!(queue.policy().split_rows(), Some(500));
    // Two pieces of one request (500 rows each) never merge back into one run.
    push_all(&mut queue, &[(1, Some('a'), 500), (2, Some('a'), 500)], t0);
    assert_eq!(step(&mut queue, t0), Ok(vec![1]));
    assert_eq!(step(&mut queue, t0), Ok(vec![2]));
    // Smaller requests merge up to the bound.
    push_all(
        &mut queue,
        &[(3, Some('a'), 300), (4, Some('a'), 200), (5, Some('a'), 1)],
        t0,
    );
    assert_eq!(step(&mut queue, t0), Ok(vec![3, 4]));
    assert_eq!(step(&mut queue, t0), Ok(vec![5]));
    let unbounded = BatchPolicy::new(&BatchSettings::default());
    assert_eq!(unbounded.split_rows(), None);
}
