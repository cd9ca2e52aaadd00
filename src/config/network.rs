//! The Network heading of `serve --help`: where the server listens, how long a connection
//! may take over each step, and how it stops (drain, then close).

use std::net::IpAddr;

use clap::Args;

use super::aliases::spellings_of;

/// Where the server listens, how long connections may take, and how it stops.
#[derive(Debug, Clone, Args)]
pub struct NetworkArgs {
    /// Address to listen on.
    #[arg(long, env = "TENSORPORT_HOST", default_value = "0.0.0.0")]
    pub host: IpAddr,

    /// gRPC port (TF Serving and KServe gRPC); 0 picks a free port.
    /// Alias: --port (TF Serving).
    #[arg(
        long,
        env = "TENSORPORT_GRPC_PORT",
        default_value_t = 8500,
        aliases = spellings_of("grpc_port")
    )]
    pub grpc_port: u16,

    /// HTTP port (TF Serving REST, KServe HTTP); 0 picks a free port.
    /// Aliases: --rest_api_port (TF Serving), --http-port (Triton).
    #[arg(long, env = "TENSORPORT_REST_PORT", default_value_t = 8501,
          aliases = spellings_of("rest_port"))]
    pub rest_port: u16,

    /// Serve no HTTP port (TF Serving's REST API off, as with its --rest_api_port=0; Triton's
    /// --allow-http=false).
    #[arg(long, env = "TENSORPORT_DISABLE_REST", conflicts_with = "disable_grpc")]
    pub disable_rest: bool,

    /// Serve no gRPC port (TF Serving's --port=0; Triton's --allow-grpc=false).
    #[arg(long, env = "TENSORPORT_DISABLE_GRPC")]
    pub disable_grpc: bool,

    /// Async worker threads for the network side (0: one per core).
    #[arg(long, env = "TENSORPORT_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,

    /// On SIGTERM / SIGINT, how long requests in flight and queued may take to finish.
    #[arg(long, env = "TENSORPORT_DRAIN_SECS", default_value_t = 30)]
    pub drain_secs: u64,

    /// On SIGTERM / SIGINT, how long readiness is false before the listeners close, so that
    /// load balancers stop sending work first.
    #[arg(long, env = "TENSORPORT_SHUTDOWN_DELAY_MS", default_value_t = 0)]
    pub shutdown_delay_ms: u64,

    /// Open connections on the HTTP and gRPC ports together; beyond it, new connections wait
    /// in the listen backlog. Default: the descriptor limit less a reserve for model files
    /// and shared-memory regions (a quarter, at least 512, at most half), at most 65536.
    #[arg(long, env = "TENSORPORT_MAX_CONNECTIONS", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: Option<u64>,

    /// Seconds a client has to finish its TLS handshake, and over HTTP/1 to send the rest of
    /// a request head once its first byte has arrived.
    #[arg(long, env = "TENSORPORT_HEADER_READ_TIMEOUT_SECS", default_value_t = 10, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_read_timeout_secs: u64,

    /// Seconds a client has to send a request body once its head has arrived; slower
    /// requests are answered 408 / DEADLINE_EXCEEDED. Bodies are read before a request takes
    /// one of --max-concurrent-requests.
    #[arg(long, env = "TENSORPORT_BODY_READ_TIMEOUT_SECS", default_value_t = 60, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub body_read_timeout_secs: u64,

    /// Seconds a connection may stay open with no request in flight before it is closed.
    #[arg(long, env = "TENSORPORT_IDLE_TIMEOUT_SECS", default_value_t = 60, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_secs: u64,

    /// Seconds an answer may wait for its client to take any of its bytes (over HTTP/2, its
    /// next 64 KiB); then its HTTP/2 stream is reset, or its connection closed when the
    /// socket takes nothing at all. Until sent, answers count against
    /// --max-inflight-request-bytes.
    #[arg(long, env = "TENSORPORT_SEND_TIMEOUT_SECS", value_name = "SECS",
          default_value_t = crate::transport::DEFAULT_SEND_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub send_timeout_secs: u64,

    /// Seconds between HTTP/2 keep-alive pings on an open connection (0: none).
    #[arg(
        long,
        env = "TENSORPORT_HTTP2_KEEPALIVE_INTERVAL_SECS",
        default_value_t = 30,
        value_name = "SECS"
    )]
    pub http2_keepalive_interval_secs: u64,

    /// Seconds an HTTP/2 keep-alive ping may go unanswered before the connection is closed.
    #[arg(long, env = "TENSORPORT_HTTP2_KEEPALIVE_TIMEOUT_SECS", default_value_t = 20, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub http2_keepalive_timeout_secs: u64,
}
