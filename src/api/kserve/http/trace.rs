//! `GET` and `POST /v2/trace/setting` and `/v2/models/{name}/trace/setting`: Triton's trace
//! extension over HTTP. A POST body is an object of settings to change (all or none), each a
//! string, a number or a list of strings (`trace_level`), or `null` to clear it; both answer
//! with every setting now in force there.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::Response;
use serde_json::{Map, Value};

use super::support::{parse_object, Reply};
use crate::api::http::body::Payload;
use crate::api::http::response::json_response;
use crate::error::Error;
use crate::trace::settings::SettingValue;
use crate::trace::TraceSettings;

type Settings = State<Arc<TraceSettings>>;

pub(super) async fn get_trace(State(settings): Settings) -> Response {
    answer(settings.settings(None))
}

pub(super) async fn get_model_trace(
    State(settings): Settings,
    Path(model): Path<String>,
) -> Response {
    answer(settings.settings(Some(&model)))
}

pub(super) async fn post_trace(State(settings): Settings, Payload(body): Payload) -> Reply {
    update(&settings, None, &body)
}

pub(super) async fn post_model_trace(
    State(settings): Settings,
    Path(model): Path<String>,
    Payload(body): Payload,
) -> Reply {
    update(&settings, Some(&model), &body)
}

fn update(settings: &TraceSettings, model: Option<&str>, body: &[u8]) -> Reply {
    let mut changes = Vec::new();
    for (name, value) in parse_object(body)? {
        let value: SettingValue = match value {
            Value::Null => None,
            Value::String(text) => Some(vec![text]),
            Value::Number(n) => Some(vec![n.to_string()]),
            Value::Array(items) => Some(
                items
                    .into_iter()
                    .map(|item| match item {
                        Value::String(text) => Ok(text),
                        other => Err(Error::invalid(format!(
                            "trace setting '{name}' lists strings, got {other}"
                        ))),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            other => {
                return Err(Error::invalid(format!(
                    "trace setting '{name}' must be a string, a number, a list of strings or \
                     null, got {other}"
                ))
                .into())
            }
        };
        changes.push((name, value));
    }
    let current = settings.update(model, changes).map_err(Error::from)?;
    Ok(answer(current))
}

/// Every setting: `trace_level` as a list, the others as strings, as Triton answers.
fn answer(settings: Vec<(&'static str, Vec<String>)>) -> Response {
    let object: Map<String, Value> = settings
        .into_iter()
        .map(|(name, mut values)| {
            let value = if name == "trace_level" {
                Value::from(values)
            } else {
                Value::String(values.pop().unwrap_or_default())
            };
            (name.to_owned(), value)
        })
        .collect();
    json_response(&Value::Object(object))
}
