//! The server's drain as the batchers hear of it: a leaf the repository holds one of and
//! hands to every batcher it starts, so that one call reaches every queue, a version being
//! retired included.

use std::sync::Arc;

use tokio::sync::watch;

/// Once started, every batcher made with (a clone of) it stops waiting for company: what is
/// queued, and what arrives later, runs as soon as an instance is free, without waiting out
/// `max_queue_delay`. The server starts it when its drain begins, so that a request queued
/// under a long delay is answered within the drain rather than cut off at its end. It never
/// stops again.
#[derive(Debug, Clone)]
pub struct Flush(Arc<watch::Sender<bool>>);

impl Default for Flush {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(false)))
    }
}

impl Flush {
    pub fn start(&self) {
        self.0.send_replace(true);
    }

    pub fn started(&self) -> bool {
        *self.0.borrow()
    }

    /// What an actor waits on: it changes once, to `true`; closed, the holders are gone and
    /// nothing will start it.
    pub(super) fn subscribe(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }
}
