//! A peer's command line parsed with that peer's value syntax: a clap command built from its
//! flag list, so that `--help` lists every flag with what this server does with it, and a
//! malformed value is refused naming its flag.
//!
//! Triton reads `--flag=value` and `--flag value`, and booleans as true/false, on/off or
//! 1/0. TF Serving reads `--flag=value`; its booleans also stand bare (`--flag`, true) or
//! negated (`--noflag`). Every flag may be repeated; for a single-valued one the last wins,
//! as in both peers.

use std::collections::BTreeMap;
use std::ffi::OsString;

use clap::{Arg, ArgAction, Command};

use super::super::aliases::Peer;
use super::super::error::ConfigError;
use super::table::{Action, Kind, PeerFlag};

/// The flags a peer's command line gave, with their values in order.
#[derive(Debug, Default)]
pub struct Given {
    values: BTreeMap<&'static str, Vec<String>>,
}

impl Given {
    /// The last value of `flag` (`"true"` for a flag without a value), if given.
    pub fn last(&self, flag: &str) -> Option<&str> {
        self.values.get(flag)?.last().map(String::as_str)
    }

    /// Every value of `flag`, in order.
    pub fn all(&self, flag: &str) -> &[String] {
        self.values.get(flag).map_or(&[], Vec::as_slice)
    }

    /// `flag`'s last value as a boolean: `None` when not given.
    pub fn bool(&self, flag: &str) -> Option<bool> {
        self.last(flag).map(|value| value == "true")
    }

    pub fn contains(&self, flag: &str) -> bool {
        self.values.contains_key(flag)
    }
}

/// Parses `args` (the program name first) as `peer`'s binary would.
pub fn parse(
    peer: Peer,
    program: &'static str,
    flags: &[PeerFlag],
    args: Vec<OsString>,
) -> Result<Given, ConfigError> {
    let args = match peer {
        Peer::TfServing => negated_booleans(flags, args),
        Peer::Triton => args,
    };
    let command = command(peer, program, flags);
    let matches = command.try_get_matches_from(args)?;
    let mut given = Given::default();
    for flag in flags {
        if matches.value_source(flag.name) != Some(clap::parser::ValueSource::CommandLine) {
            continue;
        }
        let values: Vec<String> = match flag.kind {
            Kind::None => vec!["true".to_owned()],
            _ => matches
                .get_many::<String>(flag.name)
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
        };
        given.values.insert(flag.name, values);
    }
    Ok(given)
}

/// The clap command for `peer`'s flags. `--help` comes from clap itself.
pub fn command(peer: Peer, program: &'static str, flags: &[PeerFlag]) -> Command {
    let about = match peer {
        Peer::Triton => "tensorport, reading Triton Inference Server's command line",
        Peer::TfServing => "tensorport, reading TensorFlow Serving's command line",
    };
    let command = Command::new(program)
        .about(about)
        .disable_version_flag(true)
        .after_help("Applied flags set the tensorport flag named; the others are accepted and named in one warning at start.");
    flags
        .iter()
        .filter(|flag| flag.name != "help")
        .fold(command, |command, flag| command.arg(arg(peer, flag)))
}

fn arg(peer: Peer, flag: &PeerFlag) -> Arg {
    let help = match flag.action {
        Action::Ours(ours) => format!("Applied as --{ours}."),
        Action::Code => "Applied (translated to tensorport's settings).".to_owned(),
        Action::Warn(instead) => format!("Accepted, not applied: {instead}."),
        Action::Unsafe(why) => format!("Refused unless off: {why}."),
    };
    let arg = Arg::new(flag.name).long(flag.name).help(help);
    let value = match flag.kind {
        Kind::None => return arg.action(ArgAction::Count),
        Kind::Bool => arg.value_parser(boolean).value_name("BOOL"),
        Kind::Int => arg.value_parser(integer).value_name("INT"),
        Kind::Float => arg.value_parser(float).value_name("FLOAT"),
        // An empty string is a value both peers take (`--grpc_socket_path=`).
        Kind::Str => arg
            .value_parser(clap::builder::StringValueParser::new())
            .value_name("VALUE"),
    }
    .action(ArgAction::Append)
    .allow_negative_numbers(true);
    match (peer, flag.kind) {
        // TF Serving's booleans stand bare; a value must then be attached with `=`, so that
        // a bare boolean never takes the next word.
        (Peer::TfServing, Kind::Bool) => value
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true"),
        _ => value,
    }
}

/// TF Serving's `--noNAME` for a boolean NAME, as `--NAME=false`.
fn negated_booleans(flags: &[PeerFlag], args: Vec<OsString>) -> Vec<OsString> {
    args.into_iter()
        .map(|arg| {
            let text = arg.to_string_lossy();
            let negated = text.strip_prefix("--no").filter(|name| {
                flags
                    .iter()
                    .any(|flag| flag.kind == Kind::Bool && flag.name == *name)
            });
            match negated {
                Some(name) => OsString::from(format!("--{name}=false")),
                None => arg,
            }
        })
        .collect()
}

/// true/false, on/off or 1/0, in any case, as `"true"` or `"false"`.
fn boolean(value: &str) -> Result<String, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Ok("true".to_owned()),
        "false" | "off" | "0" => Ok("false".to_owned()),
        _ => Err("a boolean: true or false (also on/off, 1/0)".to_owned()),
    }
}

fn integer(value: &str) -> Result<String, String> {
    value
        .trim()
        .parse::<i64>()
        .map(|n| n.to_string())
        .map_err(|_| "an integer".to_owned())
}

fn float(value: &str) -> Result<String, String> {
    value
        .trim()
        .parse::<f64>()
        .map(|_| value.trim().to_owned())
        .map_err(|_| "a number".to_owned())
}
