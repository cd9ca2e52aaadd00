//! Triton's and TF Serving's own command lines, as their binaries take them: `tensorport
//! tritonserver ...` and `tensorport tensorflow_model_server ...`, or the binary run under
//! either name (a symlink put where the peer's binary was). Every flag of the peer's `--help`
//! is accepted: applied where this server has the behaviour, else named in one warning at
//! start with what it does instead; a value that cannot be honoured safely is refused. The
//! peer's defaults (ports, readiness, polling) apply where its command line is used.
//!
//! - `table`: the flag lists (`*_flags.txt`, taken from the peers' sources) read into rows.
//! - `command`: a peer's value syntax, parsed by a clap command built from its list.
//! - `triton`, `tfserving`: the flags whose values need translating, and the peers' defaults.
//! - `translated`: what a command line comes to.
//! - `mlserver`: Seldon MLServer's `mlserver start FOLDER`, whose settings are files and
//!   environment variables rather than flags.

mod command;
mod mlserver;
mod table;
mod tfserving;
mod translated;
mod triton;

use std::ffi::OsString;
use std::path::Path;

use super::aliases::Peer;
use super::error::ConfigError;
pub use mlserver::{
    mlserver_command_line, translate as translate_mlserver, ENV_PREFIX as MLSERVER_ENV_PREFIX,
};
pub use table::{peer_flags, Action, Kind, PeerFlag};
pub use translated::{NotApplied, Translated};

/// The names the peers' binaries have, which are also this binary's subcommands for them.
pub const TRITON_PROGRAM: &str = "tritonserver";
pub const TF_SERVING_PROGRAM: &str = "tensorflow_model_server";

/// A peer's command line: whose it is, its program name and its arguments after that.
#[derive(Debug, PartialEq)]
pub struct PeerCommandLine {
    pub peer: Peer,
    pub program: &'static str,
    pub args: Vec<OsString>,
}

/// The peer command line `args` is, if any: run under a peer's binary name (the file name
/// of `args[0]`), or with a peer's name as the subcommand.
pub fn peer_command_line(args: &[OsString]) -> Option<PeerCommandLine> {
    let peer_named = |name: Option<&str>| match name {
        Some(TRITON_PROGRAM) => Some((Peer::Triton, TRITON_PROGRAM)),
        Some(TF_SERVING_PROGRAM) => Some((Peer::TfServing, TF_SERVING_PROGRAM)),
        _ => None,
    };
    let binary = args
        .first()
        .and_then(|arg| Path::new(arg).file_name())
        .and_then(|name| name.to_str());
    let (peer, program, skip) = match peer_named(binary) {
        Some((peer, program)) => (peer, program, 1),
        None => {
            let (peer, program) = peer_named(args.get(1).and_then(|arg| arg.to_str()))?;
            (peer, program, 2)
        }
    };
    Some(PeerCommandLine {
        peer,
        program,
        args: args.iter().skip(skip).cloned().collect(),
    })
}

/// What `line` comes to as `tensorport serve` flags.
pub fn translate(line: PeerCommandLine) -> Result<Translated, ConfigError> {
    let flags = peer_flags(line.peer)?;
    let mut args = vec![OsString::from(line.program)];
    args.extend(line.args);
    let given = command::parse(line.peer, line.program, &flags, args)?;
    let mut out = Translated::default();
    for flag in flags.iter().filter(|flag| given.contains(flag.name)) {
        match flag.action {
            Action::Ours(ours) => match given.last(flag.name) {
                Some(value) => out.set(ours, value),
                None => out.switch(ours),
            },
            Action::Warn(instead) => out.not_applied(flag.name, instead),
            Action::Unsafe(why) => {
                let off = given
                    .all(flag.name)
                    .iter()
                    .all(|value| matches!(value.as_str(), "" | "false" | "0"));
                if !off {
                    return Err(translated::refuse(flag.name, why));
                }
            }
            Action::Code => {}
        }
    }
    match line.peer {
        Peer::Triton => triton::apply(&given, &mut out)?,
        Peer::TfServing => tfserving::apply(&given, &mut out)?,
    }
    Ok(out)
}

/// The flags of `peer`'s list that its translation code applies (`code` rows).
pub fn translated_in_code(peer: Peer) -> &'static [&'static str] {
    match peer {
        Peer::Triton => triton::TRANSLATED,
        Peer::TfServing => tfserving::TRANSLATED,
    }
}

#[cfg(test)]
mod tests;
