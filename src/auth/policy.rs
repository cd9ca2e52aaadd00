//! The grants a token file describes, and the comparison that finds a presented token among
//! them. A leaf: [`super::token_file`] builds a [`Policy`], [`super::access`] consults it.

use super::groups::Groups;

/// One line of the token file.
pub(super) struct Grant {
    pub(super) token: Vec<u8>,
    pub(super) groups: Groups,
    /// For the start-up log; never the token itself.
    pub(super) name: String,
}

/// Who may use which group. Built once from the token file; shared by both ports.
pub(super) struct Policy {
    pub(super) grants: Vec<Grant>,
    /// Groups open to requests without a token.
    pub(super) anonymous: Groups,
}

impl Policy {
    /// The groups of the grant whose token is `presented`. Every grant is compared, in time
    /// that depends only on the presented token's length, so that timing tells an attacker
    /// neither how much of a token matched nor which one did.
    pub(super) fn granted(&self, presented: &[u8]) -> Option<Groups> {
        let mut found = None;
        for grant in &self.grants {
            if constant_time_eq(presented, &grant.token) {
                found = Some(grant.groups);
            }
        }
        found
    }
}

/// Equality whose running time depends on `presented`'s length only, not on where (or
/// whether) it differs from `secret`.
fn constant_time_eq(presented: &[u8], secret: &[u8]) -> bool {
    if secret.is_empty() {
        return false;
    }
    let mut diff = u8::from(presented.len() != secret.len());
    for (byte, secret_byte) in presented.iter().zip(secret.iter().cycle()) {
        diff |= byte ^ secret_byte;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparison_needs_the_whole_token() {
        assert!(constant_time_eq(b"abcdef", b"abcdef"));
        assert!(!constant_time_eq(b"abcde", b"abcdef"));
        assert!(!constant_time_eq(b"abcdefabcdef", b"abcdef"));
        assert!(!constant_time_eq(b"abcdeg", b"abcdef"));
        assert!(!constant_time_eq(b"", b""));
    }
}
