//! Why the configuration was refused: one enum for the command line, the environment and the
//! `--config` file, kept in a leaf so that the parser and the settings builders share it.

use std::path::PathBuf;

use crate::overload::ApiKeysError;

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Clap(#[from] clap::Error),
    #[error("--config: cannot read {path}: {source}")]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--config: {path} is not valid TOML: {message}")]
    ParseFile { path: PathBuf, message: String },
    #[error(
        "--config: {path}: unknown setting '{key}' (settings are flag names, such as grpc_port)"
    )]
    UnknownKey { path: PathBuf, key: String },
    #[error("--config: {path}: setting '{key}' must be a string, number or boolean")]
    BadValue { path: PathBuf, key: String },
    #[error(
        "--model-dir is required (or TENSORPORT_MODEL_DIR, or model_dir in --config), unless \
         --model-config-file or --model-base-path names the models"
    )]
    MissingModelDir,
    #[error("--model-dir: {0} is neither a directory nor a model file")]
    ModelDirNotADirectory(PathBuf),
    #[error(transparent)]
    ApiKeys(#[from] ApiKeysError),
    #[error("--trace-config: {0}")]
    Trace(String),
    #[error("--{flag}: {why}")]
    PeerRefused { flag: String, why: String },
    /// `setting` names the file and field, or the environment variable.
    #[error("mlserver start: {setting}: {why}")]
    MlserverRefused { setting: String, why: String },
    #[error("--{flag}: {path}: {why}")]
    PeerFile {
        flag: &'static str,
        path: PathBuf,
        why: String,
    },
    #[error("{file}: cannot read the line '{line}' (NAME KIND ACTION [NOTE])")]
    PeerTable { file: &'static str, line: String },
}
