//! Shutting connections down without losing a request that is on its way.
//!
//! On the stop signal the listeners close at once, so new connections are refused; the open
//! ones are drained:
//!
//! - HTTP/2 is told GOAWAY through hyper's graceful shutdown: a first GOAWAY naming the
//!   highest stream id and a PING, then, once the PING comes back, one naming the last stream
//!   taken. A stream the client sent before it heard is served, and it opens no more.
//! - HTTP/1.1 has nothing of the kind: an idle kept-alive connection can only be closed, and
//!   a request the client sent an instant before, still on the wire or unread in the socket,
//!   is then lost (the client sees the connection closed under it; hyper's own graceful
//!   shutdown closes idle connections at once, and so lost one or two requests per SIGTERM
//!   under load). So an HTTP/1.1 connection stays open through the drain: every answer made
//!   from then on says `Connection: close`, after which hyper closes the connection, and an
//!   idle one is closed only once [`IDLE_GRACE`] has passed *and* no request is in flight on
//!   any connection of its [`Traffic`]. The grace covers requests sent just before the
//!   signal; waiting for the others means that while the server still has work, a late
//!   request on an open connection is answered, not raced.
//!
//! A client that sends on an idle HTTP/1.1 connection at the very moment it is closed, after
//! all of that, still loses its request; no HTTP/1.1 server can prevent it. That is why
//! readiness turns false first (load balancers stop sending), and why clients retry
//! idempotent requests on a connection that closed under them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{watch, Notify};

/// How long an idle HTTP/1.1 connection stays open once the drain has begun: far longer
/// than a request sent just before the signal takes to arrive, short enough not to hold up
/// the exit of a server with nothing to do.
pub const IDLE_GRACE: Duration = Duration::from_secs(1);

/// Which connections of a pool are serving a request, so that a draining connection can
/// wait until none is. Counted per connection (its first request in flight makes it busy,
/// its last one done makes it idle), so a request costs two atomic operations on it.
#[derive(Debug, Default)]
pub struct Traffic {
    busy: AtomicUsize,
    draining: AtomicBool,
    quiet: Notify,
}

impl Traffic {
    /// A connection has its first request in flight.
    pub(super) fn connection_busy(&self) {
        self.busy.fetch_add(1, Ordering::SeqCst);
    }

    /// A connection has none in flight any more.
    pub(super) fn connection_idle(&self) {
        let before = self.busy.fetch_sub(1, Ordering::SeqCst);
        // Only a drain waits for quiet; before it, nobody is woken.
        if before == 1 && self.draining.load(Ordering::SeqCst) {
            self.quiet.notify_waiters();
        }
    }

    pub(super) fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Resolves once no connection has a request in flight (after [`Self::start_draining`]).
    pub(super) async fn quiet(&self) {
        loop {
            let notified = self.quiet.notified();
            tokio::pin!(notified);
            // Registered before the count is read, so a connection that goes idle in
            // between still wakes this one.
            notified.as_mut().enable();
            if self.busy.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Resolves once `stop` turns true (or its sender is gone, which also means stop): where
/// the accept loop stops accepting and each connection begins its drain.
pub(super) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn quiet_comes_when_the_last_busy_connection_goes_idle() {
        let traffic = std::sync::Arc::new(Traffic::default());
        traffic.connection_busy();
        traffic.connection_busy();
        traffic.start_draining();
        let quiet = traffic.quiet();
        tokio::pin!(quiet);
        assert!(futures::poll!(&mut quiet).is_pending());
        traffic.connection_idle();
        assert!(futures::poll!(&mut quiet).is_pending());
        traffic.connection_idle();
        quiet.await;
        // And at once when nothing is in flight.
        traffic.quiet().await;
    }
}
