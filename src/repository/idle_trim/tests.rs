use super::*;
use crate::request::DecodedFootprint;

const MIB: u64 = 1 << 20;

fn quiet(charged: u64) -> Sample {
    Sample { charged, held: 0 }
}

const NOTHING: Step = Step {
    keep_arena_tops: None,
    trim: false,
};
const GIVE_BACK_AND_TRIM: Step = Step {
    keep_arena_tops: Some(false),
    trim: true,
};

#[test]
fn a_quiet_tick_after_heavy_traffic_gives_back_and_trims_once() {
    let mut policy = IdleTrim::new(0);
    assert_eq!(policy.tick(quiet(100 * MIB)), NOTHING);
    assert_eq!(policy.tick(quiet(100 * MIB)), GIVE_BACK_AND_TRIM);
    // Still idle: nothing new to give back.
    assert_eq!(policy.tick(quiet(100 * MIB)), NOTHING);
    assert_eq!(policy.tick(quiet(100 * MIB)), NOTHING);
    // Traffic again: the tops are kept for it.
    assert_eq!(
        policy.tick(quiet(102 * MIB)),
        Step {
            keep_arena_tops: Some(true),
            trim: false
        }
    );
    assert_eq!(policy.tick(quiet(104 * MIB)), NOTHING);
}

#[test]
fn held_answers_get_the_tops_given_back_and_the_trim_waits_for_them() {
    let mut policy = IdleTrim::new(0);
    assert_eq!(policy.tick(quiet(100 * MIB)), NOTHING);
    // Answers a stalled client does not read: quiet, but held. Their frees, when the send
    // timeout resets them, must find the tops given back already.
    let held = Sample {
        held: 50 * MIB,
        ..quiet(100 * MIB)
    };
    assert_eq!(
        policy.tick(held),
        Step {
            keep_arena_tops: Some(false),
            trim: false
        }
    );
    for _ in 0..10 {
        assert_eq!(policy.tick(held), NOTHING);
    }
    assert_eq!(
        policy.tick(quiet(100 * MIB)),
        Step {
            keep_arena_tops: None,
            trim: true
        }
    );
}

#[test]
fn probes_and_scrapes_leave_a_tick_quiet() {
    let mut policy = IdleTrim::new(0);
    assert_eq!(policy.tick(quiet(100 * MIB)), NOTHING);
    // A few small requests during the tick, one of them still held at its end.
    assert_eq!(
        policy.tick(Sample {
            charged: 100 * MIB + 640,
            held: 64,
        }),
        GIVE_BACK_AND_TRIM
    );
}

#[test]
fn light_traffic_gives_back_only_once_enough_was_charged_since_the_last_trim() {
    let mut policy = IdleTrim::new(0);
    let (mut charged, mut trims, mut switches) = (0, 0, 0);
    // One 1 MiB request per tick, then a quiet tick, 200 times over.
    for _ in 0..200 {
        charged += MIB;
        for step in [policy.tick(quiet(charged)), policy.tick(quiet(charged))] {
            trims += u64::from(step.trim);
            switches += u64::from(step.keep_arena_tops.is_some());
        }
    }
    assert_eq!(trims, 200 / (TRIM_AFTER_BYTES / MIB));
    // Given back at each trim, kept again at the next request.
    assert_eq!(switches, 2 * trims);
}

#[test]
fn what_was_charged_before_the_start_does_not_count_and_the_count_may_wrap() {
    let mut policy = IdleTrim::new(500 * MIB);
    assert_eq!(policy.tick(quiet(500 * MIB)), NOTHING);
    let mut policy = IdleTrim::new(u64::MAX - MIB);
    assert_eq!(
        policy.tick(quiet(TRIM_AFTER_BYTES)),
        Step {
            keep_arena_tops: None,
            trim: false
        }
    );
    assert_eq!(policy.tick(quiet(TRIM_AFTER_BYTES)), GIVE_BACK_AND_TRIM);
}

// Paused time; the trim itself runs on a blocking thread, during which a current-thread
// runtime does not advance the clock, so the count is in before the next tick.
#[tokio::test(start_paused = true)]
async fn the_task_trims_once_the_burst_is_no_longer_held() {
    let budget = MemoryBudget::new(1 << 30);
    let trims = Counter::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(return_memory_when_idle(
        budget.clone(),
        None,
        trims.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    // The task starts (what was charged before it counts as trimmed).
    tokio::time::sleep(TICK).await;
    // A burst whose answers stay charged for many ticks.
    let held = budget.charge(Some(DecodedFootprint(2 * TRIM_AFTER_BYTES)));
    for _ in 0..20 {
        tokio::time::sleep(TICK).await;
    }
    assert_eq!(trims.get(), 0);
    drop(held);
    // The next tick finds it quiet and nothing held: one trim; then the server stays idle,
    // with nothing more to give back.
    for _ in 0..20 {
        tokio::time::sleep(TICK).await;
    }
    assert_eq!(trims.get(), 1);
    let _ = stop.send(());
    assert!(task.await.is_ok());
}
