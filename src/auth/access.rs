//! The server's access policy: [`Access`] answers whether a request's bearer token may use
//! the API group of the path it asks for, and [`Denied`] says why not.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use http::HeaderMap;

use super::groups::{self, Group};
use super::policy::Policy;
use super::token_file::{self, TokenFileError};
use crate::error_kind::ErrorKind;

/// The server's access policy: everything open (no `--auth-token-file`), or the file's grants.
#[derive(Clone, Default)]
pub struct Access {
    policy: Option<Arc<Policy>>,
}

impl fmt::Debug for Access {
    // Tokens are secrets: only their count is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.policy {
            None => f.write_str("Access(open)"),
            Some(policy) => write!(f, "Access({} tokens)", policy.grants.len()),
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("this API needs a token: send the header 'authorization: Bearer <token>'")]
    MissingToken,
    #[error("the token is not known to this server")]
    UnknownToken,
    #[error("the token may not use the '{0}' API")]
    GroupNotGranted(Group),
}

impl Denied {
    /// Its row in the server's one status table: 401 / UNAUTHENTICATED or 403 /
    /// PERMISSION_DENIED.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::MissingToken | Self::UnknownToken => ErrorKind::Unauthenticated,
            Self::GroupNotGranted(_) => ErrorKind::PermissionDenied,
        }
    }
}

impl Access {
    /// Every group open to anyone: the server without `--auth-token-file`.
    pub fn open() -> Self {
        Self::default()
    }

    /// The grants of a token file.
    pub fn from_file(path: &Path) -> Result<Self, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text)
    }

    /// The grants of a token file's text.
    pub fn parse(text: &str) -> Result<Self, TokenFileError> {
        let policy = token_file::parse(text)?;
        Ok(Self {
            policy: Some(Arc::new(policy)),
        })
    }

    /// Whether a request to `path` with these headers may proceed.
    pub fn check(&self, headers: &HeaderMap, path: &str) -> Result<(), Denied> {
        let Some(policy) = &self.policy else {
            return Ok(());
        };
        let group = groups::group_of(path);
        if group.is_some_and(|group| policy.anonymous.contains(group)) {
            return Ok(());
        }
        let token = bearer(headers).ok_or(Denied::MissingToken)?;
        let granted = policy.granted(token).ok_or(Denied::UnknownToken)?;
        match group {
            // A path in no group is answered 404 / UNIMPLEMENTED by the router; any known
            // token may learn that.
            None => Ok(()),
            Some(group) if granted.contains(group) => Ok(()),
            Some(group) => Err(Denied::GroupNotGranted(group)),
        }
    }

    /// Logs, once at start, which groups are open to whom.
    pub fn log_summary(&self) {
        let Some(policy) = &self.policy else {
            tracing::warn!(
                "authentication is off (no --auth-token-file): every API group is open to \
                 anyone who reaches the ports"
            );
            return;
        };
        for group in Group::ALL {
            let holders: Vec<&str> = policy
                .grants
                .iter()
                .filter(|grant| grant.groups.contains(group))
                .map(|grant| grant.name.as_str())
                .collect();
            let open_to = if policy.anonymous.contains(group) {
                "anyone (no token needed)".to_owned()
            } else if holders.is_empty() {
                "no one".to_owned()
            } else {
                format!("tokens {}", holders.join(", "))
            };
            tracing::info!("API group '{group}' is open to {open_to}");
        }
    }
}

/// The token of an `authorization: Bearer <token>` header (scheme case-insensitive).
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(http::header::AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = token.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
# operators
0123456789abcdef-admin *  admin
0123456789abcdef-infer inference,metadata  ci
";

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            value
                .parse()
                .unwrap_or_else(|_| http::HeaderValue::from_static("")),
        );
        headers
    }

    #[test]
    fn tokens_grant_their_groups_only() -> Result<(), TokenFileError> {
        let access = Access::parse(FILE)?;
        let infer = "/v2/models/m/infer";
        let load = "/v2/repository/models/m/load";
        assert_eq!(
            access.check(&HeaderMap::new(), infer),
            Err(Denied::MissingToken)
        );
        assert_eq!(
            access.check(&headers("Bearer wrong-token-0000000"), infer),
            Err(Denied::UnknownToken)
        );
        assert_eq!(
            access.check(&headers("Basic 0123456789abcdef-infer"), infer),
            Err(Denied::MissingToken)
        );
        let ci = headers("Bearer 0123456789abcdef-infer");
        assert_eq!(access.check(&ci, infer), Ok(()));
        assert_eq!(
            access.check(&ci, load),
            Err(Denied::GroupNotGranted(Group::ModelRepository))
        );
        assert_eq!(
            access.check(&headers("bearer 0123456789abcdef-admin"), load),
            Ok(())
        );
        // Probes are open by default; unknown paths need a known token.
        assert_eq!(access.check(&HeaderMap::new(), "/v2/health/ready"), Ok(()));
        assert_eq!(
            access.check(&HeaderMap::new(), "/nowhere"),
            Err(Denied::MissingToken)
        );
        assert_eq!(access.check(&ci, "/nowhere"), Ok(()));
        Ok(())
    }

    #[test]
    fn without_a_file_everything_is_open() {
        assert_eq!(
            Access::open().check(&HeaderMap::new(), "/v2/repository/models/m/load"),
            Ok(())
        );
    }
}
