//! The log settings Triton's logging extension reads and changes at run time (`GET` / `POST
//! /v2/logging`, gRPC `LogSettings`): which severities are written and how verbose the
//! server's own debug lines are. HTTP and gRPC share one [`LogSettings`].
//!
//! Triton's settings map onto the log filter as follows: `log_error`, `log_warning` and
//! `log_info` switch those severities on or off each on its own (for every crate);
//! `log_verbose_level` 1 adds tensorport's debug lines and 2 or more its trace lines, as
//! Triton's verbose levels add its own detail and not its libraries'. `log_format` reports
//! the format the server was started with (`--log-format`); `log_file` is empty (the log goes
//! to stderr). Neither can change here: a log file named over the network would let any
//! client that may change settings write a file anywhere the server can, so the file stays
//! the operator's choice at start-up, and the format belongs to whatever parses the lines.

use std::sync::Mutex;

use crate::error_kind::ErrorKind;

/// One setting's value, as both protocols carry it.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingValue {
    Bool(bool),
    Uint(u32),
    Text(String),
}

/// The settings in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogState {
    pub error: bool,
    pub warning: bool,
    pub info: bool,
    /// 0: no debug lines; 1: tensorport's debug lines; 2 or more: its trace lines too.
    pub verbose_level: u32,
    /// The line format the server was started with, as Triton names formats.
    pub format: LogFormatName,
}

/// `--log-format`, named for Triton's `log_format` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormatName {
    /// Text lines (ISO 8601 timestamps, which is Triton's `ISO8601` format's point).
    Text,
    Json,
}

impl LogFormatName {
    fn name(self) -> &'static str {
        match self {
            Self::Text => "ISO8601",
            Self::Json => "json",
        }
    }
}

impl Default for LogState {
    /// Every severity on, no verbose lines, text: a server started without log flags.
    fn default() -> Self {
        Self {
            error: true,
            warning: true,
            info: true,
            verbose_level: 0,
            format: LogFormatName::Text,
        }
    }
}

impl LogState {
    /// The filter directive for the state's verbosity: what passes before the severity
    /// switches apply. `base` is the operator's own (RUST_LOG or `--log-level`), kept while
    /// no verbose level is asked for.
    pub fn directive(&self, base: &str) -> String {
        match self.verbose_level {
            0 => base.to_owned(),
            1 => format!("{base},tensorport=debug"),
            _ => format!("{base},tensorport=trace"),
        }
    }

    /// Whether a line of `level` is written under the severity switches.
    pub fn passes(&self, level: tracing::Level) -> bool {
        match level {
            tracing::Level::ERROR => self.error,
            tracing::Level::WARN => self.warning,
            tracing::Level::INFO => self.info,
            // Debug and trace lines pass only where the directive lets them.
            _ => true,
        }
    }

    fn setting(&self, name: &str) -> Option<SettingValue> {
        Some(match name {
            "log_file" => SettingValue::Text(String::new()),
            "log_info" => SettingValue::Bool(self.info),
            "log_warning" => SettingValue::Bool(self.warning),
            "log_error" => SettingValue::Bool(self.error),
            "log_verbose_level" => SettingValue::Uint(self.verbose_level),
            "log_format" => SettingValue::Text(self.format.name().to_owned()),
            _ => return None,
        })
    }
}

/// Every setting, in the order answers list them.
pub const SETTING_NAMES: [&str; 6] = [
    "log_file",
    "log_info",
    "log_warning",
    "log_error",
    "log_verbose_level",
    "log_format",
];

/// A change that cannot be made; nothing of the request is applied then.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LogSettingsError {
    #[error("unknown log setting '{0}'; the settings are: {names}", names = SETTING_NAMES.join(", "))]
    Unknown(String),
    #[error("log setting '{name}' takes {expected}")]
    WrongType {
        name: String,
        expected: &'static str,
    },
    #[error("log_file cannot be set over the API: the log goes to stderr (set at start-up)")]
    FileFixed,
    #[error("log_format is '{current}' and cannot change at run time (--log-format sets it)")]
    FormatFixed { current: &'static str },
    #[error("the log filter could not be changed: {0}")]
    Apply(String),
}

impl LogSettingsError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Apply(_) => ErrorKind::Internal,
            _ => ErrorKind::InvalidArgument,
        }
    }
}

/// Brings the process's log filter in line with a new state (built where the subscriber is).
pub type ApplyLogState = Box<dyn Fn(&LogState) -> Result<(), String> + Send + Sync>;

/// The server's log settings and the hook that applies them.
pub struct LogSettings {
    state: Mutex<LogState>,
    apply: Option<ApplyLogState>,
}

impl std::fmt::Debug for LogSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogSettings")
            .field("state", &self.current())
            .field("applied", &self.apply.is_some())
            .finish()
    }
}

impl LogSettings {
    /// Settings `apply` makes real in the process's log filter.
    pub fn new(initial: LogState, apply: ApplyLogState) -> Self {
        Self {
            state: Mutex::new(initial),
            apply: Some(apply),
        }
    }

