//! Request parameters, whichever transport carried them: the value type both decoders build,
//! the parameters this server acts on (`priority`, `timeout`, the sequence extension's, the
//! shared-memory window of a tensor), and the load overrides it refuses.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::batcher::Priority;
use crate::error::Error;
use crate::infer::{Sequence, SequenceId};
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

/// KServe's sequence extension: `sequence_id` (an integer or a string), `sequence_start` and
/// `sequence_end` (booleans). An id of 0 or "" and false flags say the request belongs to no
/// sequence, as the extension defines them: `None` then, so that a client that always sends
/// them (and tritonclient's defaults, which send none) reaches a stateless model as before.
pub fn sequence_params(params: &Params) -> Result<Option<Sequence>, Error> {
    let id = match params.get("sequence_id") {
        None | Some(Param::Uint(0) | Param::Int(0)) => None,
        Some(Param::Str(text)) if text.is_empty() => None,
        Some(Param::Uint(number)) => Some(SequenceId::Number(*number)),
        // gRPC carries a numeric id as int64_param: its bits are the unsigned id, as Triton
        // keeps them.
        Some(Param::Int(number)) => {
            Some(SequenceId::Number(u64::from_ne_bytes(number.to_ne_bytes())))
        }
        Some(Param::Str(text)) => Some(SequenceId::Text(text.clone())),
        Some(other) => return Err(ParamError::SequenceIdType(format!("{other:?}")).into()),
    };
    let start = param_bool(params, "sequence_start")?;
    let end = param_bool(params, "sequence_end")?;
    Ok((id.is_some() || start || end).then_some(Sequence { id, start, end }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sequence_of(params: &[(&str, Param)]) -> Result<Option<Sequence>, Error> {
        let params: Params = params
            .iter()
            .map(|(key, value)| ((*key).to_owned(), value.clone()))
            .collect();
        sequence_params(&params)
    }

    #[test]
    fn an_id_of_zero_or_empty_and_false_flags_are_no_sequence() -> Result<(), Error> {
        let none: &[&[(&str, Param)]] = &[
            &[],
            &[("sequence_id", Param::Uint(0))],
            &[("sequence_id", Param::Int(0))],
            &[("sequence_id", Param::Str(String::new()))],
            &[
                ("sequence_id", Param::Int(0)),
                ("sequence_start", Param::Bool(false)),
                ("sequence_end", Param::Bool(false)),
            ],
        ];
        for params in none {
            assert_eq!(sequence_of(params)?, None, "{params:?}");
        }
        Ok(())
    }

    #[test]
    fn a_non_zero_id_or_a_flag_is_a_sequence() -> Result<(), Error> {
        let number = sequence_of(&[
            ("sequence_id", Param::Int(42)),
            ("sequence_start", Param::Bool(true)),
        ])?;
        assert_eq!(
            number,
            Some(Sequence {
                id: Some(SequenceId::Number(42)),
                start: true,
                end: false,
            })
        );
        let text = sequence_of(&[("sequence_id", Param::Str("a-b".into()))])?;
        assert_eq!(
            text.and_then(|s| s.id),
            Some(SequenceId::Text("a-b".into()))
        );
        let wrapped = sequence_of(&[("sequence_id", Param::Int(-1))])?;
        assert_eq!(
            wrapped.and_then(|s| s.id),
            Some(SequenceId::Number(u64::MAX))
        );
        let end_only = sequence_of(&[("sequence_end", Param::Bool(true))])?;
        assert_eq!(end_only.map(|s| s.parameter()), Some("sequence_end"));
        Ok(())
    }

    #[test]
    fn sequence_parameters_of_the_wrong_type_are_refused_by_name() {
        let wrong: &[(&str, Param, &str)] = &[
            ("sequence_id", Param::Double(1.5), "sequence_id"),
            ("sequence_id", Param::Bool(true), "sequence_id"),
            ("sequence_start", Param::Int(1), "sequence_start"),
            ("sequence_end", Param::Str("true".into()), "sequence_end"),
        ];
        for (key, value, named) in wrong {
            let refused = sequence_of(&[(key, value.clone())]);
            let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(message.contains(named), "{key}={value:?}: {message}");
        }
    }
}
