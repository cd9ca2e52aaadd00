//! How urgent a request is, as its client said.

/// Two levels are enough for the rule the server applies (a reserve in the queue and a place
/// ahead of default requests); more levels would need per-model configuration to mean anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Priority {
    #[default]
    Default,
    High,
}

impl Priority {
    /// KServe's / Triton's `priority` request parameter: 1 is the highest level; 0 means the
    /// default. Larger numbers are lower levels in Triton; with two levels they are default.
    pub fn from_level(level: u64) -> Self {
        if level == 1 {
            Self::High
        } else {
            Self::Default
        }
    }
}
