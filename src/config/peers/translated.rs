//! What a peer's command line comes to: `tensorport serve` flags, the peer's defaults where
//! they differ from ours, and the flags accepted but not applied.

use std::collections::BTreeMap;

use super::super::error::ConfigError;

/// A peer's flag this server accepts without applying it, and what it does instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotApplied {
    /// As given, with its `--`.
    pub flag: String,
    pub instead: &'static str,
}

/// The `serve` flags a peer's command line comes to.
#[derive(Debug, Default)]
pub struct Translated {
    /// Our flags (argument ids, as `rest_port`) and their values; `None` for a switch.
    set: BTreeMap<&'static str, Option<String>>,
    /// The peer's defaults where they differ from ours, applied to flags that neither this
    /// command line, the environment nor the `--config` file sets.
    defaults: BTreeMap<&'static str, Option<String>>,
    pub not_applied: Vec<NotApplied>,
    /// `--version` (TF Serving): print the version and stop.
    pub show_version: bool,
}

impl Translated {
    /// Sets our flag `flag` (spelled with dashes or underscores) to `value`.
    pub fn set(&mut self, flag: &'static str, value: impl Into<String>) {
        self.set.insert(flag, Some(value.into()));
    }

    /// Gives our switch `flag` (a flag without a value).
    pub fn switch(&mut self, flag: &'static str) {
        self.set.insert(flag, None);
    }

    pub fn unset(&mut self, flag: &'static str) {
        self.set.remove(flag);
        self.defaults.remove(flag);
    }

    pub fn is_set(&self, flag: &str) -> bool {
        self.set.contains_key(flag)
    }

    /// The peer's default for our `flag`.
    pub fn peer_default(&mut self, flag: &'static str, value: Option<&str>) {
        self.defaults.insert(flag, value.map(str::to_owned));
    }

    pub fn not_applied(&mut self, flag: &str, instead: &'static str) {
        self.not_applied.push(NotApplied {
            flag: format!("--{flag}"),
            instead,
        });
    }

    /// A setting of a peer's settings file or environment, named as it was given.
    pub fn not_applied_setting(&mut self, setting: &str, instead: &'static str) {
        self.not_applied.push(NotApplied {
            flag: setting.to_owned(),
            instead,
        });
    }

    /// Our command-line arguments for the flags set.
    pub fn arguments(&self) -> Vec<String> {
        self.set.iter().map(argument).collect()
    }

    /// Our arguments for the defaults of flags whose value `is_open` (not given otherwise).
    pub fn default_arguments(&self, is_open: impl Fn(&str) -> bool) -> Vec<String> {
        self.defaults
            .iter()
            .filter(|(flag, _)| !self.set.contains_key(*flag) && is_open(&flag.replace('-', "_")))
            .map(argument)
            .collect()
    }
}

fn argument((flag, value): (&&'static str, &Option<String>)) -> String {
    let flag = flag.replace('_', "-");
    match value {
        Some(value) => format!("--{flag}={value}"),
        None => format!("--{flag}"),
    }
}

/// `flag`'s refusal: `--flag: why`.
pub fn refuse(flag: &str, why: impl Into<String>) -> ConfigError {
    ConfigError::PeerRefused {
        flag: flag.to_owned(),
        why: why.into(),
    }
}
