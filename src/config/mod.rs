//! Command-line configuration. Every `serve` flag can also come from the environment
//! (`TENSORPORT_<FLAG>`) or from a TOML file given with `--config`; a flag beats the
//! environment, which beats the file, which beats the default.
//!
//! - `cli`: `Cli` and its one subcommand; parsing, the `--config` merge and the model-source
//!   check; the hint for peers' command lines that leave out `serve`.
//! - `serve_args`: `ServeArgs`, one flattened group per `--help` heading, and the typed
//!   settings built from it (`ServerOptions`, `ShmLimits`, `BatchSettings`).
//! - `network`, `models`, `batching`, `overload`, `security`, `shared_memory`,
//!   `observability`, `compatibility`: the flags of each heading, in `--help`'s order.
//! - `aliases`: the table of TF Serving's and Triton's spellings each flag also answers to.
//! - `peers`: Triton's and TF Serving's whole command lines (`tensorport tritonserver ...`,
//!   `tensorport tensorflow_model_server ...`, or a symlink of either name), with their
//!   defaults.
//! - `file`: the `--config` file read as extra arguments.
//! - `monitoring`, `ssl`, `platform`: TF Serving's `--monitoring_config_file`,
//!   `--ssl_config_file` and `--platform_config_file`, read into the metrics path, the TLS
//!   settings, and the runtime threads and batching.
//! - `error`: `ConfigError`, the one error of this layer.

mod aliases;
mod batching;
mod cli;
mod compatibility;
mod error;
mod file;
mod models;
mod monitoring;
mod network;
mod observability;
mod overload;
mod peers;
mod platform;
mod security;
mod serve_args;
mod shared_memory;
mod ssl;

pub use aliases::{spellings_of, Peer, PeerSpelling, PEER_SPELLINGS};
pub use batching::BatchingArgs;
pub use cli::{missing_serve_hint, Cli, Command};
pub use compatibility::CompatibilityArgs;
pub use error::ConfigError;
pub use models::ModelsArgs;
pub use network::NetworkArgs;
pub use observability::{LogFormat, LogLevel, ObservabilityArgs};
pub use overload::OverloadArgs;
pub use peers::{
    peer_command_line, peer_flags, translate, translated_in_code, Action, Kind, NotApplied,
    PeerCommandLine, PeerFlag, TF_SERVING_PROGRAM, TRITON_PROGRAM,
};
pub use platform::PlatformSettings;
pub use security::SecurityArgs;
pub use serve_args::ServeArgs;
pub use shared_memory::SharedMemoryArgs;
