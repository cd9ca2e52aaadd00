//! KServe v2 over HTTP, under `/v2`, including Triton's binary tensor data and shared-memory
//! extensions.
//!
//! [`routes`] is the dispatcher: it names every path and the operation that answers it. The
//! operations stand beneath it, one file per extension (infer, metadata, repository, shared
//! memory, statistics), and what they share (the handler state, the reply type, the peer of a
//! connection, JSON body helpers) is `support.rs`, beneath them all. The JSON infer body is
//! read by `decode.rs`, over the serde structs of `body.rs` and the number lists `lift.rs`
//! takes out first.

pub mod body;
mod decode;
mod infer;
pub mod lift;
mod logging;
mod metadata;
mod repository;
mod routes;
mod shared_memory;
mod statistics;
mod support;
mod trace;

pub use decode::decode_infer_body;
pub use infer::infer_request;
pub use routes::routes;
