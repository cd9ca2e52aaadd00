//! What one connection is doing, for its timers: how long it may sit with no request in
//! flight (the idle timeout), how long an HTTP/1 request head may take to arrive once its
//! first byte has (the header-read timeout), and how long the socket may refuse the answers'
//! bytes (the send timeout).
//!
//! hyper's own HTTP/1 header timer starts as soon as a kept-alive connection waits for its
//! next request, which would make every idle HTTP/1 connection close after the header-read
//! timeout however long the idle timeout is. So the connection's reads are watched instead
//! ([`super::watched`]): bytes that arrive while nothing is in flight start the header timer.
//! Its writes are watched too: a write the socket cannot take (the client reads nothing)
//! starts the send timer, and the next write it takes stops it.
//!
//! Requests only write down when things happened; nothing is woken. The timer wakes on its
//! own, at the earliest moment a limit could run out, and reads the record then, so a busy
//! connection costs a lock per change and a wake-up per shortest timeout, not a wake-up per
//! request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::drain::Traffic;
use crate::overload::MemoryCharge;

/// The shortest time between two checks, should a limit be set to next to nothing.
const MIN_CHECK: Duration = Duration::from_millis(1);

/// The connection's limits, as [`super::TransportSettings`] gives them.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub idle: Duration,
    pub header: Duration,
    pub send: Duration,
}

struct Load {
    /// Requests in flight.
    busy: usize,
    /// When the last request finished (or the connection opened).
    idle_since: Instant,
    /// When bytes of a request head arrived while nothing was in flight.
    head_started: Option<Instant>,
    /// When the socket last refused a write that it has not taken since.
    write_blocked_since: Option<Instant>,
    /// Whether the client speaks HTTP/2, once its first bytes have said.
    http2: Option<bool>,
    /// HTTP/1 answers handed to hyper in full, charged until its write buffer has been
    /// flushed to the socket (see [`super::send`]).
    unflushed: MemoryCharge,
}

impl Load {
    /// When the connection runs out of time if nothing else happens, and why.
    fn deadline(&self, limits: Limits) -> Option<(Instant, Expired)> {
        let waiting = match (self.busy, self.head_started) {
            (0, Some(started)) => Some((started + limits.header, Expired::SlowHead)),
            (0, None) => Some((self.idle_since + limits.idle, Expired::Idle)),
            _ => None,
        };
        let stalled = self
            .write_blocked_since
            .map(|since| (since + limits.send, Expired::Stalled));
        match (waiting, stalled) {
            (Some(waiting), Some(stalled)) => Some(if stalled.0 <= waiting.0 {
                stalled
            } else {
                waiting
            }),
            (waiting, stalled) => waiting.or(stalled),
        }
    }
}

/// Why a connection's time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// Nothing in flight for the idle timeout.
    Idle,
    /// A request head begun but not finished within the header-read timeout.
    SlowHead,
    /// The socket took none of the bytes waiting to be written for the send timeout.
    Stalled,
}

struct Shared {
    load: Mutex<Load>,
    /// Set once the server drains: HTTP/1 answers then close their connection.
    draining: AtomicBool,
    traffic: Arc<Traffic>,
}

#[derive(Clone)]
pub struct Activity(Arc<Shared>);

impl Activity {
    /// A connection just opened, one of those `traffic` counts.
    pub fn new(traffic: Arc<Traffic>) -> Self {
        Self(Arc::new(Shared {
            load: Mutex::new(Load {
                busy: 0,
                idle_since: Instant::now(),
                head_started: None,
                write_blocked_since: None,
                http2: None,
                unflushed: MemoryCharge::none(),
            }),
            draining: AtomicBool::new(false),
            traffic,
        }))
    }

