//! The peers' flag lists (`tritonserver_flags.txt`, `tensorflow_model_server_flags.txt`),
//! read into rows: each flag's name, the kind of value it takes, and what this server does
//! with it. The files are compiled in, so that a row that cannot be read is a test failure
//! rather than a surprise at start-up.

use super::super::aliases::Peer;
use super::super::error::ConfigError;

const TRITON: &str = include_str!("tritonserver_flags.txt");
const TF_SERVING: &str = include_str!("tensorflow_model_server_flags.txt");

/// The value a peer's flag takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No value (`--disable-auto-complete-config`, `--version`).
    None,
    Bool,
    Int,
    Float,
    Str,
}

/// What this server does with a peer's flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Applied: the value goes to this flag of ours (without `--`).
    Ours(&'static str),
    /// Applied by the peer's translation code: the value needs translating.
    Code,
    /// Accepted, not applied; the text says what this server does instead.
    Warn(&'static str),
    /// Refused unless off (false, 0 or empty); the text says why.
    Unsafe(&'static str),
}

/// One row: a flag of the peer's `--help`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerFlag {
    /// As the peer spells it, without the leading `--`.
    pub name: &'static str,
    pub kind: Kind,
    pub action: Action,
}

/// The rows of `peer`'s list, in its `--help` order.
pub fn peer_flags(peer: Peer) -> Result<Vec<PeerFlag>, ConfigError> {
    let (file, text) = match peer {
        Peer::Triton => ("tritonserver_flags.txt", TRITON),
        Peer::TfServing => ("tensorflow_model_server_flags.txt", TF_SERVING),
    };
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            row(line).ok_or_else(|| ConfigError::PeerTable {
                file,
                line: line.to_owned(),
            })
        })
        .collect()
}

/// `NAME KIND ACTION [NOTE]`, or `None` when a column is missing or unknown.
fn row(line: &'static str) -> Option<PeerFlag> {
    let mut rest = line.trim();
    let mut column = || {
        let (word, tail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        rest = tail.trim_start();
        (!word.is_empty()).then_some(word)
    };
    let name = column()?;
    let kind = match column()? {
        "none" => Kind::None,
        "bool" => Kind::Bool,
        "int" => Kind::Int,
        "float" => Kind::Float,
        "str" => Kind::Str,
        _ => return None,
    };
    let action = column()?;
    let note = rest.trim();
    let action = match action {
        "code" => Action::Code,
        "warn" if !note.is_empty() => Action::Warn(note),
        "unsafe" if !note.is_empty() => Action::Unsafe(note),
        ours => Action::Ours(ours.strip_prefix('=').filter(|flag| !flag.is_empty())?),
    };
    Some(PeerFlag { name, kind, action })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_each_column() {
        let rows = [
            (
                "http-port   int  =rest-port",
                Some(("http-port", Kind::Int, Action::Ours("rest-port"))),
            ),
            (
                "id str warn no server id",
                Some(("id", Kind::Str, Action::Warn("no server id"))),
            ),
            (
                "grpc-use-ssl bool unsafe TLS covers both ports",
                Some((
                    "grpc-use-ssl",
                    Kind::Bool,
                    Action::Unsafe("TLS covers both ports"),
                )),
            ),
            (
                "version none code",
                Some(("version", Kind::None, Action::Code)),
            ),
            ("id str warn", None),
            ("id text =x", None),
            ("id str rest-port", None),
            ("id str", None),
        ];
        for (line, expected) in rows {
            let read = row(line).map(|r| (r.name, r.kind, r.action));
            assert_eq!(read, expected, "{line}");
        }
    }

    #[test]
    fn both_lists_read_and_name_each_flag_once() -> Result<(), ConfigError> {
        for (peer, at_least) in [(Peer::Triton, 80), (Peer::TfServing, 45)] {
            let flags = peer_flags(peer)?;
            assert!(flags.len() >= at_least, "{peer:?}: {} flags", flags.len());
            let mut names: Vec<&str> = flags.iter().map(|f| f.name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), flags.len(), "{peer:?}: a flag listed twice");
        }
        Ok(())
    }
}
