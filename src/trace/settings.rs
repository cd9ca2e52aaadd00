//! The trace settings Triton's trace extension reads and changes at run time (`GET` / `POST
//! /v2/trace/setting` and `/v2/models/{m}/trace/setting`, gRPC `TraceSetting`), and the
//! sampling decision they make. HTTP and gRPC share one [`TraceSettings`].
//!
//! The server's settings apply to every model without its own; a model's own settings
//! override some fields and take the rest from the server's. A setting cleared (`null`, or a
//! gRPC value with no strings) falls back: a model's to the server's, the server's to what the
//! command line gave. Unlike Triton, the settings also change in OpenTelemetry mode.
//!
//! The decision is cheap for a request that is not traced: without model overrides it is an
//! atomic load when no level is on, and one `fetch_add` when one is; nothing is allocated.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::config::{Sampling, TraceLevel, TraceMode};
use crate::error_kind::ErrorKind;

/// The most models with settings of their own: names arrive over the network.
const MAX_MODEL_OVERRIDES: usize = 4096;

/// Every setting, in the order answers list them.
pub const SETTING_NAMES: [&str; 6] = [
    "trace_file",
    "trace_level",
    "trace_rate",
    "trace_count",
    "log_frequency",
    "trace_mode",
];

/// A model's own settings: each field `None` takes the server's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Override {
    level: Option<TraceLevel>,
    rate: Option<u32>,
    count: Option<i64>,
    log_frequency: Option<u32>,
}

impl Override {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    fn over(&self, base: &Sampling) -> Sampling {
        Sampling {
            level: self.level.unwrap_or(base.level),
            rate: self.rate.unwrap_or(base.rate),
            count: self.count.unwrap_or(base.count),
            log_frequency: self.log_frequency.unwrap_or(base.log_frequency),
        }
    }
}

/// One set of settings' sampling state: which request of `rate` is traced, and how many
/// traces `count` still allows.
#[derive(Debug)]
struct Sampler {
    on: AtomicBool,
    rate: AtomicU32,
    count: AtomicI64,
    seen: AtomicU64,
}

impl Sampler {
    fn new(sampling: &Sampling) -> Self {
        Self {
            on: AtomicBool::new(sampling.level.is_on() && sampling.rate > 0),
            rate: AtomicU32::new(sampling.rate),
            count: AtomicI64::new(sampling.count),
            seen: AtomicU64::new(0),
        }
    }

    fn sample(&self) -> bool {
        if !self.on.load(Ordering::Relaxed) {
            return false;
        }
        let rate = u64::from(self.rate.load(Ordering::Relaxed).max(1));
        if !self
            .seen
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(rate)
        {
            return false;
        }
        // -1: no limit; else one trace fewer, and none at zero.
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| match left {
                -1 => Some(-1),
                left if left > 0 => Some(left - 1),
                _ => None,
            })
            .is_ok()
    }

    fn count_left(&self) -> i64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// One setting's value, as both protocols carry it: a list of strings (`None`: cleared).
pub type SettingValue = Option<Vec<String>>;

/// A change that cannot be made; nothing of the request is applied then.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraceSettingsError {
    #[error("unknown trace setting '{0}'; the settings are: {names}", names = SETTING_NAMES.join(", "))]
    Unknown(String),
    #[error("trace setting '{name}' takes {expected}, got {got:?}")]
    Invalid {
        name: String,
        expected: &'static str,
        got: Vec<String>,
    },
    #[error("trace_mode is '{current}' and cannot change at run time (--trace-config mode=...)")]
    ModeFixed { current: &'static str },
    #[error("trace_file cannot be set: traces go to an OpenTelemetry collector, never to a file")]
    FileFixed,
    #[error("too many models with trace settings of their own (at most {MAX_MODEL_OVERRIDES})")]
    TooManyModels,
}

impl TraceSettingsError {
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}

#[derive(Debug)]
struct State {
    /// The server's settings in force.
    global: Sampling,
    models: HashMap<String, Override>,
}

/// The server's trace settings and sampling state.
#[derive(Debug)]
pub struct TraceSettings {
    mode: TraceMode,
    /// What the command line gave: the server's settings cleared go back to these.
    startup: Sampling,
    state: Mutex<State>,
    global: RwLock<Arc<Sampler>>,
    /// Samplers of the models with settings of their own (rebuilt on every change).
    models: RwLock<HashMap<String, Arc<Sampler>>>,
    /// Whether `models` holds any, so that the common case reads no map.
    any_model: AtomicBool,
    /// Whether any settings have a level on, so that a server not tracing reads one flag.
    any_on: AtomicBool,
}

