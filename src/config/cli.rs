//! The command line: `tensorport serve` and its flags, read once in `main`, with the gaps
//! filled from the `--config` file, then checked for a model source.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use super::error::ConfigError;
use super::file::file_arguments;
use super::serve_args::ServeArgs;

#[derive(Debug, Parser)]
#[command(
    name = "tensorport",
    version = crate::build_info::VERSION,
    about = crate::build_info::ABOUT
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load the models in --model-dir and serve them.
    Serve(ServeArgs),
}

/// A hint for a command line that gives `serve`'s flags without `serve` (as TF Serving's and
/// Triton's binaries, which have no subcommand, are run): `None` when `serve` or a help or
/// version request comes first, or when no flag was given at all.
pub fn missing_serve_hint(args: &[OsString]) -> Option<String> {
    let given: Vec<String> = args
        .iter()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let first = given.first()?;
    let not_for_serve = ["serve", "help", "-h", "--help", "-V", "--version"];
    if not_for_serve.contains(&first.as_str()) || !given.iter().any(|arg| arg.starts_with("--")) {
        return None;
    }
    Some(format!(
        "hint: the server runs as a subcommand: tensorport serve {}",
        given.join(" ")
    ))
}

impl Cli {
    /// Parses `args` (including the program name), filling gaps from the `--config` file.
    pub fn parse_from_args(args: Vec<OsString>) -> Result<Self, ConfigError> {
        let command = Self::command();
        let matches = command.clone().try_get_matches_from(&args)?;
        let Some(("serve", serve)) = matches.subcommand() else {
            return Ok(Self::from_arg_matches(&matches)?);
        };
        let Some(path) = serve.get_one::<PathBuf>("config").cloned() else {
            return Self::validated(Self::from_arg_matches(&matches)?);
        };
        let mut args = args;
        args.extend(file_arguments(&path, serve, &command)?);
        let matches = command.try_get_matches_from(&args)?;
        Self::validated(Self::from_arg_matches(&matches)?)
    }

