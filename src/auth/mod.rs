//! Authentication by API group, as Triton's restricted protocols do it.
//!
//! Every route of the HTTP port and every gRPC method belongs to one [`Group`] (the table is
//! [`groups::ROUTES`]). `--auth-token-file` grants groups to bearer tokens
//! ([`token_file`] documents the format); a request names its token in the `authorization`
//! header (`Bearer <token>`), which gRPC clients send as metadata. A request without a known
//! token is refused 401 / UNAUTHENTICATED, one whose token lacks the route's group 403 /
//! PERMISSION_DENIED. Without the flag every group is open, as before.
//!
//! Probes (`health`) are open to requests without a token unless the file says otherwise: a
//! kubelet or load-balancer probe usually cannot carry a secret, and a probe tells only
//! whether the server is up and ready. The token file's `-` line changes that.
//!
//! The check is [`layer::AuthLayer`], placed innermost in the overload stack (see
//! [`crate::server`]), so that refusals are counted and logged like any other answer.
//!
//! The files import one way: [`layer`] asks [`access`], which reads a [`token_file`] into the
//! leaf `policy` (the grants and the constant-time comparison) over [`groups`] (the groups and
//! the route table). This file only declares them and re-exports what the server uses.

pub mod access;
pub mod groups;
pub mod layer;
mod policy;
pub mod token_file;

pub use access::{Access, Denied};
pub use groups::{Group, Groups};
pub use layer::AuthLayer;
pub use token_file::TokenFileError;
