//! The connection settings of every port, as the command line gives them, and their
//! defaults.

use std::time::Duration;

use super::tls::TlsFiles;

/// The connection settings, as the command line gives them.
#[derive(Debug, Clone)]
pub struct TransportSettings {
    /// `None`: plain TCP.
    pub tls: Option<TlsFiles>,
    /// Open connections on the HTTP and gRPC ports together; `None`: derived from the
    /// descriptor limit when the server starts (see [`super::limits::default_max_connections`]).
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
/// descriptors [`super::limits`] keeps in reserve.
pub const METRICS_MAX_CONNECTIONS: usize = 64;
