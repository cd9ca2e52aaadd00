//! Request parameters, whichever transport carried them: the value type both decoders build,
//! the parameters this server acts on (`priority`, `timeout`, the shared-memory window of a
//! tensor), and the load overrides it refuses.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::batcher::Priority;
use crate::error::Error;
use crate::wire_error::ParamError;

/// A request parameter value, whichever transport carried it.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(String),
}

pub type Params = BTreeMap<String, Param>;

/// Triton lets a load request carry the model itself: a `config` parameter (its configuration
/// as JSON) and `file:<path>` parameters (file contents). Models load only from the model
/// directory here, so such a request is refused rather than answered as if they had applied.
pub(super) fn refuse_load_overrides<'k>(
    model: &str,
    keys: impl IntoIterator<Item = &'k String>,
) -> Result<(), Error> {
    // First, since the message repeats the name.
    crate::repository::check_model_name(model)?;
    let mut overrides: Vec<&str> = keys
        .into_iter()
        .map(String::as_str)
        .filter(|key| *key == "config" || key.starts_with("file:"))
        .collect();
    if overrides.is_empty() {
        return Ok(());
    }
    overrides.sort_unstable();
    Err(ParamError::LoadOverrides {
        model: model.to_owned(),
        overrides: overrides.join(", "),
    }
    .into())
}

pub(super) fn param_u64(params: &Params, key: &str) -> Result<Option<u64>, Error> {
    match params.get(key) {
        None => Ok(None),
        Some(Param::Uint(v)) => Ok(Some(*v)),
        Some(Param::Int(v)) => u64::try_from(*v).map(Some).map_err(|_| {
            ParamError::Negative {
                key: key.to_owned(),
                value: *v,
            }
            .into()
        }),
        Some(other) => Err(ParamError::NotInteger {
            key: key.to_owned(),
            got: format!("{other:?}"),
        }
        .into()),
    }
}

/// Parameter `key` as a boolean (absent: false).
pub fn param_bool(params: &Params, key: &str) -> Result<bool, Error> {
    match params.get(key) {
        None => Ok(false),
        Some(Param::Bool(v)) => Ok(*v),
        Some(other) => Err(ParamError::NotBoolean {
            key: key.to_owned(),
            got: format!("{other:?}"),
        }
        .into()),
    }
}

/// The request-level parameters this server acts on: `priority` and `timeout`.
pub fn scheduling_params(params: &Params) -> Result<(Priority, Option<Duration>), Error> {
    let priority = param_u64(params, "priority")?.map_or(Priority::Default, Priority::from_level);
    let timeout = param_u64(params, "timeout")?
        .filter(|&us| us > 0)
        .map(Duration::from_micros);
    Ok((priority, timeout))
}