    fn record(&self) -> MutexGuard<'_, Load> {
        record(&self.0.load)
    }

    /// A request has arrived; it counts as in flight until the guard is dropped.
    pub fn begin(&self) -> Busy {
        let mut load = self.record();
        load.busy += 1;
        load.head_started = None;
        let first = load.busy == 1;
        drop(load);
        if first {
            self.0.traffic.connection_busy();
        }
        Busy(self.0.clone())
    }

    pub(super) fn bytes_arrived(&self) {
        let mut load = self.record();
        if load.busy == 0 && load.head_started.is_none() {
            load.head_started = Some(Instant::now());
        }
    }

    /// The client's first bytes said which protocol it speaks.
    pub(super) fn speaks(&self, http2: bool) {
        self.record().http2 = Some(http2);
    }

    /// Whether the client speaks HTTP/2 (`false` also while it has said nothing yet).
    pub fn speaks_http2(&self) -> bool {
        self.record().http2 == Some(true)
    }

    /// Nothing in flight and no request head arriving.
    pub fn is_idle(&self) -> bool {
        let load = self.record();
        load.busy == 0 && load.head_started.is_none()
    }

    pub(super) fn write_blocked(&self) {
        let mut load = self.record();
        load.write_blocked_since.get_or_insert_with(Instant::now);
    }

    pub(super) fn write_taken(&self) {
        self.record().write_blocked_since = None;
    }

    /// Keeps `charge` until hyper's write buffer has next been flushed to the socket.
    pub(super) fn hold_until_flushed(&self, charge: MemoryCharge) {
        if charge.bytes() > 0 {
            self.record().unflushed.absorb(charge);
        }
    }

    /// hyper's write buffer is empty: what it held is in the socket.
    pub(super) fn flushed(&self) {
        let released = std::mem::take(&mut self.record().unflushed);
        drop(released);
    }

    pub fn start_draining(&self) {
        self.0.draining.store(true, Ordering::Relaxed);
        self.0.traffic.start_draining();
    }

    pub fn is_draining(&self) -> bool {
        self.0.draining.load(Ordering::Relaxed)
    }

    /// The connections this one is counted among.
    pub fn traffic(&self) -> &Traffic {
        &self.0.traffic
    }

    /// Resolves when one of the limits has run out: idle for `limits.idle`, a head arriving
    /// for `limits.header`, or writes refused for `limits.send`, whichever comes first.
    pub async fn expired(&self, limits: Limits) -> Expired {
        loop {
            let now = Instant::now();
            let deadline = self.record().deadline(limits);
            if let Some((at, why)) = deadline {
                if now >= at {
                    return why;
                }
            }
            // A head may start, or a write be refused, while this sleeps; waking again within
            // the shorter of their limits keeps their deadlines exact.
            let next_check = now
                + limits
                    .header
                    .min(limits.idle)
                    .min(limits.send)
                    .max(MIN_CHECK);
            let wake = deadline.map_or(next_check, |(at, _)| at.min(next_check));
            tokio::time::sleep_until(wake).await;
        }
    }
}

/// The record; a panic while it was held cannot leave it inconsistent (each change is one
/// assignment), so a poisoned lock is used as it is.
fn record(load: &Mutex<Load>) -> MutexGuard<'_, Load> {
    load.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Held from a request's arrival until its response has been sent (or dropped).
pub struct Busy(Arc<Shared>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut load = record(&self.0.load);
        load.busy = load.busy.saturating_sub(1);
        let last = load.busy == 0;
        if last {
            load.idle_since = Instant::now();
        }
        drop(load);
        if last {
            self.0.traffic.connection_idle();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(idle: u64, header: u64, send: u64) -> Limits {
        Limits {
            idle: Duration::from_secs(idle),
            header: Duration::from_secs(header),
            send: Duration::from_secs(send),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_answer_and_a_started_head_from_its_first_byte() {
        let activity = Activity::new(Arc::default());
        let busy = activity.begin();
        let expired = activity.expired(limits(60, 10, 30));
        tokio::pin!(expired);
        // In flight: no timer runs, however long it takes.
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(futures::poll!(&mut expired).is_pending());
        drop(busy);
        assert!(futures::poll!(&mut expired).is_pending());
        // Idle for less than the idle timeout, longer than the header timeout: still open.
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(futures::poll!(&mut expired).is_pending());
        // A head starts arriving: from here the header timeout applies.
        activity.bytes_arrived();
        assert_eq!(expired.await, Expired::SlowHead);
        let expired = activity.expired(limits(60, 10, 30));
        let _busy = activity.begin();
        drop(_busy);
        assert_eq!(expired.await, Expired::Idle);
    }

    #[tokio::test(start_paused = true)]
    async fn a_socket_that_takes_no_bytes_for_the_send_timeout_stalls_even_while_busy() {
        let activity = Activity::new(Arc::default());
        let _busy = activity.begin();
        let expired = activity.expired(limits(600, 600, 5));
        tokio::pin!(expired);
        activity.write_blocked();
        tokio::time::sleep(Duration::from_secs(4)).await;
        // A write taken restarts the clock; a refused one starts it again.
        activity.write_taken();
        activity.write_blocked();
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(futures::poll!(&mut expired).is_pending());
        assert_eq!(expired.await, Expired::Stalled);
    }

    #[tokio::test]
    async fn a_connection_is_counted_busy_from_its_first_request_to_its_last() {
        let traffic = Arc::new(Traffic::default());
        let activity = Activity::new(traffic.clone());
        let first = activity.begin();
        let second = activity.begin();
        traffic.start_draining();
        let quiet = traffic.quiet();
        tokio::pin!(quiet);
        drop(first);
        assert!(futures::poll!(&mut quiet).is_pending());
        drop(second);
        quiet.await;
    }
}
