//! Seldon MLServer's command line: `mlserver start FOLDER`, as `tensorport mlserver start
//! FOLDER` or this binary run as `mlserver`. MLServer has no flags for the server: it reads
//! `FOLDER/settings.json`, and `MLSERVER_<SETTING>` environment variables (`MLSERVER_HTTP_PORT`)
//! override it. Settings this server has are applied; the others are named in the one warning
//! at start. MLServer's defaults apply: HTTP on 8080, gRPC on 8081, metrics on 8082 at
//! `/metrics`, and the models load at start without the folder being polled. The models are
//! FOLDER's `model-settings.json` folders (see `repository::mlserver_layout`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, Command};
use serde_json::{Map, Value};

use super::super::error::ConfigError;
use super::translated::Translated;
use crate::repository::{read_text_trusted, OPERATOR_FILE};

/// The name of MLServer's binary, and this binary's subcommand for it.
pub const MLSERVER_PROGRAM: &str = "mlserver";

/// MLServer's subcommands that build or call a server rather than serve.
const OTHER_SUBCOMMANDS: [&str; 4] = ["build", "dockerfile", "init", "infer"];

/// The server settings file `mlserver start` reads in its folder.
pub const SERVER_SETTINGS_FILE: &str = "settings.json";

/// The prefix of MLServer's environment variables for its server settings.
pub const ENV_PREFIX: &str = "MLSERVER_";

/// The prefix of MLServer's environment variables for a model's settings, from which it
/// builds a model when the folder has none.
const MODEL_ENV_PREFIX: &str = "MLSERVER_MODEL_";

/// MLServer's settings that this server applies, with the flag each sets.
const PORTS: [(&str, &str); 3] = [
    ("http_port", "rest-port"),
    ("grpc_port", "grpc-port"),
    ("metrics_port", "metrics-port"),
];

/// MLServer's other settings (mlserver/settings.py's `Settings`), with what this server does
/// instead. Settings outside this list are named too, as unknown to MLServer.
const NOT_APPLIED: [(&str, &str); 23] = [
    ("server_name", "the server metadata names tensorport"),
    (
        "server_version",
        "the server metadata gives tensorport's version",
    ),
    (
        "parallel_workers",
        "inference runs on the runtime's threads (--instances, --intra-op-threads)",
    ),
    (
        "parallel_workers_timeout",
        "shutdown drains for --drain-secs",
    ),
    (
        "environments_dir",
        "no Python environments: models are ONNX, TorchScript or SavedModel files",
    ),
    (
        "model_repository_root",
        "the models are those of the folder given to `mlserver start`",
    ),
    (
        "model_repository_implementation",
        "the models are the folder's model-settings.json folders",
    ),
    (
        "model_repository_implementation_args",
        "the models are the folder's model-settings.json folders",
    ),
    ("extensions", "no Python extensions"),
    ("root_path", "routes are served at the root"),
    (
        "grpc_max_message_length",
        "--max-request-bytes bounds a request",
    ),
    ("cors_settings", "no CORS headers are sent"),
    (
        "metrics_rest_server_prefix",
        "metric names are tensorport's",
    ),
    ("metrics_dir", "metrics are kept in memory"),
    (
        "logging_settings",
        "--log-level and --log-format set the logs",
    ),
    ("kafka_enabled", "no Kafka server"),
    ("kafka_servers", "no Kafka server"),
    ("kafka_topic_input", "no Kafka server"),
    ("kafka_topic_output", "no Kafka server"),
    ("tracing_server", "no OpenTelemetry export"),
    ("cache_enabled", "answers are not cached"),
    ("cache_size", "answers are not cached"),
    ("gzip_enabled", "gzip follows the request's headers"),
];

/// The settings that come out of `settings.json` and the environment, by MLServer's name,
/// each with where it was read (for messages).
type Settings = BTreeMap<String, (Value, String)>;

