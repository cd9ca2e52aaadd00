//! The instances of one model version, shared by the actor and the request side: which are
//! free, and how long a run takes.
//!
//! Both the actor (for the batches it cuts) and a request running inline (see
//! `handle.rs`) take an instance here before running and give it back after, so that at
//! most one run per instance happens whoever starts it, and the busy-time accounting stays
//! per instance.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

/// A moving estimate of how long one run of this version blocks its thread, from real runs.
///
/// Each run (inline or on a blocking thread, merged or alone) is timed from the start of
/// gathering its inputs to the end of splitting its outputs, and folded into exponentially
/// weighted averages of that time and of the run's rows (weight 1/8 for the newest run: a
/// change in the model's speed shows within a few dozen runs, one slow run moves it little).
/// The first run sets both averages.
///
/// A request of `r` rows is predicted to take `mean_time * max(1, r / mean_rows)`. If a run
/// costs a fixed part plus a part per row, this is never less than the true cost: requests
/// smaller than the average are charged the whole average, larger ones scale linearly, which
/// overcharges the fixed part.
///
/// The estimate decides whether a request may run inline, so once a run has been measured
/// inline, a run from the queue may only lower it, and only one no larger than the average
/// (see [`RunEstimate::lowered_by`]). A queued run of a small model is slower
/// than the same run inline: it starts on a blocking thread after a hand-off, when the
/// request's bytes and the session's state have left the caches (measured: 90 us against 27
/// us for one 10-row request of a three-layer ranking graph). Folded in as they came, those
/// runs kept a model just over the bound queued, where every run was measured slow again, and
/// the same model at the same load ran inline or queued from one start to the next (a p50 of
/// 150 us or of 700 us at concurrency 1). Inline runs still raise the estimate as they come,
/// and they alone decide whether the network thread is held too long.
///
/// A model estimated over the bound runs queued, where its runs cannot show that it would be
/// fast inline. So a model estimated at most [`PROBE_FACTOR`] times the bound runs one request
/// in [`PROBE_EVERY`] inline anyway, to be measured where the bound applies: a fast model
/// comes back inline after a few probes, and a slow one holds the network thread for at most
/// that many times the bound, once in that many requests.
#[derive(Debug, Default)]
pub(super) struct RunEstimate {
    /// Mean seconds and rows per run; `None` until the first run is measured.
    mean: Option<(f64, f64)>,
    /// Whether a run has been measured inline.
    inline_measured: bool,
    /// Requests turned away from running inline since the last probe.
    declined: u32,
}

/// A model estimated at most this many times the inline bound is probed inline now and then.
const PROBE_FACTOR: u32 = 4;
/// One request in this many of a probed model runs inline.
const PROBE_EVERY: u32 = 64;

/// Where a run happened: on the caller's thread, or on a blocking thread from the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RunPlace {
    Inline,
    Queued,
}

/// Weight of the newest run in the averages.
const NEWEST_WEIGHT: f64 = 1.0 / 8.0;

impl RunEstimate {
    pub(super) fn record(&mut self, took: Duration, rows: u64, place: RunPlace) {
        if place == RunPlace::Inline {
            self.inline_measured = true;
        } else if self.inline_measured && !self.lowered_by(took, rows) {
            return;
        }
        let (seconds, rows) = (took.as_secs_f64(), rows.max(1) as f64);
        self.mean = Some(match self.mean {
            None => (seconds, rows),
            Some((mean_seconds, mean_rows)) => (
                mean_seconds + (seconds - mean_seconds) * NEWEST_WEIGHT,
                mean_rows + (rows - mean_rows) * NEWEST_WEIGHT,
            ),
        });
    }

    /// Whether a queued run of `rows` rows that took `took` may fold into an estimate that
    /// inline runs have set: one no larger than the average run, and no slower than predicted.
    /// A merged batch is larger: folded in, it would charge a lone request the batch's time
    /// (a smaller request is charged the whole average), and under load that kept a fast model
    /// over the bound and queued even once the load had gone.
    fn lowered_by(&self, took: Duration, rows: u64) -> bool {
        let Some((_, mean_rows)) = self.mean else {
            return true;
        };
        rows as f64 <= mean_rows.ceil()
            && self.predict(rows).is_some_and(|expected| took <= expected)
    }

    /// How long a run of `rows` rows is expected to take; `None` before any run was measured.
    pub(super) fn predict(&self, rows: u64) -> Option<Duration> {
        let (mean_seconds, mean_rows) = self.mean?;
        let scale = (rows.max(1) as f64 / mean_rows).max(1.0);
        Duration::try_from_secs_f64(mean_seconds * scale).ok()
    }

