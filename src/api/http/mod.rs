//! The HTTP plumbing both protocols share, beneath their handlers: the request body read as
//! one `Bytes` within its limit ([`body`]), gzip on the HTTP port ([`compression`]) and
//! answers in kind on the gRPC port ([`grpc_compression`]), large JSON work kept off the
//! runtime worker ([`heavy`]), JSON answers and the `{"error": "..."}` shape ([`response`]),
//! and the router that remembers its paths for the OpenAPI check ([`route_table`]).

pub mod body;
pub mod compression;
pub mod grpc_compression;
pub mod heavy;
pub mod model_name;
pub mod response;
pub mod route_table;
