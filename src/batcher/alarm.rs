//! The batcher's wake-up at the end of a queue delay.
//!
//! Tokio's timer wheel ticks once a millisecond and rounds a sleep up to the next tick, so a
//! `max_queue_delay` of 200 us (a common Triton setting) would wait 1 to 2 ms, paid again by
//! every step of an ensemble. Triton waits on a condition variable, to the microsecond. A wait
//! shorter than a tick is therefore slept on a blocking thread with the operating system's
//! clock (late by about the kernel's 50 us timer slack); a longer one on the wheel, whose
//! rounding is then a small part of it.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

const TICK: Duration = Duration::from_millis(1);

/// One pending wake-up, kept across the batcher loop's turns while its time stays the same, so
/// that requests arriving during a wait do not start a sleeper each.
#[derive(Default)]
pub(super) struct Alarm {
    at: Option<Instant>,
    fine: Option<JoinHandle<()>>,
}

impl Alarm {
    /// Sets the wake-up time (`None`: none). A changed time drops the old sleeper, which ends
    /// on its own within a tick.
    pub(super) fn set(&mut self, at: Option<Instant>) {
        if self.at != at {
            self.at = at;
            self.fine = None;
        }
    }

    /// Waits for the time set and returns it: the loop counts the delay as over from then on,
    /// even where the runtime's clock has not caught up (a paused clock in tests). Cancel-safe:
    /// dropped before it ends, the next call waits for the same sleeper.
    pub(super) async fn rung(&mut self) -> Instant {
        let Some(at) = self.at else {
            return std::future::pending().await;
        };
        let left = at.saturating_duration_since(Instant::now());
        if left >= TICK || (left.is_zero() && self.fine.is_none()) {
            tokio::time::sleep_until(at).await;
        } else {
            let fine = self.fine.get_or_insert_with(|| {
                tokio::task::spawn_blocking(move || std::thread::sleep(left))
            });
            // A sleeper that cannot start (the runtime shutting down) ends the wait as well.
            let _ = fine.await;
        }
        self.at = None;
        self.fine = None;
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_shorter_than_a_tick_rings_at_its_time() {
        let mut alarm = Alarm::default();
        let start = Instant::now();
        let at = start + Duration::from_micros(200);
        alarm.set(Some(at));
        assert_eq!(alarm.rung().await, at);
        assert!(Instant::now() >= at);
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_clock_still_sees_the_delay_over() {
        let mut alarm = Alarm::default();
        let at = Instant::now() + Duration::from_micros(300);
        alarm.set(Some(at));
        assert_eq!(alarm.rung().await, at);
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_wait_sleeps_on_the_wheel() {
        let mut alarm = Alarm::default();
        let at = Instant::now() + Duration::from_millis(50);
        alarm.set(Some(at));
        assert_eq!(alarm.rung().await, at);
        assert!(Instant::now() >= at);
    }

    #[tokio::test]
    async fn no_time_set_never_rings() {
        let mut alarm = Alarm::default();
        let rung = tokio::time::timeout(Duration::from_millis(20), alarm.rung()).await;
        assert!(rung.is_err());
    }
}
