//! The connection side of every port: accepting, TLS, HTTP/1 and HTTP/2, and the limits that
//! keep a slow, idle or hostile client from holding what others need.
//!
//! - [`accept`]: the accept loop. A connection is served only once a slot of the connection
//!   cap is free, and until then its listener accepts no more (later clients wait in the
//!   kernel's backlog); accept errors such as running out of descriptors are retried after a
//!   growing pause, never in a hot loop.
//! - [`tls`]: rustls, from PEM files; client certificates required when a CA is given.
//! - [`connection`]: one connection, served by hyper with timers: the TLS handshake and the
//!   request head must arrive within the header-read timeout, a connection with no request in
//!   flight for the idle timeout is closed, and so is one whose socket takes no bytes for the
//!   send timeout ([`activity`] keeps the three, [`watched`] watches the socket); HTTP/2
//!   connections are pinged.
//! - [`send`]: each answer's bytes stay charged to the request memory budget
//!   ([`crate::overload`]) until they are written, and over HTTP/2 an answer the client takes
//!   none of for the send timeout has its stream reset ([`stream`]).
//! - [`drain`]: at shutdown, HTTP/2 connections are told GOAWAY and HTTP/1.1 ones stay open
//!   until the server is quiet, answering with `Connection: close`, so that no request on
//!   its way on an open connection is lost.
//! - [`body`]: a request's body is read in full (within the body-read timeout) *before* the
//!   request reaches the overload stack. A client that trickles its body therefore holds a
//!   connection, which the cap bounds and the timeout ends, but never one of the
//!   `--max-concurrent-requests` slots that the other clients need.
//! - [`footprint`]: what a body read in full will take once decoded, estimated from its
//!   bytes and put in the request's extensions for the request memory budget of
//!   [`crate::overload`].
//! - [`limits`]: the default connection cap, from the process's descriptor limit.
//!
//! The library still takes bound listeners and a stop signal: [`serve`] accepts until the
//! signal, then drains every open connection ([`drain`]), and returns when the last one has
//! closed.

mod accept;
mod activity;
mod body;
mod connection;
mod drain;
pub mod footprint;
pub mod limits;
mod send;
mod stream;
pub mod tls;
mod watched;
mod wire;

pub use accept::Backoff;
pub use body::{ReceiveBudget, Received};
pub use connection::App;
pub use drain::IDLE_GRACE;
pub use send::PIECE;
pub use tls::{Tls, TlsError, TlsFiles};
pub use wire::{Grpc, Http, Wire};

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::metrics::SendTimeouts;
use crate::overload::MemoryBudget;

/// The connection settings, as the command line gives them.
#[derive(Debug, Clone)]
pub struct TransportSettings {
    /// `None`: plain TCP.
    pub tls: Option<TlsFiles>,
    /// Open connections on the HTTP and gRPC ports together; `None`: derived from the
    /// descriptor limit when the server starts (see [`limits::default_max_connections`]).
    pub max_connections: Option<usize>,
    /// From accepting a connection to the end of its TLS handshake, and over HTTP/1 from the
    /// first byte of a request head to its end.
    pub header_read_timeout: Duration,
    /// From a request's head to the end of its body.
    pub body_read_timeout: Duration,
    /// How long a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// How long an answer may wait for the client to take any of its bytes: then its HTTP/2
    /// stream is reset, or its connection closed when the socket itself takes nothing.
    pub send_timeout: Duration,
    /// Memory for request bodies being read before their requests are admitted, across
    /// all connections of the HTTP and gRPC ports.
    pub max_receiving_bytes: usize,
    /// How often an HTTP/2 connection is pinged; `None`: never.
    pub http2_keepalive_interval: Option<Duration>,
    /// How long a ping may go unanswered before the connection is closed.
    pub http2_keepalive_timeout: Duration,
}

impl Default for TransportSettings {
    fn default() -> Self {
        Self {
            tls: None,
            max_connections: None,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            send_timeout: DEFAULT_SEND_TIMEOUT,
            max_receiving_bytes: DEFAULT_MAX_RECEIVING_BYTES,
            http2_keepalive_interval: Some(Duration::from_secs(30)),
            http2_keepalive_timeout: Duration::from_secs(20),
        }
    }
}

/// The default of [`TransportSettings::send_timeout`]: far longer than a client that reads
/// takes to make room for the next piece of an answer, short enough that answers a client
/// holds without reading are freed well within a keep-alive connection's life.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// The default of [`TransportSettings::max_receiving_bytes`]: 1 GiB.
pub const DEFAULT_MAX_RECEIVING_BYTES: usize = 1 << 30;

/// Connections the `--metrics-port` listener may hold, apart from the main cap, so that a
/// flood on the other ports never locks out the probes and the scraper. Taken from the
/// descriptors [`limits`] keeps in reserve.
pub const METRICS_MAX_CONNECTIONS: usize = 64;

/// What listeners draw on together: open connections, memory for bodies being read and for
/// answers being sent, and the count of connections serving a request (for the drain).
#[derive(Clone)]
pub struct Pools {
    connections: Arc<Semaphore>,
    receiving: ReceiveBudget,
    answers: MemoryBudget,
    traffic: Arc<drain::Traffic>,
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
    tls: Option<TlsAcceptor>,
    pools: Pools,
    settings: Arc<TransportSettings>,
    /// Bodies announced larger than this are refused unread.
    max_body_bytes: usize,
    send_timeouts: SendTimeouts,
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

/// Serves `app` on `listener` until `stop` turns true, then lets open connections finish
/// their requests and close, and returns once the last one has.
pub async fn serve<W, S>(
    listener: TcpListener,
    app: S,
    endpoint: Endpoint,
    stop: watch::Receiver<bool>,
) where
    W: Wire,
    S: connection::App<W>,
{
    accept::run::<W, S>(listener, app, endpoint, stop).await;
}

/// Resolves once `stop` turns true (or its sender is gone, which also means stop).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