/// The arguments after MLServer's program name, when `args` is MLServer's command line: the
/// binary run as `mlserver`, or `mlserver` as the subcommand.
pub fn mlserver_command_line(args: &[OsString]) -> Option<Vec<OsString>> {
    let binary = args
        .first()
        .and_then(|arg| Path::new(arg).file_name())
        .and_then(|name| name.to_str());
    let skip = if binary == Some(MLSERVER_PROGRAM) {
        1
    } else if args.get(1).and_then(|arg| arg.to_str()) == Some(MLSERVER_PROGRAM) {
        2
    } else {
        return None;
    };
    Some(args.iter().skip(skip).cloned().collect())
}

/// The clap command for MLServer's command line; `--help` comes from clap itself.
pub fn command() -> Command {
    // MLServer's other subcommands (mlserver/cli/main.py) are known, so that they are refused
    // as not serving rather than as typos.
    let others = OTHER_SUBCOMMANDS.map(|name| {
        Command::new(name).about("MLServer's; not run here").arg(
            Arg::new("args")
                .num_args(0..)
                .trailing_var_arg(true)
                .allow_hyphen_values(true),
        )
    });
    Command::new(MLSERVER_PROGRAM)
        .subcommands(others)
        .about("tensorport, reading Seldon MLServer's command line and settings files")
        .disable_version_flag(true)
        .arg_required_else_help(true)
        .arg(
            Arg::new("version")
                .long("version")
                .action(clap::ArgAction::SetTrue)
                .help("Print the version and stop."),
        )
        .subcommand(
            Command::new("start")
                .about(
                    "Serve the models of FOLDER: each folder with a model-settings.json, with \
                     FOLDER/settings.json and MLSERVER_* environment variables (which win) as \
                     the server settings",
                )
                .arg(Arg::new("folder").value_name("FOLDER").required(true))
                .after_help(
                    "Applied: http_port, grpc_port, metrics_port (defaults 8080, 8081, 8082), \
                     host, debug (--log-level=debug), use_structured_logging \
                     (--log-format=json), load_models_at_startup (false: --startup-models=, \
                     the repository API loads them), metrics_endpoint (/metrics only). The \
                     others are \
                     accepted and named in one warning at start.",
                ),
        )
}

/// What `args` (after the program name) come to as `serve` flags. `env` gives the
/// environment's `MLSERVER_*` variables.
pub fn translate(
    args: Vec<OsString>,
    env: &BTreeMap<String, String>,
) -> Result<Translated, ConfigError> {
    let mut line = vec![OsString::from(MLSERVER_PROGRAM)];
    line.extend(args);
    let matches = command().try_get_matches_from(line)?;
    let mut out = Translated::default();
    if matches.get_flag("version") {
        out.show_version = true;
        return Ok(out);
    }
    let folder = match matches.subcommand() {
        Some(("start", start)) => start
            .get_one::<String>("folder")
            .map(PathBuf::from)
            .unwrap_or_default(),
        Some((other, _)) => return Err(refuse(other, "only `mlserver start FOLDER` serves")),
        None => return Err(refuse("start", "give the folder: mlserver start FOLDER")),
    };
    let mut settings = read_settings(&folder)?;
    for (name, value) in env {
        if name.starts_with(MODEL_ENV_PREFIX) {
            out.not_applied_setting(
                name,
                "no model from the environment: the models are FOLDER's model-settings.json \
                 folders",
            );
        } else if let Some(setting) = name.strip_prefix(ENV_PREFIX) {
            let setting = setting.to_ascii_lowercase();
            let text = Value::String(value.clone());
            settings.insert(setting, (text, format!("{name}={value}")));
        }
    }
    out.peer_default("rest-port", Some("8080"));
    out.peer_default("grpc-port", Some("8081"));
    out.peer_default("metrics-port", Some("8082"));
    out.peer_default("model-poll-secs", Some("0"));
    out.set("model-dir", folder.display().to_string());
    apply(&settings, &mut out)?;
    Ok(out)
}

