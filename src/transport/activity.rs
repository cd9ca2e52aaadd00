//! What one connection is doing, for its two timers: how long it may sit with no request in
//! flight (the idle timeout), and how long an HTTP/1 request head may take to arrive once its
//! first byte has (the header-read timeout).
//!
//! hyper's own HTTP/1 header timer starts as soon as a kept-alive connection waits for its
//! next request, which would make every idle HTTP/1 connection close after the header-read
//! timeout however long the idle timeout is. So the connection's reads are watched instead:
//! bytes that arrive while nothing is in flight start the header timer.
//!
//! Requests only write down when things happened; nothing is woken. The timer wakes on its
//! own, at the earliest moment either limit could run out, and reads the record then, so a
//! busy connection costs a lock per change and a wake-up per header-read timeout, not a
//! wake-up per request.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The start of every HTTP/2 connection (RFC 9113, section 3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The shortest time between two checks, should either limit be set to next to nothing.
const MIN_CHECK: Duration = Duration::from_millis(1);

#[derive(Clone, Copy)]
struct Load {
    /// Requests in flight.
    busy: usize,
    /// When the last request finished (or the connection opened).
    idle_since: Instant,
    /// When bytes of a request head arrived while nothing was in flight.
    head_started: Option<Instant>,
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

#[derive(Clone)]
pub struct Activity(Arc<Mutex<Load>>);

impl Default for Activity {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Load {
            busy: 0,
            idle_since: Instant::now(),
            head_started: None,
        })))
    }
}

/// The record; a panic while it was held cannot leave it inconsistent (each change is one
/// assignment), so a poisoned lock is used as it is.
fn record(load: &Mutex<Load>) -> MutexGuard<'_, Load> {
    load.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Activity {
    /// A request has arrived; it counts as in flight until the guard is dropped.
    pub fn begin(&self) -> Busy {
        let mut load = record(&self.0);
        load.busy += 1;
        load.head_started = None;
        drop(load);
        Busy(self.0.clone())
    }

    fn bytes_arrived(&self) {
        let mut load = record(&self.0);
        if load.busy == 0 && load.head_started.is_none() {
            load.head_started = Some(Instant::now());
        }
    }

    /// Resolves when the connection has been idle for `idle`, or a head has been arriving
    /// for `header`, whichever comes first.
    pub async fn expired(&self, idle: Duration, header: Duration) -> Expired {
        loop {
            let now = Instant::now();
            let deadline = record(&self.0).deadline(idle, header);
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

/// Held from a request's arrival until its response has been sent (or dropped).
pub struct Busy(Arc<Mutex<Load>>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut load = record(&self.0);
        load.busy = load.busy.saturating_sub(1);
        if load.busy == 0 {
            load.idle_since = Instant::now();
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

pin_project! {
    /// A connection's byte stream, watched for request heads starting while it is idle.
    /// HTTP/2 connections are not watched: their frames between requests (pings, settings)
    /// are no request head, and HTTP/2 has no slow-head attack that the idle timer misses.
    pub struct Watched<IO> {
        #[pin]
        io: IO,
        activity: Activity,
        // `None` until the first bytes say which protocol the client speaks.
        http1: Option<bool>,
    }
}

impl<IO> Watched<IO> {
    /// `http2_only`: the port speaks nothing else, so there is nothing to watch.
    pub fn new(io: IO, activity: Activity, http2_only: bool) -> Self {
        Self {
            io,
            activity,
            http1: http2_only.then_some(false),
        }
    }
}

/// Whether the first bytes of a connection are those of HTTP/1 (`Some(true)`), HTTP/2's
/// preface (`Some(false)`), or too few to tell (`None`).
fn speaks_http1(first: &[u8]) -> Option<bool> {
    let probe = &first[..first.len().min(HTTP2_PREFACE.len())];
    if !HTTP2_PREFACE.starts_with(probe) {
        Some(true)
    } else if probe.len() >= 4 {
        Some(false)
    } else {
        None
    }
}

impl<IO: AsyncRead> AsyncRead for Watched<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let polled = this.io.poll_read(cx, buf);
        let read = &buf.filled()[before..];
        if matches!(polled, Poll::Ready(Ok(()))) && !read.is_empty() {
            if this.http1.is_none() {
                *this.http1 = speaks_http1(read);
            }
            if *this.http1 == Some(true) {
                this.activity.bytes_arrived();
            }
        }
        polled
    }
}

impl<IO: AsyncWrite> AsyncWrite for Watched<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_tell_http1_from_http2() {
        assert_eq!(speaks_http1(b"GET / HTTP/1.1\r\n"), Some(true));
        assert_eq!(speaks_http1(b"POST"), Some(true));
        assert_eq!(speaks_http1(b"P"), None);
        assert_eq!(speaks_http1(b"PRI * HTTP/2.0\r\n"), Some(false));
        assert_eq!(speaks_http1(HTTP2_PREFACE), Some(false));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_answer_and_a_started_head_from_its_first_byte() {
        let activity = Activity::default();
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
}
