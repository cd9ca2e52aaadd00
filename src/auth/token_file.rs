//! The `--auth-token-file` format: one grant a line.
//!
//! ```text
//! # TOKEN                            GROUPS                       NAME (optional, for the log)
//! 9f2c4e1a7b3d5f60c8e2a4b6d8f0e1c3   inference,metadata           ranking-service
//! 0d4b8f2a6c1e3a5b7d9f1c3e5a7b9d1f   *                            operator
//! -                                  health,metrics
//! ```
//!
//! - `TOKEN` is what clients send as `authorization: Bearer TOKEN`: at least
//!   [`MIN_TOKEN_CHARS`] visible ASCII characters, no spaces; each token once.
//! - `GROUPS` is a comma-separated list of `inference`, `metadata`, `model-repository`,
//!   `shared-memory`, `metrics`, `health`, or `*` for all of them.
//! - The token `-` stands for requests without a token: its groups are open to anyone
//!   (`- none` opens nothing). Without a `-` line, only `health` is open to anyone.
//! - Blank lines and lines starting with `#` are ignored.

use std::path::PathBuf;

use super::groups::{Group, Groups};
use super::policy::{Grant, Policy};

/// Shortest token accepted: a guessable token is no protection.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Why the token file was refused. Messages name the line, never the token.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("--auth-token-file: cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--auth-token-file: line {line}: {message}")]
    Line { line: usize, message: String },
    #[error(
        "--auth-token-file: the file grants no token; list at least one (see README, Security)"
    )]
    NoTokens,
}

/// The policy a file's text describes.
pub(super) fn parse(text: &str) -> Result<Policy, TokenFileError> {
    let mut grants: Vec<Grant> = Vec::new();
    let mut anonymous: Option<Groups> = None;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let at = |message: String| TokenFileError::Line { line, message };
        let content = raw.trim();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = content.split_whitespace().collect();
        let (token, groups, name) = match words.as_slice() {
            [token, groups] => (*token, *groups, None),
            [token, groups, name] => (*token, *groups, Some(*name)),
            _ => {
                return Err(at(
                    "expected 'TOKEN GROUPS [NAME]' (three fields at most)".to_owned()
                ))
            }
        };
        if token == "-" {
            if anonymous.is_some() {
                return Err(at("a second '-' line".to_owned()));
            }
            anonymous = Some(if groups == "none" {
                Groups::NONE
            } else {
                parse_groups(groups).map_err(at)?
            });
            continue;
        }
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err(at(format!(
                "the token is shorter than {MIN_TOKEN_CHARS} characters"
            )));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(at(
                "the token must be visible ASCII characters without spaces".to_owned(),
            ));
        }
        if grants.iter().any(|grant| grant.token == token.as_bytes()) {
            return Err(at("the token is listed twice".to_owned()));
        }
        grants.push(Grant {
            token: token.as_bytes().to_vec(),
            groups: parse_groups(groups).map_err(at)?,
            name: name.map_or_else(|| format!("line {line}"), str::to_owned),
        });
    }
    if grants.is_empty() {
        return Err(TokenFileError::NoTokens);
    }
    Ok(Policy {
        grants,
        anonymous: anonymous.unwrap_or_else(|| [Group::Health].into_iter().collect()),
    })
}

fn parse_groups(list: &str) -> Result<Groups, String> {
    if list == "*" {
        return Ok(Groups::all());
    }
    list.split(',')
        .map(|name| {
            Group::from_name(name).ok_or_else(|| {
                format!(
                    "unknown group '{name}' (groups: {}, or '*' for all)",
                    Group::ALL.map(Group::name).join(", ")
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_error(text: &str) -> Option<(usize, String)> {
        match parse(text) {
            Err(TokenFileError::Line { line, message }) => Some((line, message)),
            _ => None,
        }
    }

    #[test]
    fn grants_and_the_anonymous_line_parse() -> Result<(), TokenFileError> {
        let policy = parse(
            "# comment\n\nabcdefghijklmnop inference,metadata ci\n- health,metrics\n\
             qrstuvwxyz012345 *\n",
        )?;
        assert_eq!(policy.grants.len(), 2);
        assert_eq!(policy.grants[0].name, "ci");
        assert_eq!(policy.grants[1].name, "line 5");
        assert!(policy.grants[0].groups.contains(Group::Inference));
        assert!(!policy.grants[0].groups.contains(Group::ModelRepository));
        assert_eq!(policy.grants[1].groups, Groups::all());
        assert!(policy.anonymous.contains(Group::Metrics));
        assert!(!policy.anonymous.contains(Group::Inference));
        Ok(())
    }

    #[test]
    fn health_is_open_unless_the_file_says_otherwise() -> Result<(), TokenFileError> {
        let default = parse("abcdefghijklmnop inference\n")?;
        assert_eq!(default.anonymous, [Group::Health].into_iter().collect());
        let closed = parse("abcdefghijklmnop inference\n- none\n")?;
        assert_eq!(closed.anonymous, Groups::NONE);
        Ok(())
    }

    #[test]
    fn mistakes_name_the_line_but_not_the_token() {
        let short = line_error("short inference\n");
        assert!(matches!(&short, Some((1, m)) if m.contains("shorter") && !m.contains("short ")));
        let unknown = line_error("abcdefghijklmnop inference,admin\n");
        assert!(matches!(&unknown, Some((1, m)) if m.contains("'admin'")));
        let twice = line_error("abcdefghijklmnop inference\nabcdefghijklmnop metrics\n");
        assert!(matches!(&twice, Some((2, m)) if !m.contains("abcdefghijklmnop")));
        assert!(line_error("abcdefghijklmnop inference x y\n").is_some());
        assert!(line_error("- health\n- metrics\nabcdefghijklmnop inference\n").is_some());
        assert!(matches!(
            parse("# nothing\n"),
            Err(TokenFileError::NoTokens)
        ));
    }
}