/// `FOLDER/settings.json`, when there is one.
fn read_settings(folder: &Path) -> Result<Settings, ConfigError> {
    let path = folder.join(SERVER_SETTINGS_FILE);
    let shown = path.display().to_string();
    // It sits in the model repository: read as a regular file within a cap, so that a FIFO
    // or a device there is refused rather than waited on or read without end.
    let text = match read_text_trusted(&path, OPERATOR_FILE) {
        Ok(text) => text,
        Err(err) if err.is_not_found() => return Ok(Settings::new()),
        Err(err) => return Err(refuse(&shown, err.to_string())),
    };
    let object: Map<String, Value> =
        serde_json::from_str(&text).map_err(|err| refuse(&shown, err.to_string()))?;
    Ok(object
        .into_iter()
        .map(|(name, value)| {
            let at = format!("{shown}: {name}");
            (name, (value, at))
        })
        .collect())
}

fn apply(settings: &Settings, out: &mut Translated) -> Result<(), ConfigError> {
    for (name, (value, at)) in settings {
        if value.is_null() && name != "metrics_endpoint" {
            continue;
        }
        if let Some((_, flag)) = PORTS.iter().find(|(setting, _)| setting == name) {
            out.set(flag, port(value, at)?);
            continue;
        }
        match name.as_str() {
            "host" => {
                let host = text(value, at)?;
                // MLServer binds names too; "localhost" is the one worth honouring here.
                out.set(
                    "host",
                    if host == "localhost" {
                        "127.0.0.1".into()
                    } else {
                        host
                    },
                );
            }
            "debug" if boolean(value, at)? => out.set("log-level", "debug"),
            "use_structured_logging" if boolean(value, at)? => out.set("log-format", "json"),
            // MLServer then loads models only through the repository API, as here.
            "load_models_at_startup" if !boolean(value, at)? => out.set("startup-models", ""),
            "debug" | "use_structured_logging" | "load_models_at_startup" => {}
            "metrics_endpoint" => match value.as_str() {
                Some("/metrics") => {}
                _ => out.not_applied_setting(at, "metrics are served at /metrics"),
            },
            other => {
                let instead = NOT_APPLIED
                    .iter()
                    .find(|(setting, _)| *setting == other)
                    .map_or("not an MLServer server setting", |(_, instead)| instead);
                out.not_applied_setting(at, instead);
            }
        }
    }
    Ok(())
}

/// A port from JSON (a number) or the environment (its text).
fn port(value: &Value, at: &str) -> Result<String, ConfigError> {
    let number = match value {
        Value::Number(number) => number.as_u64(),
        Value::String(text) => text.trim().parse::<u64>().ok(),
        _ => None,
    };
    number
        .filter(|&port| port <= u64::from(u16::MAX))
        .map(|port| port.to_string())
        .ok_or_else(|| {
            refuse(
                at,
                format!("must be a port number (0 to 65535), got {value}"),
            )
        })
}

fn text(value: &Value, at: &str) -> Result<String, ConfigError> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| refuse(at, format!("must be a string, got {value}")))
}

/// A boolean as pydantic reads one: JSON's, or true/false, 1/0, yes/no, on/off in text.
fn boolean(value: &Value, at: &str) -> Result<bool, ConfigError> {
    let text = match value {
        Value::Bool(flag) => return Ok(*flag),
        Value::String(text) => text.to_ascii_lowercase(),
        Value::Number(number) => number.to_string(),
        _ => String::new(),
    };
    match text.as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(refuse(at, format!("must be a boolean, got {value}"))),
    }
}

fn refuse(setting: &str, why: impl Into<String>) -> ConfigError {
    ConfigError::MlserverRefused {
        setting: setting.to_owned(),
        why: why.into(),
    }
}

#[cfg(test)]
mod tests;
