//! `GET` and `POST /v2/logging`: Triton's logging extension over HTTP. A POST body is an
//! object of settings to change (all or none); both answer with every setting as it now is.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::{Map, Value};

use super::support::{parse_object, Reply};
use crate::api::http::body::Payload;
use crate::api::http::response::json_response;
use crate::error::Error;
use crate::log_settings::{LogSettings, SettingValue};

type Settings = State<Arc<LogSettings>>;

pub(super) async fn get_logging(State(settings): Settings) -> Response {
    answer(settings.settings())
}

pub(super) async fn post_logging(State(settings): Settings, Payload(body): Payload) -> Reply {
    let mut changes = Vec::new();
    for (name, value) in parse_object(&body)? {
        let value = match value {
            Value::Bool(on) => SettingValue::Bool(on),
            Value::String(text) => SettingValue::Text(text),
            Value::Number(n) => match n.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => SettingValue::Uint(n),
                None => {
                    return Err(Error::invalid(format!(
                        "log setting '{name}' must be a non-negative integer below 2^32, got {n}"
                    ))
                    .into())
                }
            },
            other => {
                return Err(Error::invalid(format!(
                    "log setting '{name}' must be a boolean, a number or a string, got {other}"
                ))
                .into())
            }
        };
        changes.push((name, value));
    }
    let current = settings.update(changes).map_err(Error::from)?;
    Ok(answer(current))
}

fn answer(settings: Vec<(&'static str, SettingValue)>) -> Response {
    let object: Map<String, Value> = settings
        .into_iter()
        .map(|(name, value)| {
            let value = match value {
                SettingValue::Bool(on) => Value::Bool(on),
                SettingValue::Uint(n) => Value::from(n),
                SettingValue::Text(text) => Value::String(text),
            };
            (name.to_owned(), value)
        })
        .collect();
    json_response(&Value::Object(object))
}
