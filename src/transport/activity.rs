//! What one connection is doing, for its two timers: how long it may sit with no request in
//! flight (the idle timeout), and how long an HTTP/1 request head may take to arrive once its
//! first byte has (the header-read timeout); and, for the drain, whether it is idle and which
//! protocol it speaks.
//!
//! hyper's own HTTP/1 header timer starts as soon as a kept-alive connection waits for its
//! next request, which would make every idle HTTP/1 connection close after the header-read
//! timeout however long the idle timeout is. So the connection's reads are watched instead
//! ([`super::watched`]): bytes that arrive while nothing is in flight start the header timer.
//!
//! Requests only write down when things happened; nothing is woken. The timer wakes on its
//! own, at the earliest moment either limit could run out, and reads the record then, so a
//! busy connection costs a lock per change and a wake-up per header-read timeout, not a
//! wake-up per request.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Instant;

use super::drain::Traffic;

/// The shortest time between two checks, should either limit be set to next to nothing.
const MIN_CHECK: Duration = Duration::from_millis(1);

struct Load {
    /// Requests in flight.
    busy: usize,
    /// When the last request finished (or the connection opened).
    idle_since: Instant,
    /// When bytes of a request head arrived while nothing was in flight.
    head_started: Option<Instant>,
    /// Whether the client speaks HTTP/2, once its first bytes have said.
    http2: Option<bool>,
}

impl Load {
    /// When the connection runs out of time if nothing else happens, and why.
    fn deadline(&self, idle: Duration, header: Duration) -> Option<(Instant, Expired)> {
        if self.busy > 0 {
            return None;
        }
        Some(match self.head_started {
            Some(started) => (started + header, Expired::SlowHead),
            None => (self.idle_since + idle, Expired::Idle),
        })
    }
}

/// Why a connection's time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// Nothing in flight for the idle timeout.
    Idle,
    /// A request head begun but not finished within the header-read timeout.
    SlowHead,
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
                http2: None,
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

    /// Resolves when the connection has been idle for `idle`, or a head has been arriving
    /// for `header`, whichever comes first.
    pub async fn expired(&self, idle: Duration, header: Duration) -> Expired {
        loop {
            let now = Instant::now();
            let deadline = self.record().deadline(idle, header);
            if let Some((at, why)) = deadline {
                if now >= at {
                    return why;
                }
            }
            // A head may start while this sleeps; waking again within `header` keeps its
            // deadline exact, since it cannot fall before `now + header`.
            let next_check = now + header.min(idle).max(MIN_CHECK);
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

pin_project! {
    /// A response body that keeps its request counted as in flight until it is sent.
    pub struct Tracked<B> {
        #[pin]
        inner: B,
        busy: Busy,
    }
}

impl<B> Tracked<B> {
    pub fn new(inner: B, busy: Busy) -> Self {
        Self { inner, busy }
    }
}

impl<B: Body> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_answer_and_a_started_head_from_its_first_byte() {
        let activity = Activity::new(Arc::default());
        let busy = activity.begin();
        let expired = activity.expired(Duration::from_secs(60), Duration::from_secs(10));
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
        let expired = activity.expired(Duration::from_secs(60), Duration::from_secs(10));
        let _busy = activity.begin();
        drop(_busy);
        assert_eq!(expired.await, Expired::Idle);
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
