//! Hands the memory malloc keeps free back to the operating system once request traffic
//! pauses after heavy use.
//!
//! Without a model memory budget, `main` tunes malloc ([`super::trim`]) so that each arena
//! keeps freed blocks of up to 32 MiB and a free top of up to 64 MiB for the next large
//! request. Kept for good, that turned one burst's peak into the process's size: a client
//! that opened 100 HTTP/2 streams for 1 MiB answers and never read them left the server 62 to
//! 80 MiB above its start (debug build, two cores; 180 to 280 MB on a larger machine) once the
//! send timeout had reset them, though nothing held the memory any more. Given back as below,
//! it ends 0 to 2 MiB above (tests/python/test_stalled_client_memory.py).
//!
//! This task costs the request path nothing beyond the budget's one relaxed add per charge: it
//! wakes every [`TICK`] and reads what the budget keeps anyway (bytes ever charged, bytes
//! charged now). After at least [`TRIM_AFTER_BYTES`] were charged since the last trim:
//!
//! - a quiet tick (less than [`QUIET_BYTES`] charged during it: probes and scrapes are not
//!   traffic) turns the arena tops to given back, so that the frees still to come (answers
//!   held for a stalled client, a long run's buffers) return their arena's top as they happen:
//!   glibc returns a thread arena's top only from `free`, never from `malloc_trim`;
//! - a quiet tick with less than [`QUIET_BYTES`] held at its end also calls `malloc_trim(0)`,
//!   off the runtime's threads, for the free blocks inside every arena.
//!
//! The next tick with traffic turns the tops back to kept. Traffic that never pauses keeps its
//! buffers, as before; a trickle of small requests gives back only every [`TRIM_AFTER_BYTES`],
//! so it keeps the reuse the tuning is for.

use std::future::Future;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use super::trim::{self, KeptFreedMemory};
use crate::overload::MemoryBudget;

/// How often the task looks.
pub const TICK: Duration = Duration::from_millis(250);

/// Bytes charged since the last trim before a pause gives memory back again: as much as one
/// arena keeps at its top when freed memory is kept, below which giving back is not worth
/// the page faults the next requests pay.
pub const TRIM_AFTER_BYTES: u64 = 64 << 20;

/// Below this, what a tick charged, or what is held at its end, leaves it quiet: a probe or a
/// scrape charges tens of bytes, a request worth keeping memory for, megabytes.
pub const QUIET_BYTES: u64 = 1 << 20;

/// What the task reads at each tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Bytes ever charged to the request memory budget (wrapping).
    pub charged: u64,
    /// Bytes charged now: requests being decoded or run, answers not yet sent.
    pub held: u64,
}

/// What one tick decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Step {
    /// `Some(keep)`: switch the arena tops to kept (`true`) or given back.
    pub keep_arena_tops: Option<bool>,
    /// Call `malloc_trim(0)`.
    pub trim: bool,
}

/// When to give memory back, from one sample per tick; pure, so that its tests drive it
/// directly.
#[derive(Debug, Clone)]
pub struct IdleTrim {
    /// `charged` at the last tick.
    last_charged: u64,
    /// Bytes charged since the last trim.
    since_trim: u64,
    /// Whether the arena tops are given back now.
    giving_back: bool,
}

impl IdleTrim {
    /// Starts from `charged`, arena tops kept: what was charged before counts as trimmed.
    pub fn new(charged: u64) -> Self {
        Self {
            last_charged: charged,
            since_trim: 0,
            giving_back: false,
        }
    }

    /// Takes this tick's sample.
    pub fn tick(&mut self, sample: Sample) -> Step {
        let new = sample.charged.wrapping_sub(self.last_charged);
        self.last_charged = sample.charged;
        self.since_trim = self.since_trim.saturating_add(new);
        if new >= QUIET_BYTES {
            // Traffic: the next requests reuse what the arenas keep.
            let was_giving_back = std::mem::replace(&mut self.giving_back, false);
            return Step {
                keep_arena_tops: was_giving_back.then_some(true),
                trim: false,
            };
        }
        if self.since_trim < TRIM_AFTER_BYTES {
            return Step::default();
        }
        let was_giving_back = std::mem::replace(&mut self.giving_back, true);
        let trim = sample.held < QUIET_BYTES;
        if trim {
            self.since_trim = 0;
        }
        Step {
            keep_arena_tops: (!was_giving_back).then_some(false),
            trim,
        }
    }
}

/// Runs until `stopped`, giving memory back as [`IdleTrim`] says, and counting each
/// `malloc_trim` in `trims` once it is done. `kept`: the arena tops may be switched (the
/// process's allocator is tuned to keep them); `None` leaves the thresholds alone.
pub async fn return_memory_when_idle(
    budget: MemoryBudget,
    kept: Option<KeptFreedMemory>,
    trims: Counter,
    stopped: impl Future<Output = ()>,
) {
    tokio::pin!(stopped);
    let sample = || Sample {
        charged: budget.charged_since_start(),
        held: budget.used(),
    };
    let mut policy = IdleTrim::new(sample().charged);
    let mut ticks = tokio::time::interval(TICK);
    // After a stall (a suspended process), one tick, not a burst of them.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = &mut stopped => return,
            _ = ticks.tick() => {}
        }
        let step = policy.tick(sample());
        if step == Step::default() {
            continue;
        }
        let apply = move || {
            if let (Some(kept), Some(keep)) = (kept, step.keep_arena_tops) {
                kept.keep_arena_tops(keep);
            }
            if step.trim {
                trim::release_freed_memory();
            }
        };
        // malloc_trim walks every arena under its lock: milliseconds that no reactor thread
        // should spend. A failed join (a panic) only skips the count.
        if tokio::task::spawn_blocking(apply).await.is_ok() && step.trim {
            trims.inc();
        }
    }
}

#[cfg(test)]
mod tests;