    /// Whether a run of `rows` rows is expected to finish within `bound`. An unmeasured model
    /// never is.
    #[cfg(test)]
    fn within(&self, rows: u64, bound: Duration) -> bool {
        self.predict(rows).is_some_and(|took| took <= bound)
    }

    /// Whether a request of `rows` rows may run inline: expected within `bound`, or due for
    /// a probe. An unmeasured model never may.
    pub(super) fn admits_inline(&mut self, rows: u64, bound: Duration) -> bool {
        let Some(expected) = self.predict(rows) else {
            return false;
        };
        if expected <= bound {
            return true;
        }
        if expected > bound.saturating_mul(PROBE_FACTOR) {
            return false;
        }
        self.declined += 1;
        if self.declined < PROBE_EVERY {
            return false;
        }
        self.declined = 0;
        true
    }
}

struct State {
    /// Instances not running anything; the lowest index is taken first, so that with light
    /// load the same instance (and its warm caches) does the work.
    free: Vec<usize>,
    estimate: RunEstimate,
}

/// The free instances of one version and its run-time estimate.
pub(super) struct Instances {
    state: Mutex<State>,
    /// Signalled when an inline run gives its instance back while requests wait in the queue,
    /// since the actor would otherwise not look at the queue again until something else
    /// happens.
    freed: Notify,
}

