//! The Overload heading of `serve --help`: what clients may make the server hold (bytes
//! received, decoded and unsent, requests in flight, rates) and the default deadline.

use std::path::PathBuf;

use clap::Args;
use http::HeaderName;

/// What a client may make the server hold: sizes, rates, concurrency and deadlines.
#[derive(Debug, Clone, Args)]
pub struct OverloadArgs {
    /// Largest request body or gRPC message, in bytes, counted after gzip is inflated (a gzip
    /// body or message that would inflate past it is refused); also the largest tensor a
    /// request may expand to.
    #[arg(long, env = "TENSORPORT_MAX_REQUEST_BYTES", default_value_t = 64 << 20,
          value_parser = clap::value_parser!(u64).range(1024..=(4u64 << 30)))]
    pub max_request_bytes: u64,

    /// Requests per second each client may send (0: no rate limit). A client is one of the
    /// API keys listed in --rate-limit-keys-file when it sends one, else its IP address.
    #[arg(long, env = "TENSORPORT_RATE_LIMIT_PER_SEC", default_value_t = 0)]
    pub rate_limit_per_sec: u32,

    /// Requests a client may send in a burst above its rate (0: one second's worth).
    #[arg(long, env = "TENSORPORT_RATE_LIMIT_BURST", default_value_t = 0)]
    pub rate_limit_burst: u32,

    /// Request header holding a client's API key, to rate-limit listed keys on their own
    /// rather than by IP address (needs --rate-limit-keys-file).
    #[arg(
        long,
        env = "TENSORPORT_RATE_LIMIT_KEY_HEADER",
        value_name = "HEADER",
        requires = "rate_limit_keys_file"
    )]
    pub rate_limit_key_header: Option<HeaderName>,

    /// File of API keys (one a line, # comments) that get a rate-limit bucket of their own;
    /// a key not listed counts against its IP address.
    #[arg(
        long,
        env = "TENSORPORT_RATE_LIMIT_KEYS_FILE",
        value_name = "FILE",
        requires = "rate_limit_key_header"
    )]
    pub rate_limit_keys_file: Option<PathBuf>,

    /// Requests in flight across both ports; more are refused at once with 429 /
    /// RESOURCE_EXHAUSTED (0: no limit).
    #[arg(
        long,
        env = "TENSORPORT_MAX_CONCURRENT_REQUESTS",
        default_value_t = 512
    )]
    pub max_concurrent_requests: usize,

    /// Bytes the requests in flight may take once decoded, across both ports (0: no limit).
    /// Each request's decoded size is estimated from its body before it is decoded (strings
    /// and JSON values are charged per element as well as per byte); one that would go over
    /// what is left is refused at once with 429 / RESOURCE_EXHAUSTED. Answers count too,
    /// from when they are built until their bytes are written to the socket.
    #[arg(long, env = "TENSORPORT_MAX_INFLIGHT_REQUEST_BYTES", value_name = "BYTES",
          default_value_t = crate::overload::DEFAULT_MAX_INFLIGHT_REQUEST_BYTES)]
    pub max_inflight_request_bytes: u64,

    /// Deadline in milliseconds for requests that set none (grpc-timeout, the
    /// x-request-timeout-ms header, or KServe's timeout parameter); 0: none.
    #[arg(long, env = "TENSORPORT_REQUEST_TIMEOUT_MS", default_value_t = 0)]
    pub request_timeout_ms: u64,

    /// Bytes of request bodies being read, before their requests are admitted, across all
    /// connections of both ports; a body that would go over waits (its sender is slowed)
    /// until others are done or --body-read-timeout-secs ends it. At least one
    /// --max-request-bytes body always fits.
    #[arg(long, env = "TENSORPORT_MAX_RECEIVING_BYTES", value_name = "BYTES",
          default_value_t = crate::transport::DEFAULT_MAX_RECEIVING_BYTES as u64)]
    pub max_receiving_bytes: u64,
}