impl TraceSettings {
    pub fn new(mode: TraceMode, startup: Sampling) -> Self {
        let settings = Self {
            mode,
            state: Mutex::new(State {
                global: startup.clone(),
                models: HashMap::new(),
            }),
            global: RwLock::new(Arc::new(Sampler::new(&startup))),
            models: RwLock::new(HashMap::new()),
            any_model: AtomicBool::new(false),
            any_on: AtomicBool::new(false),
            startup,
        };
        let state = settings.lock();
        settings.rebuild(&state);
        drop(state);
        settings
    }

    /// Whether any request might be traced now (one atomic load).
    pub fn may_trace(&self) -> bool {
        self.any_on.load(Ordering::Relaxed)
    }

    /// Whether this request, for `model`, is traced: counts it against its settings' rate
    /// and count.
    pub fn sample(&self, model: &str) -> bool {
        if !self.may_trace() {
            return false;
        }
        if self.any_model.load(Ordering::Relaxed) {
            let models = self.models.read().unwrap_or_else(|p| p.into_inner());
            if let Some(sampler) = models.get(model) {
                return sampler.sample();
            }
        }
        let global = self.global.read().unwrap_or_else(|p| p.into_inner());
        global.sample()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The settings in force for `model` (or the server's), as Triton names them.
    pub fn settings(&self, model: Option<&str>) -> Vec<(&'static str, Vec<String>)> {
        let state = self.lock();
        self.answer(&state, model)
    }

    fn answer(&self, state: &State, model: Option<&str>) -> Vec<(&'static str, Vec<String>)> {
        let own = model.and_then(|m| state.models.get(m));
        let sampling = own.map_or(state.global.clone(), |o| o.over(&state.global));
        // The count left, as the sampler has taken it down.
        let count = match own {
            Some(_) => {
                let models = self.models.read().unwrap_or_else(|p| p.into_inner());
                model
                    .and_then(|m| models.get(m))
                    .map_or(sampling.count, |s| s.count_left())
            }
            None => self
                .global
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .count_left(),
        };
        vec![
            ("trace_file", vec![String::new()]),
            ("trace_level", sampling.level.names()),
            ("trace_rate", vec![sampling.rate.to_string()]),
            ("trace_count", vec![count.to_string()]),
            ("log_frequency", vec![sampling.log_frequency.to_string()]),
            ("trace_mode", vec![self.mode.name().to_owned()]),
        ]
    }

    /// Applies `changes` to `model`'s settings (or the server's) all together, or none of
    /// them when one is refused; answers with the settings now in force there.
    pub fn update(
        &self,
        model: Option<&str>,
        changes: impl IntoIterator<Item = (String, SettingValue)>,
    ) -> Result<Vec<(&'static str, Vec<String>)>, TraceSettingsError> {
        let mut state = self.lock();
        let mut global = state.global.clone();
        let mut own = model
            .and_then(|m| state.models.get(m).cloned())
            .unwrap_or_default();
        for (name, value) in changes {
            match model {
                Some(_) => change_model(&mut own, &name, value, self.mode)?,
                None => change_global(&mut global, &self.startup, &name, value, self.mode)?,
            }
        }
        match model {
            Some(m) if own.is_empty() => {
                state.models.remove(m);
            }
            Some(m) => {
                if !state.models.contains_key(m) && state.models.len() >= MAX_MODEL_OVERRIDES {
                    return Err(TraceSettingsError::TooManyModels);
                }
                state.models.insert(m.to_owned(), own);
            }
            None => state.global = global,
        }
        self.rebuild(&state);
        Ok(self.answer(&state, model))
    }

    /// New samplers for the settings in `state`.
    fn rebuild(&self, state: &State) {
        let models: HashMap<String, Arc<Sampler>> = state
            .models
            .iter()
            .map(|(name, own)| {
                (
                    name.clone(),
                    Arc::new(Sampler::new(&own.over(&state.global))),
                )
            })
            .collect();
        let any_on = state.global.level.is_on()
            || state
                .models
                .values()
                .any(|own| own.over(&state.global).level.is_on());
        *self.global.write().unwrap_or_else(|p| p.into_inner()) =
            Arc::new(Sampler::new(&state.global));
        self.any_model.store(!models.is_empty(), Ordering::Relaxed);
        *self.models.write().unwrap_or_else(|p| p.into_inner()) = models;
        self.any_on.store(any_on, Ordering::Relaxed);
    }
}

fn invalid(name: &str, expected: &'static str, got: &[String]) -> TraceSettingsError {
    TraceSettingsError::Invalid {
        name: name.to_owned(),
        expected,
        got: got.to_vec(),
    }
}

fn one<'v>(
    name: &str,
    value: &'v [String],
    expected: &'static str,
) -> Result<&'v str, TraceSettingsError> {
    match value {
        [one] => Ok(one.trim()),
        _ => Err(invalid(name, expected, value)),
    }
}

