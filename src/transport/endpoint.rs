//! How one listener serves ([`Endpoint`]) and what listeners draw on together ([`Pools`]):
//! the accept loop and each connection read them, so they stand in a leaf below both.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::body::ReceiveBudget;
use super::drain::Traffic;
use super::settings::TransportSettings;
use crate::metrics::SendTimeouts;
use crate::overload::MemoryBudget;

/// What listeners draw on together: open connections, memory for bodies being read and for
/// answers being sent, and the count of connections serving a request (for the drain).
#[derive(Clone)]
pub struct Pools {
    pub(super) connections: Arc<Semaphore>,
    pub(super) receiving: ReceiveBudget,
    pub(super) answers: MemoryBudget,
    pub(super) traffic: Arc<Traffic>,
}

impl Pools {
    /// Room for `max_connections` connections and `receiving_bytes` of bodies being read
    /// (at least one body of `max_body_bytes`); answers are charged to `answers` until sent.
    pub fn new(
        max_connections: usize,
        receiving_bytes: usize,
        max_body_bytes: usize,
        answers: MemoryBudget,
    ) -> Self {
        Self {
            connections: Arc::new(Semaphore::new(max_connections)),
            receiving: ReceiveBudget::new(receiving_bytes, max_body_bytes),
            answers,
            traffic: Arc::default(),
        }
    }
}

/// How one listener serves: its TLS, the pools it draws on, its timeouts.
#[derive(Clone)]
pub struct Endpoint {
    pub(super) tls: Option<TlsAcceptor>,
    pub(super) pools: Pools,
    pub(super) settings: Arc<TransportSettings>,
    /// Bodies announced larger than this are refused unread.
    pub(super) max_body_bytes: usize,
    pub(super) send_timeouts: SendTimeouts,
}

impl Endpoint {
    /// `pools` may be shared with other endpoints, so that they share one cap.
    pub fn new(
        tls: Option<TlsAcceptor>,
        pools: Pools,
        settings: Arc<TransportSettings>,
        max_body_bytes: usize,
    ) -> Self {
        Self {
            tls,
            pools,
            settings,
            max_body_bytes,
            send_timeouts: SendTimeouts::default(),
        }
    }

    /// Counts the send timeout's cuts in `send_timeouts` (not counted by default).
    pub fn counting_send_timeouts(mut self, send_timeouts: SendTimeouts) -> Self {
        self.send_timeouts = send_timeouts;
        self
    }
}