impl Instances {
    pub(super) fn new(count: usize) -> Self {
        Self {
            state: Mutex::new(State {
                free: (0..count.max(1)).rev().collect(),
                estimate: RunEstimate::default(),
            }),
            freed: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The lock is never held across anything that can panic; a poisoned one still holds
        // a consistent list.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the lowest free instance, if any.
    pub(super) fn take(&self) -> Option<usize> {
        self.state().free.pop()
    }

    /// Takes the lowest free instance for a run of `rows` rows on the caller's thread, if
    /// one is free and the run is expected to finish within `bound` (or is due for a probe,
    /// see [`RunEstimate`]).
    pub(super) fn take_for_inline(&self, rows: u64, bound: Duration) -> Option<usize> {
        let mut state = self.state();
        if state.estimate.admits_inline(rows, bound) {
            state.free.pop()
        } else {
            None
        }
    }

    /// Whether a run of `rows` rows is expected to take at least `bound`; `false` for a
    /// version not yet measured.
    pub(super) fn runs_at_least(&self, rows: u64, bound: Duration) -> bool {
        self.state()
            .estimate
            .predict(rows)
            .is_some_and(|took| took >= bound)
    }

    /// Folds a run of `rows` rows that took `took` into the run-time estimate.
    pub(super) fn record(&self, took: Duration, rows: u64, place: RunPlace) {
        self.state().estimate.record(took, rows, place);
    }

    /// Gives `instance` back.
    pub(super) fn give_back(&self, instance: usize) {
        let mut state = self.state();
        // An instance given back twice would run two batches at once.
        debug_assert!(
            !state.free.contains(&instance),
            "instance {instance} given back while free"
        );
        // Kept in descending order, so that `pop` takes the lowest.
        let at = state.free.partition_point(|&free| free > instance);
        state.free.insert(at, instance);
    }

    /// Like [`Instances::give_back`] for a run started outside the actor: wakes the actor if
    /// requests are queued (`depth` above 0), since one of them may have been waiting for
    /// this instance.
    ///
    /// Why checking `depth` after giving back is enough: a queued request is counted in
    /// `depth` before the actor receives it, and the actor looks for a free instance after
    /// receiving it, under this lock. Either the actor's look comes after our give-back (it
    /// sees the instance) or before it, and then the count it follows is visible to us here.
    pub(super) fn give_back_from_outside(&self, instance: usize, depth: &AtomicUsize) {
        self.give_back(instance);
        if depth.load(Ordering::Acquire) > 0 {
            self.freed.notify_one();
        }
    }

    /// Completes when an inline run gave back an instance while requests were queued.
    pub(super) async fn freed(&self) {
        self.freed.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn an_unmeasured_model_is_never_within_the_bound() {
        let estimate = RunEstimate::default();
        assert_eq!(estimate.predict(1), None);
        assert!(!estimate.within(1, Duration::MAX));
    }

    #[test]
    fn long_runs_are_told_from_the_estimate_and_unmeasured_ones_are_not_long() {
        let instances = Instances::new(2);
        assert!(!instances.runs_at_least(1, Duration::ZERO));
        instances.record(2000 * US, 32, RunPlace::Queued);
        assert!(instances.runs_at_least(32, 2000 * US));
        assert!(!instances.runs_at_least(32, 2001 * US));
        assert!(instances.runs_at_least(64, 4000 * US));
    }

    #[test]
    fn the_first_run_sets_the_estimate_and_later_ones_move_it_by_an_eighth() {
        let mut estimate = RunEstimate::default();
        estimate.record(80 * US, 1, RunPlace::Queued);
        assert_eq!(estimate.predict(1), Some(80 * US));
        estimate.record(160 * US, 1, RunPlace::Queued);
        assert_eq!(estimate.predict(1), Some(90 * US));
        assert!(estimate.within(1, 90 * US));
        assert!(!estimate.within(1, 89 * US));
    }

    #[test]
    fn once_measured_inline_a_queued_run_only_lowers_the_estimate() {
        let mut estimate = RunEstimate::default();
        // Before any inline run, queued runs move it both ways.
        estimate.record(80 * US, 1, RunPlace::Queued);
        estimate.record(160 * US, 1, RunPlace::Queued);
        assert_eq!(estimate.predict(1), Some(90 * US));
        estimate.record(10 * US, 1, RunPlace::Inline);
        let after_inline = estimate.predict(1);
        // A slow (cold) queued run is not folded in...
        estimate.record(900 * US, 1, RunPlace::Queued);
        assert_eq!(estimate.predict(1), after_inline);
        // ...nor a merged batch of more rows than the average run, however fast per row,
        estimate.record(70 * US, 8, RunPlace::Queued);
        assert_eq!(estimate.predict(1), after_inline);
        // ...a fast one of the usual size is,
        estimate.record(10 * US, 1, RunPlace::Queued);
        assert!(estimate.predict(1) < after_inline);
        // and a slow inline run raises it, as inline runs are what the bound protects.
        let before = estimate.predict(1);
        estimate.record(900 * US, 1, RunPlace::Inline);
        assert!(estimate.predict(1) > before);
    }

    #[test]
    fn a_model_a_little_over_the_bound_is_probed_inline_and_a_slow_one_never() {
        let bound = 50 * US;
        let mut estimate = RunEstimate::default();
        assert!(!estimate.admits_inline(1, Duration::MAX), "unmeasured");
        estimate.record(90 * US, 1, RunPlace::Queued);
        let admitted: Vec<bool> = (0..2 * PROBE_EVERY)
            .map(|_| estimate.admits_inline(1, bound))
            .collect();
        let probes: Vec<usize> = (admitted.iter().enumerate())
            .filter_map(|(at, &inline)| inline.then_some(at))
            .collect();
        let every = PROBE_EVERY as usize;
        assert_eq!(probes, vec![every - 1, 2 * every - 1]);
        // Probed inline and found fast, it runs inline again within a few probes.
        let mut probes_needed = 0;
        while !estimate.within(1, bound) {
            estimate.record(27 * US, 1, RunPlace::Inline);
            // The queued runs in between are slower, and not folded in.
            estimate.record(90 * US, 1, RunPlace::Queued);
            probes_needed += 1;
        }
        assert!(probes_needed <= 8, "{probes_needed} probes");
        assert!(estimate.admits_inline(1, bound));
        // Past four times the bound there is no probe.
        let mut slow = RunEstimate::default();
        slow.record(201 * US, 1, RunPlace::Queued);
        assert!((0..4 * PROBE_EVERY).all(|_| !slow.admits_inline(1, bound)));
    }

    #[test]
    fn larger_requests_scale_up_and_smaller_ones_are_charged_the_mean() {
        let mut estimate = RunEstimate::default();
        estimate.record(40 * US, 4, RunPlace::Queued);
        assert_eq!(estimate.predict(1), Some(40 * US));
        assert_eq!(estimate.predict(4), Some(40 * US));
        assert_eq!(estimate.predict(8), Some(80 * US));
        assert!(!estimate.within(8, 50 * US));
    }

    #[test]
    fn instances_are_taken_lowest_first_and_given_back_in_order() {
        let instances = Instances::new(3);
        assert_eq!(instances.take(), Some(0));
        assert_eq!(instances.take(), Some(1));
        instances.give_back(0);
        assert_eq!(instances.take(), Some(0));
        assert_eq!(instances.take(), Some(2));
        assert_eq!(instances.take(), None);
        instances.give_back(2);
        instances.give_back(1);
        assert_eq!(instances.take(), Some(1));
    }

    #[test]
    fn inline_runs_need_a_measured_fast_model_and_a_free_instance() {
        let instances = Instances::new(1);
        assert_eq!(instances.take_for_inline(1, Duration::MAX), None);
        instances.record(10 * US, 1, RunPlace::Queued);
        assert_eq!(instances.take_for_inline(1, 9 * US), None);
        assert_eq!(instances.take_for_inline(1, 10 * US), Some(0));
        assert_eq!(instances.take_for_inline(1, 10 * US), None);
    }
}
