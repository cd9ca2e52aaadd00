//! The REST forms of Classify and Regress (`POST /v1/models/{name}:classify` and `:regress`),
//! as TF Serving's REST API spells them:
//!
//! ```json
//! {"signature_name": "...", "context": {"f": 1}, "examples": [{"x": [0.5, 1.5]}, ...]}
//! ```
//!
//! A feature's JSON value is a value or a list of values, all of one kind: integers make an
//! `int64_list`, numbers with a fraction or exponent a `float_list`, strings and
//! `{"b64": "..."}` objects a `bytes_list`. Answers are `{"result": [[["label", score], ...],
//! ...]}` for classify and `{"result": [value, ...]}` for regress.

use axum::response::Response;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::api::http::response::json_response;
use crate::api::tfserving::error::{ExampleBodyError, FeatureOwner, FeatureValueError};
use crate::api::tfserving::examples::Examples;
use crate::api::tfserving::{classify, regress};
use crate::error::Error;
use crate::infer::{InferService, ModelTarget};
use crate::proto::tensorflow::{
    feature, BytesList, Example, Feature, Features, FloatList, Int64List,
};
use crate::repository::VersionSelector;
use crate::request::RequestContext;

/// Which of the two example verbs a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    Classify,
    Regress,
}

/// Answers one `:classify` or `:regress` request.
pub(super) async fn answer(
    infer: &InferService,
    context: Option<&RequestContext>,
    model: &str,
    version: VersionSelector,
    verb: Verb,
    body: &[u8],
) -> Result<Response, Error> {
    let (signature, examples) = parse(body)?;
    let target = ModelTarget {
        model,
        version,
        signature: &signature,
    };
    let body = match verb {
        Verb::Classify => {
            let (_, result) = classify::run(infer, target, context, &examples).await?;
            let rows: Vec<Value> = result
                .classifications
                .iter()
                .map(|row| {
                    Value::Array(
                        row.classes
                            .iter()
                            .map(|class| json!([class.label, class.score]))
                            .collect(),
                    )
                })
                .collect();
            json!({ "result": rows })
        }
        Verb::Regress => {
            let (_, result) = regress::run(infer, target, context, &examples).await?;
            let values: Vec<Value> = result.regressions.iter().map(|r| json!(r.value)).collect();
            json!({ "result": values })
        }
    };
    Ok(json_response(&body))
}

/// The signature name and the examples of a request body.
fn parse(body: &[u8]) -> Result<(String, Examples), ExampleBodyError> {
    let parsed: Value = crate::api::json::body::parse(body).map_err(ExampleBodyError::NotJson)?;
    let Value::Object(fields) = parsed else {
        return Err(ExampleBodyError::NotObject);
    };
    let signature = match fields.get("signature_name") {
        None => String::new(),
        Some(Value::String(name)) => name.clone(),
        Some(_) => return Err(ExampleBodyError::SignatureNameNotString),
    };
    let context = match fields.get("context") {
        None => None,
        Some(Value::Object(map)) => Some(features(map, FeatureOwner::Context)?),
        Some(_) => return Err(ExampleBodyError::ContextNotObject),
    };
    let examples = match fields.get("examples") {
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, value)| match value {
                Value::Object(map) => Ok(Example {
                    features: Some(features(map, FeatureOwner::Example(i))?),
                }),
                _ => Err(ExampleBodyError::ExampleNotObject(i)),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(ExampleBodyError::ExamplesNotArray),
        None => return Err(ExampleBodyError::NoExamples),
    };
    Ok((signature, Examples::new(examples, context)?))
}

fn features(map: &Map<String, Value>, owner: FeatureOwner) -> Result<Features, ExampleBodyError> {
    let feature = map
        .iter()
        .map(|(name, value)| {
            let kind = kind(value).map_err(|source| ExampleBodyError::Feature {
                name: name.clone(),
                owner,
                source,
            })?;
            Ok((name.clone(), Feature { kind: Some(kind) }))
        })
        .collect::<Result<_, ExampleBodyError>>()?;
    Ok(Features { feature })
}

/// One JSON feature value as a feature list.
fn kind(value: &Value) -> Result<feature::Kind, FeatureValueError> {
    let values = match value {
        Value::Array(values) => values.as_slice(),
        single => std::slice::from_ref(single),
    };
    let Some(first) = values.first() else {
        return Err(FeatureValueError::EmptyList);
    };
    match first {
        Value::Number(_) if values.iter().all(|v| v.is_i64()) => {
            Ok(feature::Kind::Int64List(Int64List {
                value: values.iter().filter_map(Value::as_i64).collect(),
            }))
        }
        Value::Number(_) => values
            .iter()
            .map(|v| v.as_f64().map(|f| f as f32))
            .collect::<Option<Vec<f32>>>()
            .map(|value| feature::Kind::FloatList(FloatList { value }))
            .ok_or(FeatureValueError::MixedNumbers),
        Value::String(_) | Value::Object(_) => values
            .iter()
            .map(bytes_value)
            .collect::<Result<Vec<Bytes>, FeatureValueError>>()
            .map(|value| feature::Kind::BytesList(BytesList { value })),
        _ => Err(FeatureValueError::NotFeatureValue),
    }
}

fn bytes_value(value: &Value) -> Result<Bytes, FeatureValueError> {
    match value {
        Value::String(text) => Ok(Bytes::copy_from_slice(text.as_bytes())),
        Value::Object(map) if map.len() == 1 => match map.get("b64") {
            Some(Value::String(encoded)) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map(Bytes::from)
                .map_err(FeatureValueError::Base64),
            _ => Err(FeatureValueError::NotBytes),
        },
        _ => Err(FeatureValueError::MixedStrings),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_pick_the_feature_kind() {
        assert!(matches!(kind(&json!(3)), Ok(feature::Kind::Int64List(l)) if l.value == [3]));
        assert!(
            matches!(kind(&json!([1, 2.5])), Ok(feature::Kind::FloatList(l)) if l.value == [1.0, 2.5])
        );
        assert!(
            matches!(kind(&json!(["a", {"b64": "Yg=="}])), Ok(feature::Kind::BytesList(l)) if l.value == [Bytes::from("a"), Bytes::from("b")])
        );
        assert!(kind(&json!([])).is_err());
        assert!(kind(&json!([1, "a"])).is_err());
        assert!(kind(&json!(["a", 1])).is_err());
        assert!(kind(&json!([null])).is_err());
        assert!(kind(&json!({"b64": "%%"})).is_err());
    }

    #[test]
    fn bodies_without_examples_are_refused() {
        for body in [
            &b"[]"[..],
            b"{}",
            b"{\"examples\": []}",
            b"{\"examples\": [1]}",
            b"{\"examples\": {}}",
            b"{\"examples\": [{}], \"signature_name\": 3}",
            b"{\"examples\": [{}], \"context\": []}",
        ] {
            assert!(parse(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
        let (signature, examples) =
            parse(br#"{"signature_name": "s", "context": {"c": 1}, "examples": [{"x": 1.5}]}"#)
                .expect("valid body");
        assert_eq!(signature, "s");
        assert_eq!(examples.len(), 1);
    }
}
