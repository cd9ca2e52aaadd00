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
//! - [`settings`]: the connection settings as the command line gives them, and their
//!   defaults; [`endpoint`]: how one listener serves and the pools listeners share. Both are
//!   leaves that the accept loop and each connection read, so that neither imports this file.
//!
//! The library still takes bound listeners and a stop signal: [`serve`] accepts until the
//! signal, then drains every open connection ([`drain`]), and returns when the last one has
//! closed.

mod accept;
mod activity;
mod body;
mod connection;
mod drain;
mod endpoint;
pub mod footprint;
pub mod limits;
mod placement;
mod send;
mod settings;
mod stream;
pub mod tls;
mod watched;
mod wire;

pub use accept::Backoff;
pub use body::{ReceiveBudget, Received};
pub use connection::App;
pub use drain::IDLE_GRACE;
pub use endpoint::{Endpoint, Pools};
pub use send::PIECE;
pub use settings::{
    TransportSettings, DEFAULT_MAX_RECEIVING_BYTES, DEFAULT_SEND_TIMEOUT, METRICS_MAX_CONNECTIONS,
};
pub use tls::{Pem, Tls, TlsError, TlsFiles};
pub use wire::{Grpc, Http, Wire};

use tokio::net::TcpListener;
use tokio::sync::watch;

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
