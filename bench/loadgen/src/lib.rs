//! A load generator for model servers, cheap enough on the client side to share a small
//! machine with the server it measures.
//!
//! It speaks KServe v2 over gRPC and HTTP (JSON and the binary-tensor extension), TF Serving
//! over gRPC and REST, and, as the floor, runs the model in-process through ONNX Runtime with
//! no server at all. Every request body is built once before the run and shared (`Bytes`
//! clones), so the client does not allocate or serialise payloads while measuring.
//!
//! Load is a closed loop (N requests always in flight) or an open loop (requests sent on a
//! fixed schedule at R per second). Open-loop latency counts from the scheduled send time, so
//! a server that falls behind is charged for the queue it causes (no coordinated omission).

pub mod config;
pub mod driver;
pub mod error;
pub mod floor;
pub mod grpc;
pub mod http;
pub mod payload;
pub mod report;
pub mod sender;
pub mod shm;

pub use config::{Config, InputSpec, Load, OutputSpec, Protocol};
pub use error::LoadgenError;
pub use report::Report;

/// Sets up the target described by `config`, runs the load, and summarises it.
pub async fn run(config: &Config) -> Result<Report, LoadgenError> {
    let (sender, setup) = sender::Setup::new(config).await?.split();
    let stats = driver::drive(sender, config).await?;
    setup.finish().await?;
    Ok(Report::new(config, &stats))
}
