//! What a payload-log writer's request side and its thread both see: the queue, the counts,
//! and what failed writes lost, which the readiness detail shows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::metrics::PayloadLogCounts;

use super::queue::RecordQueue;

const WARN_EVERY: Duration = Duration::from_secs(60);

/// Records a writer could not write, as the readiness detail shows them. No path is in it:
/// the readiness endpoints answer anyone the health group is open to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteLosses {
    /// Records lost to failed opens and writes since the writer started.
    pub records_lost: u64,
    /// The last failure.
    pub error: String,
    /// Whether the latest write failed: false once one has succeeded since.
    pub failing: bool,
}

/// The state both the request path and the thread see.
pub(super) struct Shared {
    pub(super) model: Arc<str>,
    counts: PayloadLogCounts,
    pub(super) queue: RecordQueue,
    /// When a drop was last warned about, in ms since the writer started (0: never).
    last_warning_ms: AtomicU64,
    started: Instant,
    /// What failed writes lost; `None` until one does.
    losses: Mutex<Option<WriteLosses>>,
}

impl Shared {
    pub(super) fn new(model: &str, counts: PayloadLogCounts) -> Self {
        Self {
            model: model.into(),
            counts,
            queue: RecordQueue::default(),
            last_warning_ms: AtomicU64::new(0),
            started: Instant::now(),
            losses: Mutex::new(None),
        }
    }

    /// Whether a warning is due: at most one a minute, unless `forced`.
    fn warning_due(&self, forced: bool) -> bool {
        let now = self.started.elapsed().as_millis() as u64 + 1;
        let last = self.last_warning_ms.load(Ordering::Relaxed);
        let due = forced || last == 0 || now.saturating_sub(last) >= WARN_EVERY.as_millis() as u64;
        due && self
            .last_warning_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Logs a warning about a dropped record, at most once a minute.
    fn warn_dropped(&self, why: &dyn std::fmt::Display) {
        if self.warning_due(false) {
            tracing::warn!(model = %self.model, "payload log dropped a record: {why}");
        }
    }

    /// A record the queue refused (`why`): counted, and warned about.
    pub(super) fn refused(&self, why: &dyn std::fmt::Display) {
        self.counts.queue_full.inc();
        self.warn_dropped(why);
    }

    /// `records` whole in the file.
    pub(super) fn wrote(&self, records: u64) {
        if records == 0 {
            return;
        }
        self.counts.written.inc_by(records);
        let mut losses = self.locked_losses();
        if let Some(losses) = losses.as_mut().filter(|l| l.failing) {
            losses.failing = false;
            tracing::info!(
                model = %self.model,
                lost = losses.records_lost,
                "payload log records are written again"
            );
        }
    }

    /// `records` lost to `error`: counted, kept for the readiness detail, and logged (the
    /// first failure after a success always, then at most once a minute). `opening` says the
    /// file could not even be opened.
    pub(super) fn lost(&self, records: u64, error: &std::io::Error, opening: bool) {
        self.counts.write_error.inc_by(records);
        let (total, newly_failing) = {
            let mut losses = self.locked_losses();
            let losses = losses.get_or_insert_with(|| WriteLosses {
                records_lost: 0,
                error: String::new(),
                failing: false,
            });
            let newly_failing = !losses.failing;
            losses.records_lost += records;
            losses.error = error.to_string();
            losses.failing = true;
            (losses.records_lost, newly_failing)
        };
        if opening {
            return self.warn_dropped(&format_args!("cannot open a file: {error}"));
        }
        if self.warning_due(newly_failing) {
            tracing::warn!(
                model = %self.model,
                lost = records,
                total,
                "payload log lost {records} records (not written whole; the file keeps only \
                 whole records): {error}"
            );
        }
    }

    pub(super) fn losses(&self) -> Option<WriteLosses> {
        self.locked_losses().clone()
    }

    fn locked_losses(&self) -> std::sync::MutexGuard<'_, Option<WriteLosses>> {
        // Every change to the losses completes before anything that could panic.
        self.losses.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losses_add_up_and_a_later_write_ends_the_failure_but_not_the_count() {
        let counts = PayloadLogCounts::default();
        let shared = Shared::new("m", counts.clone());
        assert_eq!(shared.losses(), None);
        shared.wrote(2);
        assert_eq!(shared.losses(), None, "writes alone lose nothing");
        let full = std::io::Error::from_raw_os_error(28);
        shared.lost(3, &full, false);
        shared.lost(1, &std::io::Error::from_raw_os_error(27), false);
        let losses = shared.losses().unwrap();
        assert_eq!((losses.records_lost, losses.failing), (4, true));
        assert!(losses.error.contains("os error 27"), "{losses:?}");
        shared.wrote(1);
        let losses = shared.losses().unwrap();
        assert_eq!((losses.records_lost, losses.failing), (4, false));
        assert_eq!((counts.written.get(), counts.write_error.get()), (3, 4));
        shared.refused(&"the queue is full");
        assert_eq!(counts.queue_full.get(), 1);
    }
}
