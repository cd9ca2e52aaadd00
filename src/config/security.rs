//! The Security heading of `serve --help`: TLS on both ports, bearer tokens, and the
//! folders besides --model-dir that a reload may name.

use std::path::PathBuf;

use clap::Args;

use super::aliases::spellings_of;

/// TLS, bearer tokens, and the folders besides --model-dir a reload may name.
#[derive(Debug, Clone, Args)]
pub struct SecurityArgs {
    /// TLS on the HTTP and gRPC ports: the server's certificate chain (PEM, leaf first).
    #[arg(
        long,
        env = "TENSORPORT_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        env = "TENSORPORT_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// Require client certificates issued by this CA (PEM) on the HTTP and gRPC ports (mTLS).
    #[arg(
        long,
        env = "TENSORPORT_TLS_CLIENT_CA",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,

    /// TF Serving's SSLConfig text proto (server_key, server_cert, custom_ca, client_verify,
    /// PEM text inline) instead of --tls-cert, --tls-key and --tls-client-ca; TLS then covers
    /// the HTTP port too, where TF Serving's REST API stays plain. Alias: --ssl_config_file.
    #[arg(
        long,
        env = "TENSORPORT_SSL_CONFIG_FILE",
        value_name = "FILE",
        aliases = spellings_of("ssl_config_file"),
        conflicts_with_all = ["tls_cert", "tls_key", "tls_client_ca"]
    )]
    pub ssl_config_file: Option<PathBuf>,

    /// Bearer tokens and the API groups each may use, one `TOKEN GROUPS [NAME]` a line (see
    /// the README's Security section); without it every API is open to anyone.
    #[arg(long, env = "TENSORPORT_AUTH_TOKEN_FILE", value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,

    /// Folders besides --model-dir and the start-up models' own that a TF Serving
    /// reload-config base_path may name (comma-separated: DIR[,DIR]).
    #[arg(
        long,
        env = "TENSORPORT_ALLOW_MODEL_PATHS",
        value_name = "DIRS",
        value_delimiter = ','
    )]
    pub allow_model_paths: Vec<PathBuf>,

    /// Folders a TF Serving reload-config logging_config filename_prefix may write payload
    /// logs into, besides those of the start-up models.config (comma-separated: DIR[,DIR]);
    /// a relative prefix starts at the first.
    #[arg(
        long,
        env = "TENSORPORT_ALLOW_LOG_PATHS",
        value_name = "DIRS",
        value_delimiter = ','
    )]
    pub allow_log_paths: Vec<PathBuf>,
}