    fn validated(self) -> Result<Self, ConfigError> {
        let Command::Serve(serve) = &self.command;
        let Some(dir) = serve.models.model_dir.as_ref() else {
            if serve.compatibility.model_config_file.is_some()
                || serve.compatibility.model_base_path.is_some()
            {
                return Ok(self);
            }
            return Err(ConfigError::MissingModelDir);
        };
        if !dir.is_dir() && !dir.is_file() {
            return Err(ConfigError::ModelDirNotADirectory(dir.clone()));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::config::LogFormat;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn serve(cli: Cli) -> ServeArgs {
        let Command::Serve(serve) = cli.command;
        serve
    }

    #[test]
    fn flags_parse_with_defaults() -> Result<(), ConfigError> {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let cli = Cli::parse_from_args(args(&["tensorport", "serve", "--model-dir", &dir]))?;
        let serve = serve(cli);
        assert_eq!(serve.network.grpc_port, 8500);
        assert_eq!(serve.network.rest_port, 8501);
        let options = serve.server_options()?;
        assert!(options.overload.rate_limit.is_none());
        assert_eq!(options.overload.max_concurrent_requests, 512);
        assert_eq!(options.overload.request_timeout, None);
        assert_eq!(options.drain, Duration::from_secs(30));
        Ok(())
    }

    #[test]
    fn overload_flags_build_the_settings() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir();
        let keys = dir.join(format!("tensorport-keys-{}.txt", std::process::id()));
        std::fs::write(&keys, "alpha\nbeta\n")?;
        let keys_file = keys.to_string_lossy();
        let dir = dir.to_string_lossy();
        let cli = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
            "--rate-limit-per-sec",
            "50",
            "--rate-limit-key-header",
            "x-api-key",
            "--rate-limit-keys-file",
            &keys_file,
            "--max-concurrent-requests",
            "0",
            "--request-timeout-ms",
            "250",
            "--drain-secs",
            "5",
            "--log-format",
            "json",
        ]))?;
        let serve = serve(cli);
        assert_eq!(serve.observability.log_format, LogFormat::Json);
        let options = serve.server_options()?;
        let rate = options.overload.rate_limit.expect("rate limit on");
        assert_eq!((rate.per_second, rate.burst), (50, 50));
        let api_keys = rate.api_keys.expect("listed keys");
        assert_eq!((api_keys.header.as_str(), api_keys.len()), ("x-api-key", 2));
        std::fs::remove_file(&keys)?;
        assert_eq!(options.overload.max_concurrent_requests, 0);
        assert_eq!(
            options.overload.request_timeout,
            Some(Duration::from_millis(250))
        );
        assert_eq!(options.drain, Duration::from_secs(5));
        Ok(())
    }

    #[test]
    fn a_key_header_needs_a_keys_file() {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let err = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
            "--rate-limit-key-header",
            "x-api-key",
        ]));
        let message = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("--rate-limit-keys-file"), "{message}");
    }

    #[test]
    fn transport_flags_build_the_settings() -> Result<(), ConfigError> {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let defaults = serve(Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
        ]))?)
        .server_options()?
        .transport;
        assert_eq!(defaults.tls, None);
        assert_eq!(defaults.max_connections, None);
        assert_eq!(defaults.body_read_timeout, Duration::from_secs(60));
        assert_eq!(defaults.send_timeout, Duration::from_secs(30));
        let cli = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
            "--tls-cert",
            "server.pem",
            "--tls-key",
            "server.key",
            "--tls-client-ca",
            "ca.pem",
            "--max-connections",
            "100",
            "--idle-timeout-secs",
            "5",
            "--send-timeout-secs",
            "7",
            "--http2-keepalive-interval-secs",
            "0",
        ]))?;
        let transport = serve(cli).server_options()?.transport;
        let tls = transport.tls.expect("TLS on");
        assert_eq!(tls.cert, PathBuf::from("server.pem"));
        assert_eq!(tls.client_ca, Some(PathBuf::from("ca.pem")));
        assert_eq!(transport.max_connections, Some(100));
        assert_eq!(transport.idle_timeout, Duration::from_secs(5));
        assert_eq!(transport.send_timeout, Duration::from_secs(7));
        assert_eq!(transport.http2_keepalive_interval, None);
        Ok(())
    }

    #[test]
    fn a_certificate_without_its_key_is_refused() {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let err = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
            "--tls-cert",
            "server.pem",
        ]));
        let message = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("--tls-key"), "{message}");
    }

    #[test]
    fn admin_flags_parse() -> Result<(), ConfigError> {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let cli = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-dir",
            &dir,
            "--allow-model-paths",
            "/srv/a,/srv/b",
            "--auth-token-file",
            "/etc/tensorport/tokens",
        ]))?;
        let serve = serve(cli);
        assert_eq!(
            serve.security.allow_model_paths,
            vec![PathBuf::from("/srv/a"), PathBuf::from("/srv/b")]
        );
        assert_eq!(
            serve.security.auth_token_file.as_deref(),
            Some(Path::new("/etc/tensorport/tokens"))
        );
        Ok(())
    }

    #[test]
    fn bad_values_name_the_flag() {
        let err = Cli::parse_from_args(args(&["tensorport", "serve", "--grpc-port", "http"]));
        let message = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("--grpc-port"), "{message}");
    }

    #[test]
    fn missing_model_dir_is_refused() {
        let err = Cli::parse_from_args(args(&["tensorport", "serve"]));
        assert!(matches!(err, Err(ConfigError::MissingModelDir)));
    }

    #[test]
    fn file_fills_gaps_and_flags_win() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("tensorport-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("tensorport.toml");
        std::fs::write(
            &file,
            format!(
                "model_dir = {:?}\ngrpc_port = 9000\nrest-port = 9001\n",
                dir.display().to_string()
            ),
        )?;
        let file_arg = file.to_string_lossy().to_string();
        let cli = Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--config",
            &file_arg,
            "--rest-port",
            "7000",
        ]))?;
        let serve = serve(cli);
        assert_eq!(serve.network.grpc_port, 9000);
        assert_eq!(serve.network.rest_port, 7000);
        assert_eq!(serve.models.model_dir.as_deref(), Some(dir.as_path()));

        std::fs::write(&file, "grcp_port = 1\n")?;
        let err = Cli::parse_from_args(args(&["tensorport", "serve", "--config", &file_arg]));
        std::fs::remove_dir_all(&dir)?;
        assert!(matches!(err, Err(ConfigError::UnknownKey { key, .. }) if key == "grcp_port"));
        Ok(())
    }

    #[test]
    fn flags_without_serve_get_a_hint_and_nothing_else_does() {
        assert_eq!(
            missing_serve_hint(&args(&["tensorport", "--model-dir", "m"])).as_deref(),
            Some("hint: the server runs as a subcommand: tensorport serve --model-dir m")
        );
        for line in [
            &["tensorport", "serve", "--model-dir", "m"][..],
            &["tensorport", "--help"],
            &["tensorport", "--version"],
            &["tensorport", "help"],
            &["tensorport"],
            &["tensorport", "sevre"],
        ] {
            assert_eq!(missing_serve_hint(&args(line)), None, "{line:?}");
        }
    }

    #[test]
    fn tf_serving_and_triton_spellings_are_aliases() -> Result<(), ConfigError> {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        let tfs = serve(Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--port=9000",
            "--rest_api_port=9001",
            "--model_config_file=/models/models.config",
            "--model_config_file_poll_wait_seconds=60",
            "--enable_batching",
            "--batching_parameters_file=/models/batching.txt",
            "--file_system_poll_wait_seconds=5",
        ]))?);
        let triton_poll = serve(Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-repository",
            &dir,
            "--repository-poll-secs=7",
        ]))?);
        assert_eq!(triton_poll.models.model_poll_secs, 7);
        assert_eq!((tfs.network.grpc_port, tfs.network.rest_port), (9000, 9001));
        assert_eq!(
            tfs.compatibility.model_config_file.as_deref(),
            Some(Path::new("/models/models.config"))
        );
        assert_eq!(tfs.compatibility.model_config_file_poll_secs, 60);
        assert!(tfs.compatibility.enable_batching);
        assert_eq!(
            tfs.compatibility.batching_parameters_file.as_deref(),
            Some(Path::new("/models/batching.txt"))
        );
        assert_eq!(tfs.models.model_poll_secs, 5);
        let one = serve(Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model_name=resnet",
            "--model_base_path=/models/resnet",
            "--enable_batching=false",
        ]))?);
        assert_eq!(one.compatibility.model_name.as_deref(), Some("resnet"));
        assert!(!one.compatibility.enable_batching);
        let triton = serve(Cli::parse_from_args(args(&[
            "tensorport",
            "serve",
            "--model-repository",
            &dir,
            "--http-port",
            "8000",
            "--grpc-port",
            "8001",
        ]))?);
        assert_eq!(
            triton.models.model_dir.as_deref(),
            Some(Path::new(dir.as_ref()))
        );
        assert_eq!(
            (triton.network.grpc_port, triton.network.rest_port),
            (8001, 8000)
        );
        Ok(())
    }

    #[test]
    fn the_version_names_the_backends() {
        let version = Cli::command().render_version();
        assert!(version.contains("(backends: onnx"), "{version}");
    }
}
