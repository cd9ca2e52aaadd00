//! The command line: `tensorport serve` and its flags, read once in `main`, with the gaps
//! filled from the `--config` file, then checked for a model source.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use super::error::ConfigError;
use super::file::file_arguments;
use super::peers::{
    mlserver_command_line, peer_command_line, translate, translate_mlserver, Translated,
    MLSERVER_ENV_PREFIX,
};
use super::serve_args::ServeArgs;

#[derive(Debug, Parser)]
#[command(
    name = "tensorport",
    version = crate::build_info::VERSION,
    about = crate::build_info::ABOUT,
    after_help = "Triton's, TF Serving's and MLServer's command lines run as they are: \
                  tensorport tritonserver [FLAGS], tensorport tensorflow_model_server [FLAGS] or \
                  tensorport mlserver start FOLDER (which reads FOLDER/settings.json, its \
                  model-settings.json folders and MLSERVER_* variables), or this binary run \
                  under any of those names (as a symlink), with their defaults."
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
    // A peer's front end (by binary name or subcommand) says which server runs; its own
    // errors explain themselves.
    if peer_command_line(args).is_some() || mlserver_command_line(args).is_some() {
        return None;
    }
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
    /// Parses `args` (including the program name), filling gaps from the `--config` file. A
    /// Triton or TF Serving command line (see `peers`) is read as that server reads it.
    pub fn parse_from_args(args: Vec<OsString>) -> Result<Self, ConfigError> {
        let mlserver_env = std::env::vars()
            .filter(|(name, _)| name.starts_with(MLSERVER_ENV_PREFIX))
            .collect();
        Self::parse_with_mlserver_env(args, &mlserver_env)
    }

    /// [`Self::parse_from_args`], with MLServer's `MLSERVER_*` variables given.
    pub fn parse_with_mlserver_env(
        args: Vec<OsString>,
        mlserver_env: &BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        if let Some(args) = mlserver_command_line(&args) {
            return Self::parse_peer(translate_mlserver(args, mlserver_env)?);
        }
        match peer_command_line(&args) {
            Some(line) => Self::parse_peer(translate(line)?),
            None => Self::parse_ours(args, &Translated::default()),
        }
    }

    fn parse_peer(translated: Translated) -> Result<Self, ConfigError> {
        if translated.show_version {
            // clap's own answer to --version, printed to stdout with exit status 0.
            let shown = Self::command().try_get_matches_from(["tensorport", "--version"]);
            let kind = clap::error::ErrorKind::DisplayVersion;
            let shown = shown.err().unwrap_or_else(|| clap::Error::new(kind));
            return Err(ConfigError::Clap(shown));
        }
        let mut args = vec![OsString::from("tensorport"), OsString::from("serve")];
        args.extend(translated.arguments().into_iter().map(OsString::from));
        let mut cli = Self::parse_ours(args, &translated)?;
        let Command::Serve(serve) = &mut cli.command;
        serve.not_applied = translated.not_applied;
        Ok(cli)
    }

    /// Our own command line, then the `--config` file, then `peer`'s defaults, each for the
    /// flags the ones before left unset.
    fn parse_ours(mut args: Vec<OsString>, peer: &Translated) -> Result<Self, ConfigError> {
        let command = Self::command();
        let matches = command.clone().try_get_matches_from(&args)?;
        let Some(("serve", serve)) = matches.subcommand() else {
            return Ok(Self::from_arg_matches(&matches)?);
        };
        let mut matches = match serve.get_one::<PathBuf>("config").cloned() {
            Some(path) => {
                args.extend(file_arguments(&path, serve, &command)?);
                command.clone().try_get_matches_from(&args)?
            }
            None => matches,
        };
        if let Some(serve) = matches.subcommand_matches("serve") {
            let open = |id: &str| {
                !matches!(
                    serve.value_source(id),
                    Some(ValueSource::CommandLine | ValueSource::EnvVariable)
                )
            };
            let defaults = peer.default_arguments(open);
            if !defaults.is_empty() {
                args.extend(defaults.into_iter().map(OsString::from));
                matches = command.try_get_matches_from(&args)?;
            }
        }
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
    use std::collections::BTreeMap;

    use super::*;
    use crate::server::ServerOptions;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn serve(cli: Cli) -> ServeArgs {
        let Command::Serve(serve) = cli.command;
        serve
    }

    /// `tensorport serve` and `line`, with `{dir}` standing for a folder that exists and
    /// `{keys}` for a file of two API keys.
    fn parse(line: &[&str], dir: &str, keys: &str) -> Result<ServeArgs, ConfigError> {
        let line: Vec<String> = ["tensorport", "serve"]
            .iter()
            .chain(line)
            .map(|word| word.replace("{dir}", dir).replace("{keys}", keys))
            .collect();
        Cli::parse_from_args(line.iter().map(OsString::from).collect()).map(serve)
    }

    /// What the tables below read from the parsed flags and the settings built from them,
    /// by name, as Debug text.
    fn view(args: &ServeArgs, options: &ServerOptions) -> BTreeMap<&'static str, String> {
        let (o, t) = (&options.overload, &options.transport);
        let rate = o.rate_limit.as_ref();
        let keys = rate.and_then(|r| r.api_keys.as_ref());
        let (models, compat) = (&args.models, &args.compatibility);
        BTreeMap::from([
            ("grpc_port", format!("{:?}", args.network.grpc_port)),
            ("rest_port", format!("{:?}", args.network.rest_port)),
            (
                "rate_limit",
                format!("{:?}", rate.map(|r| (r.per_second, r.burst))),
            ),
            (
                "api_keys",
                format!("{:?}", keys.map(|k| (k.header.as_str(), k.len()))),
            ),
            (
                "max_concurrent_requests",
                format!("{:?}", o.max_concurrent_requests),
            ),
            ("request_timeout", format!("{:?}", o.request_timeout)),
            ("drain", format!("{:?}", options.drain)),
            ("log_format", format!("{:?}", args.observability.log_format)),
            (
                "tls",
                format!("{:?}", t.tls.as_ref().map(|f| (&f.cert, &f.client_ca))),
            ),
            ("max_connections", format!("{:?}", t.max_connections)),
            ("body_read_timeout", format!("{:?}", t.body_read_timeout)),
            ("idle_timeout", format!("{:?}", t.idle_timeout)),
            ("send_timeout", format!("{:?}", t.send_timeout)),
            (
                "http2_keepalive",
                format!("{:?}", t.http2_keepalive_interval),
            ),
            (
                "allow_model_paths",
                format!("{:?}", args.security.allow_model_paths),
            ),
            (
                "allow_log_paths",
                format!("{:?}", args.security.allow_log_paths),
            ),
            (
                "auth_token_file",
                format!("{:?}", args.security.auth_token_file),
            ),
            ("model_dir", format!("{:?}", models.model_dir)),
            ("model_poll_secs", format!("{:?}", models.model_poll_secs)),
            (
                "model_config_file",
                format!("{:?}", compat.model_config_file),
            ),
            (
                "config_file_poll",
                format!("{:?}", compat.model_config_file_poll_secs),
            ),
            ("model_name", format!("{:?}", compat.model_name)),
            ("enable_batching", format!("{:?}", compat.enable_batching)),
            (
                "batching_file",
                format!("{:?}", compat.batching_parameters_file),
            ),
        ])
    }

    /// Command lines and what each sets: the defaults, each group's flags, and the
    /// TF Serving and Triton spellings.
    /// A command line, and the values of `view` it must come to.
    type Accepted = (
        &'static [&'static str],
        &'static [(&'static str, &'static str)],
    );

    const ACCEPTED: &[Accepted] = &[
        (
            &["--model-dir", "{dir}"],
            &[
                ("grpc_port", "8500"),
                ("rest_port", "8501"),
                ("rate_limit", "None"),
                ("max_concurrent_requests", "512"),
                ("request_timeout", "None"),
                ("drain", "30s"),
                ("tls", "None"),
                ("max_connections", "None"),
                ("body_read_timeout", "60s"),
                ("send_timeout", "30s"),
            ],
        ),
        (
            &[
                "--model-dir={dir}",
                "--rate-limit-per-sec=50",
                "--rate-limit-key-header=x-api-key",
                "--rate-limit-keys-file={keys}",
                "--max-concurrent-requests=0",
                "--request-timeout-ms=250",
                "--drain-secs=5",
                "--log-format=json",
            ],
            &[
                ("log_format", "Json"),
                ("rate_limit", "Some((50, 50))"),
                ("api_keys", "Some((\"x-api-key\", 2))"),
                ("max_concurrent_requests", "0"),
                ("request_timeout", "Some(250ms)"),
                ("drain", "5s"),
            ],
        ),
        (
            &[
                "--model-dir={dir}",
                "--tls-cert=server.pem",
                "--tls-key=server.key",
                "--tls-client-ca=ca.pem",
                "--max-connections=100",
                "--idle-timeout-secs=5",
                "--send-timeout-secs=7",
                "--http2-keepalive-interval-secs=0",
            ],
            &[
                ("tls", "Some((Pem(server.pem), Some(Pem(ca.pem))))"),
                ("max_connections", "Some(100)"),
                ("idle_timeout", "5s"),
                ("send_timeout", "7s"),
                ("http2_keepalive", "None"),
            ],
        ),
        (
            &[
                "--model-dir={dir}",
                "--allow-model-paths=/srv/a,/srv/b",
                "--allow-log-paths=/var/log/a",
                "--auth-token-file=/etc/tensorport/tokens",
            ],
            &[
                ("allow_model_paths", "[\"/srv/a\", \"/srv/b\"]"),
                ("allow_log_paths", "[\"/var/log/a\"]"),
                ("auth_token_file", "Some(\"/etc/tensorport/tokens\")"),
            ],
        ),
        (
            &[
                "--port=9000",
                "--rest_api_port=9001",
                "--model_config_file=/models/models.config",
                "--model_config_file_poll_wait_seconds=60",
                "--enable_batching",
                "--batching_parameters_file=/models/batching.txt",
                "--file_system_poll_wait_seconds=5",
            ],
            &[
                ("grpc_port", "9000"),
                ("rest_port", "9001"),
                ("model_config_file", "Some(\"/models/models.config\")"),
                ("config_file_poll", "60"),
                ("enable_batching", "true"),
                ("batching_file", "Some(\"/models/batching.txt\")"),
                ("model_poll_secs", "5"),
            ],
        ),
        (
            &[
                "--model_name=resnet",
                "--model_base_path=/models/resnet",
                "--enable_batching=false",
            ],
            &[
                ("model_name", "Some(\"resnet\")"),
                ("enable_batching", "false"),
            ],
        ),
        (
            &["--model-repository", "{dir}", "--repository-poll-secs=7"],
            &[("model_poll_secs", "7")],
        ),
        (
            &[
                "--model-repository",
                "{dir}",
                "--http-port",
                "8000",
                "--grpc-port",
                "8001",
            ],
            &[
                ("model_dir", "Some(\"{dir}\")"),
                ("grpc_port", "8001"),
                ("rest_port", "8000"),
            ],
        ),
    ];

    /// Command lines refused, and a word the refusal must name.
    const REFUSED: &[(&[&str], &str)] = &[
        (
            &["--model-dir={dir}", "--rate-limit-key-header=x-api-key"],
            "--rate-limit-keys-file",
        ),
        (&["--model-dir={dir}", "--tls-cert=server.pem"], "--tls-key"),
        (&["--grpc-port", "http"], "--grpc-port"),
    ];

    #[test]
    fn each_command_line_sets_what_its_table_row_says() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir();
        let keys = dir.join(format!("tensorport-keys-{}.txt", std::process::id()));
        std::fs::write(&keys, "alpha\nbeta\n")?;
        let (dir, keys_name) = (dir.to_string_lossy(), keys.to_string_lossy());
        for (line, expected) in ACCEPTED {
            let args = parse(line, &dir, &keys_name)?;
            let view = view(&args, &args.server_options()?);
            for (name, value) in *expected {
                let value = value.replace("{dir}", &dir);
                assert_eq!(view.get(name), Some(&value), "{line:?}: {name}");
            }
        }
        std::fs::remove_file(&keys)?;
        Ok(())
    }

    #[test]
    fn refused_command_lines_name_the_flag() {
        let dir = std::env::temp_dir();
        let dir = dir.to_string_lossy();
        for (line, word) in REFUSED {
            let message = parse(line, &dir, "").err().map(|e| e.to_string());
            let message = message.unwrap_or_default();
            assert!(message.contains(word), "{line:?}: {message}");
        }
        let err = Cli::parse_from_args(args(&["tensorport", "serve"]));
        assert!(matches!(err, Err(ConfigError::MissingModelDir)));
    }

    #[test]
    fn help_groups_every_flag_under_a_heading() {
        let command = Cli::command();
        let serve = command.find_subcommand("serve");
        let mut headings: Vec<&str> = Vec::new();
        for arg in serve.iter().flat_map(|s| s.get_arguments()) {
            let id = arg.get_id().as_str();
            match arg.get_help_heading() {
                Some(heading) if !headings.contains(&heading) => headings.push(heading),
                Some(_) => {}
                None => assert!(["config", "help"].contains(&id), "--{id} has no heading"),
            }
        }
        assert_eq!(
            headings,
            [
                "Network",
                "Models",
                "Batching",
                "Overload",
                "Security",
                "Shared memory",
                "Observability",
                "Compatibility"
            ]
        );
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
            &["tensorport", "tensorflow_model_server", "--port=0"],
            &["tensorport", "tritonserver", "--model-repository=m"],
            &[
                "/usr/bin/tensorflow_model_server",
                "--port=0",
                "--model_base_path=m",
            ],
        ] {
            assert_eq!(missing_serve_hint(&args(line)), None, "{line:?}");
        }
    }

    #[test]
    fn the_version_names_the_backends() {
        let version = Cli::command().render_version();
        assert!(version.contains("(backends: onnx"), "{version}");
    }
}