    /// Settings of a server that installed no log subscriber of its own (an embedding
    /// process, the tests): they are reported and kept, and filter nothing.
    pub fn unattached(initial: LogState) -> Self {
        Self {
            state: Mutex::new(initial),
            apply: None,
        }
    }

    pub fn current(&self) -> LogState {
        *self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every setting and its value.
    pub fn settings(&self) -> Vec<(&'static str, SettingValue)> {
        let state = self.current();
        SETTING_NAMES
            .iter()
            .filter_map(|name| state.setting(name).map(|value| (*name, value)))
            .collect()
    }

    /// Applies `changes` all together, or none of them when one is refused.
    pub fn update(
        &self,
        changes: impl IntoIterator<Item = (String, SettingValue)>,
    ) -> Result<Vec<(&'static str, SettingValue)>, LogSettingsError> {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = *guard;
        for (name, value) in changes {
            change(&mut next, &name, value)?;
        }
        if next != *guard {
            if let Some(apply) = &self.apply {
                apply(&next).map_err(LogSettingsError::Apply)?;
            }
            *guard = next;
        }
        drop(guard);
        Ok(self.settings())
    }
}

fn change(state: &mut LogState, name: &str, value: SettingValue) -> Result<(), LogSettingsError> {
    let wrong = |expected| LogSettingsError::WrongType {
        name: name.to_owned(),
        expected,
    };
    match name {
        "log_info" | "log_warning" | "log_error" => {
            let SettingValue::Bool(on) = value else {
                return Err(wrong("a boolean"));
            };
            match name {
                "log_info" => state.info = on,
                "log_warning" => state.warning = on,
                _ => state.error = on,
            }
        }
        "log_verbose_level" => match value {
            SettingValue::Uint(level) => state.verbose_level = level,
            _ => return Err(wrong("a non-negative integer")),
        },
        "log_file" => match value {
            SettingValue::Text(file) if file.is_empty() => {}
            SettingValue::Text(_) => return Err(LogSettingsError::FileFixed),
            _ => return Err(wrong("a string")),
        },
        "log_format" => match value {
            SettingValue::Text(format) if format == state.format.name() => {}
            SettingValue::Text(_) => {
                return Err(LogSettingsError::FormatFixed {
                    current: state.format.name(),
                })
            }
            _ => return Err(wrong("a string")),
        },
        _ => return Err(LogSettingsError::Unknown(name.to_owned())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn initial() -> LogState {
        LogState::default()
    }

    #[test]
    fn a_refused_change_applies_nothing_of_its_request() {
        let settings = LogSettings::unattached(initial());
        let refused = settings.update([
            ("log_info".to_owned(), SettingValue::Bool(false)),
            (
                "log_file".to_owned(),
                SettingValue::Text("/etc/passwd".into()),
            ),
        ]);
        assert_eq!(refused, Err(LogSettingsError::FileFixed));
        assert!(settings.current().info);
    }

    #[test]
    fn wrong_types_and_unknown_names_are_named() {
        let settings = LogSettings::unattached(initial());
        let err = settings
            .update([("log_verbose_level".to_owned(), SettingValue::Bool(true))])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "log setting 'log_verbose_level' takes a non-negative integer"
        );
        let err = settings
            .update([("log_colour".to_owned(), SettingValue::Bool(true))])
            .unwrap_err();
        assert!(err.to_string().contains("'log_colour'"), "{err}");
    }

    #[test]
    fn the_hook_sees_each_new_state_once_and_reports_failure() {
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let hook_seen = seen.clone();
        let settings = LogSettings::new(
            initial(),
            Box::new(move |state| {
                hook_seen.lock().unwrap().push(state.verbose_level);
                if state.verbose_level > 5 {
                    Err("too verbose".into())
                } else {
                    Ok(())
                }
            }),
        );
        let answer = settings
            .update([("log_verbose_level".to_owned(), SettingValue::Uint(1))])
            .unwrap();
        assert!(answer.contains(&("log_verbose_level", SettingValue::Uint(1))));
        // No change: the hook is not called again.
        settings
            .update([("log_verbose_level".to_owned(), SettingValue::Uint(1))])
            .unwrap();
        let failed = settings.update([("log_verbose_level".to_owned(), SettingValue::Uint(9))]);
        assert_eq!(failed, Err(LogSettingsError::Apply("too verbose".into())));
        assert_eq!(settings.current().verbose_level, 1);
        assert_eq!(*seen.lock().unwrap(), vec![1, 9]);
    }

    #[test]
    fn verbosity_adds_the_server_s_own_detail_to_the_operator_s_filter() {
        let mut state = initial();
        assert_eq!(state.directive("warn"), "warn");
        state.verbose_level = 1;
        assert_eq!(state.directive("warn"), "warn,tensorport=debug");
        state.verbose_level = 3;
        assert_eq!(state.directive("info"), "info,tensorport=trace");
        state.info = false;
        assert!(!state.passes(tracing::Level::INFO));
        assert!(state.passes(tracing::Level::WARN) && state.passes(tracing::Level::DEBUG));
    }
}
