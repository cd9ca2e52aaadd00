//! A connection's byte stream, watched for what its timers and the answers' charges need
//! (see [`super::activity`]): request heads starting while it is idle, writes the socket
//! refuses, and, over HTTP/1, hyper's write buffer being flushed.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::activity::Activity;

/// The start of every HTTP/2 connection (RFC 9113, section 3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pin_project! {
    /// HTTP/2 connections are not watched for heads: their frames between requests (pings,
    /// settings) are no request head, and HTTP/2 has no slow-head attack that the idle
    /// timer misses.
    pub struct Watched<IO> {
        #[pin]
        io: IO,
        activity: Activity,
        // `None` until the first bytes say which protocol the client speaks.
        http1: Option<bool>,
        // Whether the last write was refused, so that only a change takes the record's lock.
        blocked: bool,
    }
}

impl<IO> Watched<IO> {
    /// `http2_only`: the port speaks nothing else, so there is nothing to tell.
    pub fn new(io: IO, activity: Activity, http2_only: bool) -> Self {
        if http2_only {
            activity.speaks(true);
        }
        Self {
            io,
            activity,
            http1: http2_only.then_some(false),
            blocked: false,
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
                if let Some(http1) = *this.http1 {
                    this.activity.speaks(!http1);
                }
            }
            if *this.http1 == Some(true) {
                this.activity.bytes_arrived();
            }
        }
        polled
    }
}

/// Notes on the record whether a write was taken, from its result.
fn watch_write<T>(
    polled: Poll<io::Result<T>>,
    taken: impl FnOnce(&T) -> bool,
    blocked: &mut bool,
    activity: &Activity,
) -> Poll<io::Result<T>> {
    match &polled {
        Poll::Pending if !*blocked => {
            *blocked = true;
            activity.write_blocked();
        }
        Poll::Ready(Ok(done)) if *blocked && taken(done) => {
            *blocked = false;
            activity.write_taken();
        }
        _ => {}
    }
    polled
}

impl<IO: AsyncWrite> AsyncWrite for Watched<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let polled = this.io.poll_write(cx, buf);
        watch_write(polled, |n| *n > 0, this.blocked, this.activity)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        let polled = this.io.poll_flush(cx);
        // hyper's HTTP/1 writer flushes its socket only once its own buffer is empty, so
        // every answer byte handed to it before now is in the socket.
        if *this.http1 == Some(true) && matches!(polled, Poll::Ready(Ok(()))) {
            this.activity.flushed();
        }
        // A TLS stream that cannot flush is a socket that takes nothing.
        watch_write(polled, |()| true, this.blocked, this.activity)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let polled = this.io.poll_write_vectored(cx, bufs);
        watch_write(polled, |n| *n > 0, this.blocked, this.activity)
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
}
