//! The `--config` TOML file: its settings become extra `--flag=value` arguments for the flags
//! that neither the command line nor the environment set, so that clap validates them alike.

use std::ffi::OsString;
use std::path::Path;

use clap::parser::ValueSource;

use super::error::ConfigError;

/// The file's settings as extra `--flag value` arguments, for flags neither given on the
/// command line nor set in the environment.
pub(super) fn file_arguments(
    path: &Path,
    serve: &clap::ArgMatches,
    command: &clap::Command,
) -> Result<Vec<OsString>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: path.to_path_buf(),
        source,
    })?;
    let table: toml::Table =
        text.parse()
            .map_err(|err: toml::de::Error| ConfigError::ParseFile {
                path: path.to_path_buf(),
                message: err.message().to_owned(),
            })?;
    let serve_command = command
        .find_subcommand("serve")
        .ok_or_else(|| ConfigError::MissingModelDir)?;
    let mut extra = Vec::new();
    for (key, value) in table {
        let id = key.replace('-', "_");
        let known = serve_command
            .get_arguments()
            .any(|arg| arg.get_id().as_str() == id && id != "config");
        if !known {
            return Err(ConfigError::UnknownKey {
                path: path.to_path_buf(),
                key,
            });
        }
        let explicit = matches!(
            serve.value_source(&id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if explicit {
            continue;
        }
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            _ => {
                return Err(ConfigError::BadValue {
                    path: path.to_path_buf(),
                    key,
                })
            }
        };
        extra.push(OsString::from(format!("--{}={text}", id.replace('_', "-"))));
    }
    Ok(extra)
}