fn parse_level(name: &str, value: &[String]) -> Result<TraceLevel, TraceSettingsError> {
    let mut level = TraceLevel::OFF;
    if value.is_empty() {
        return Err(invalid(name, "OFF, TIMESTAMPS or TENSORS", value));
    }
    for item in value {
        level
            .add(item)
            .map_err(|_| invalid(name, "OFF, TIMESTAMPS or TENSORS", value))?;
    }
    Ok(level)
}

fn parse_rate(name: &str, value: &[String]) -> Result<u32, TraceSettingsError> {
    one(name, value, "a whole number")?
        .parse()
        .map_err(|_| invalid(name, "a whole number", value))
}

fn parse_count(name: &str, value: &[String]) -> Result<i64, TraceSettingsError> {
    one(name, value, "-1 or a whole number")?
        .parse()
        .ok()
        .filter(|c| *c >= -1)
        .ok_or_else(|| invalid(name, "-1 or a whole number", value))
}

/// Checks the settings that cannot change: `trace_file` (empty only) and `trace_mode` (its
/// own value only). `true` when `name` was one of them.
fn fixed(name: &str, value: &SettingValue, mode: TraceMode) -> Result<bool, TraceSettingsError> {
    let text = value.as_deref().and_then(|v| v.first()).map(|v| v.trim());
    match name {
        "trace_file" => match text {
            None | Some("") => Ok(true),
            Some(_) => Err(TraceSettingsError::FileFixed),
        },
        "trace_mode" => match text {
            None => Ok(true),
            Some(given) if given.eq_ignore_ascii_case(mode.name()) => Ok(true),
            Some(_) => Err(TraceSettingsError::ModeFixed {
                current: mode.name(),
            }),
        },
        _ => Ok(false),
    }
}

fn change_global(
    sampling: &mut Sampling,
    startup: &Sampling,
    name: &str,
    value: SettingValue,
    mode: TraceMode,
) -> Result<(), TraceSettingsError> {
    if fixed(name, &value, mode)? {
        return Ok(());
    }
    match (name, value) {
        ("trace_level", None) => sampling.level = startup.level,
        ("trace_level", Some(v)) => sampling.level = parse_level(name, &v)?,
        ("trace_rate", None) => sampling.rate = startup.rate,
        ("trace_rate", Some(v)) => sampling.rate = parse_rate(name, &v)?,
        ("trace_count", None) => sampling.count = startup.count,
        ("trace_count", Some(v)) => sampling.count = parse_count(name, &v)?,
        ("log_frequency", None) => sampling.log_frequency = startup.log_frequency,
        ("log_frequency", Some(v)) => sampling.log_frequency = parse_rate(name, &v)?,
        _ => return Err(TraceSettingsError::Unknown(name.to_owned())),
    }
    Ok(())
}

fn change_model(
    own: &mut Override,
    name: &str,
    value: SettingValue,
    mode: TraceMode,
) -> Result<(), TraceSettingsError> {
    if fixed(name, &value, mode)? {
        return Ok(());
    }
    match name {
        "trace_level" => own.level = value.map(|v| parse_level(name, &v)).transpose()?,
        "trace_rate" => own.rate = value.map(|v| parse_rate(name, &v)).transpose()?,
        "trace_count" => own.count = value.map(|v| parse_count(name, &v)).transpose()?,
        "log_frequency" => own.log_frequency = value.map(|v| parse_rate(name, &v)).transpose()?,
        _ => return Err(TraceSettingsError::Unknown(name.to_owned())),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
