//! Protocol adapters: wire formats in, domain types to [`crate::infer::InferService`], wire
//! formats out.

pub mod compression;
pub mod grpc_compression;
pub mod health;
pub mod heavy;
pub mod json_body;
pub mod json_decode;
mod json_lift;
mod json_number;
#[cfg(test)]
mod json_round_trip;
mod json_scan;
mod json_shape;
pub mod json_tensor;
mod json_values;
pub mod kserve;
pub mod rest_util;
pub mod route_table;
pub mod scrape;
pub mod status;
pub mod tfserving;
