//! TF Serving's REST API under `/v1/models/...`.
//!
//! axum cannot route `{name}:predict` (one parameter per segment), so everything under
//! `/v1/models/` arrives here and [`RestTarget::parse`] splits the path itself.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Extension;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::{rest_examples, signature_defs, state_name, version_statuses, PREDICT_METHOD};
use crate::api::json_body::{self, RawObject};
use crate::api::json_decode::{decode_rows, decode_value};
use crate::api::json_tensor::{write_json_str, write_tensor};
use crate::api::rest_util::{json_response, RestError};
use crate::api::route_table::Routes;
use crate::backend::{NamedTensor, Signature};
use crate::batcher::RequestError;
use crate::error::Error;
use crate::infer::{Decoded, InferService, ModelTarget, PredictionResult};
use crate::repository::VersionSelector;
use crate::request::RequestContext;
use crate::wire_error::PredictBodyError;

/// The path templates [`dispatch`] answers, spelled as the OpenAPI document spells them.
pub const SERVED_PATHS: &[&str] = &[
    "/v1/models/{name}",
    "/v1/models/{name}/versions/{version}",
    "/v1/models/{name}/labels/{label}",
    "/v1/models/{name}/metadata",
    "/v1/models/{name}/versions/{version}/metadata",
    "/v1/models/{name}/labels/{label}/metadata",
    "/v1/models/{name}:predict",
    "/v1/models/{name}/versions/{version}:predict",
    "/v1/models/{name}/labels/{label}:predict",
    "/v1/models/{name}:classify",
    "/v1/models/{name}/versions/{version}:classify",
    "/v1/models/{name}/labels/{label}:classify",
    "/v1/models/{name}:regress",
    "/v1/models/{name}/versions/{version}:regress",
    "/v1/models/{name}/labels/{label}:regress",
];

/// The verbs of TF Serving's REST API (`/v1/models/{name}:verb`).
const VERBS: [&str; 3] = ["predict", "classify", "regress"];

/// The `/v1` routes, waiting for their state.
pub fn routes() -> Routes<Arc<InferService>> {
    Routes::new().dispatch("/v1/models/{*rest}", any(dispatch), SERVED_PATHS)
}

/// What a `/v1/models/...` path names.
#[derive(Debug, PartialEq)]
enum RestTarget<'p> {
    Status {
        model: &'p str,
        version: VersionRef<'p>,
    },
    Metadata {
        model: &'p str,
        version: VersionRef<'p>,
    },
    Verb {
        model: &'p str,
        version: VersionRef<'p>,
        verb: &'p str,
    },
}

#[derive(Debug, PartialEq, Clone, Copy)]
enum VersionRef<'p> {
    Latest,
    Number(&'p str),
    Label(&'p str),
}

impl<'p> RestTarget<'p> {
    fn parse(path: &'p str) -> Option<Self> {
        // A verb ends the path; a ':' followed by more segments belongs to a name.
        let (resource, verb) = match path.rsplit_once(':') {
            Some((resource, verb)) if !verb.contains('/') => (resource, Some(verb)),
            _ => (path, None),
        };
        let segments: Vec<&str> = resource.split('/').collect();
        let (model, version, rest) = match segments.as_slice() {
            [model, rest @ ..] if !model.is_empty() => match rest {
                ["versions", v, tail @ ..] => (*model, VersionRef::Number(v), tail),
                ["labels", l, tail @ ..] => (*model, VersionRef::Label(l), tail),
                tail => (*model, VersionRef::Latest, tail),
            },
            _ => return None,
        };
        match (rest, verb) {
            ([], Some(verb)) => Some(Self::Verb {
                model,
                version,
                verb,
            }),
            (["metadata"], None) => Some(Self::Metadata { model, version }),
            ([], None) => Some(Self::Status { model, version }),
            _ => None,
        }
    }
}

// Only the tests need the mapping: dispatch matches on the target itself.
#[cfg(test)]
impl RestTarget<'_> {
    /// The entry of [`SERVED_PATHS`] this target answers on; `None` for a verb TF Serving does
    /// not define, which is refused as a bad request rather than served.
    fn template(&self) -> Option<&'static str> {
        use VersionRef::{Label, Latest, Number};
        Some(match self {
            Self::Status { version, .. } => match version {
                Latest => "/v1/models/{name}",
                Number(_) => "/v1/models/{name}/versions/{version}",
                Label(_) => "/v1/models/{name}/labels/{label}",
            },
            Self::Metadata { version, .. } => match version {
                Latest => "/v1/models/{name}/metadata",
                Number(_) => "/v1/models/{name}/versions/{version}/metadata",
                Label(_) => "/v1/models/{name}/labels/{label}/metadata",
            },
            Self::Verb { version, verb, .. } => match (version, *verb) {
                (Latest, "predict") => "/v1/models/{name}:predict",
                (Number(_), "predict") => "/v1/models/{name}/versions/{version}:predict",
                (Label(_), "predict") => "/v1/models/{name}/labels/{label}:predict",
                (Latest, "classify") => "/v1/models/{name}:classify",
                (Number(_), "classify") => "/v1/models/{name}/versions/{version}:classify",
                (Label(_), "classify") => "/v1/models/{name}/labels/{label}:classify",
                (Latest, "regress") => "/v1/models/{name}:regress",
                (Number(_), "regress") => "/v1/models/{name}/versions/{version}:regress",
                (Label(_), "regress") => "/v1/models/{name}/labels/{label}:regress",
                _ => return None,
            },
        })
    }
}

fn version_selector(version: VersionRef<'_>) -> Result<VersionSelector, Error> {
    Ok(match version {
        VersionRef::Latest => VersionSelector::Latest,
        VersionRef::Number(text) => VersionSelector::from_number_text(text)?,
        VersionRef::Label(label) => VersionSelector::Label(label.to_owned()),
    })
}

async fn dispatch(
    State(infer): State<Arc<InferService>>,
    method: Method,
    Path(rest): Path<String>,
    context: Option<Extension<Arc<RequestContext>>>,
    body: Bytes,
) -> Response {
    let context = context.as_ref().map(|Extension(context)| context.as_ref());
    let result = match (RestTarget::parse(&rest), &method) {
        (Some(RestTarget::Status { model, version }), &Method::GET) => {
            status(&infer, model, version)
        }
        (Some(RestTarget::Metadata { model, version }), &Method::GET) => {
            metadata(&infer, model, version, context).await
        }
        (
            Some(RestTarget::Verb {
                model,
                version,
                verb: "predict",
            }),
            &Method::POST,
        ) => predict(&infer, context, model, version, &body).await,
        (
            Some(RestTarget::Verb {
                model,
                version,
                verb: verb @ ("classify" | "regress"),
            }),
            &Method::POST,
        ) => {
            let verb = if verb == "classify" {
                rest_examples::Verb::Classify
            } else {
                rest_examples::Verb::Regress
            };
            match version_selector(version) {
                Ok(version) => {
                    rest_examples::answer(&infer, context, model, version, verb, &body).await
                }
                Err(err) => Err(err),
            }
        }
        (Some(RestTarget::Verb { verb, .. }), &Method::POST) => {
            Err(PredictBodyError::UnknownVerb((*verb).to_owned()).into())
        }
        // Only the verbs TF Serving defines name a resource; another is no endpoint at all.
        (Some(RestTarget::Verb { verb, .. }), _) if !VERBS.contains(&verb) => {
            return RestError::not_found_path(&format!("/v1/models/{rest}")).into_response()
        }
        (Some(target), _) => {
            let allow = match target {
                RestTarget::Verb { .. } => "POST",
                RestTarget::Status { .. } | RestTarget::Metadata { .. } => "GET",
            };
            return RestError::method_not_allowed(&method, &format!("/v1/models/{rest}"), allow)
                .into_response();
        }
        (None, _) => {
            return RestError::not_found_path(&format!("/v1/models/{rest}")).into_response()
        }
    };
    match result {
        Ok(response) => response,
        Err(err) => RestError::from(err).into_response(),
    }
}

fn status(infer: &InferService, model: &str, version: VersionRef<'_>) -> Result<Response, Error> {
    let snapshot = infer.repository().snapshot();
    let record = snapshot.model(model)?;
    let version = record.version_of(&version_selector(version)?)?;
    let rows: Vec<Value> = version_statuses(record, version)?
        .into_iter()
        .map(|row| {
            json!({
                "version": row.version.to_string(),
                "state": state_name(row.state),
                "status": {
                    "error_code": row.error_code.as_str_name(),
                    "error_message": row.error_message,
                },
            })
        })
        .collect();
    Ok(json_response(&json!({ "model_version_status": rows })))
}

async fn metadata(
    infer: &InferService,
    model: &str,
    version: VersionRef<'_>,
    context: Option<&RequestContext>,
) -> Result<Response, Error> {
    let model = infer
        .resolve_loading(model, version_selector(version)?, context)
        .await?;
    let defs: Map<String, Value> = signature_defs(&model)
        .into_iter()
        .map(|(name, def)| {
            let infos = |infos: &std::collections::HashMap<
                String,
                crate::proto::tensorflow::TensorInfo,
            >| {
                infos
                    .iter()
                    .map(|(key, info)| {
                        let dims: Vec<Value> = info
                            .tensor_shape
                            .iter()
                            .flat_map(|shape| shape.dim.iter())
                            .map(|d| json!({ "size": d.size.to_string(), "name": d.name }))
                            .collect();
                        let dtype = crate::proto::tensorflow::DataType::try_from(info.dtype)
                            .map(|d| d.as_str_name())
                            .unwrap_or("DT_INVALID");
                        let name = match &info.encoding {
                            Some(crate::proto::tensorflow::tensor_info::Encoding::Name(n)) => {
                                n.clone()
                            }
                            _ => String::new(),
                        };
                        (
                            key.clone(),
                            json!({
                                "dtype": dtype,
                                "tensor_shape": { "dim": dims, "unknown_rank": false },
                                "name": name,
                            }),
                        )
                    })
                    .collect::<Map<String, Value>>()
            };
            (
                name,
                json!({
                    "inputs": infos(&def.inputs),
                    "outputs": infos(&def.outputs),
                    "method_name": PREDICT_METHOD,
                }),
            )
        })
        .collect();
    Ok(json_response(&json!({
        "model_spec": {
            "name": model.name,
            "signature_name": "",
            "version": model.version.to_string(),
        },
        "metadata": { "signature_def": { "signature_def": defs } },
    })))
}

/// A predict request as sent, read in one pass: tensor data stays borrowed text until the
/// signature says what each input should be.
#[derive(serde::Deserialize)]
struct PredictBody<'a> {
    #[serde(borrow, default)]
    signature_name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    instances: Option<&'a RawValue>,
    #[serde(borrow, default)]
    inputs: Option<&'a RawValue>,
}

/// The two request layouts TF Serving accepts, as unparsed JSON text.
enum Layout<'b> {
    /// `"instances"`: one entry per batch row.
    Rows(Vec<&'b RawValue>),
    /// `"inputs"`: whole tensors.
    Columns(&'b RawValue),
}

async fn predict(
    infer: &InferService,
    context: Option<&RequestContext>,
    model: &str,
    version: VersionRef<'_>,
    body: &[u8],
) -> Result<Response, Error> {
    let mut rewritten = Vec::new();
    if !body.trim_ascii_start().starts_with(b"{") {
        // Not an object: say whether it is JSON at all.
        return Err(match json_body::parse(body) {
            Ok(_) => PredictBodyError::NotObject,
            Err(err) => PredictBodyError::NotJson(err.to_string()),
        }
        .into());
    }
    let fields: PredictBody<'_> =
        json_body::parse_borrowed(body, &mut rewritten).map_err(|err| {
            if err.is_data() {
                Error::invalid(format!("the request body is malformed: {err}"))
            } else {
                PredictBodyError::NotJson(err.to_string()).into()
            }
        })?;
    let signature_name = match fields
        .signature_name
        .map(|raw| serde_json::from_str(raw.get()))
    {
        None => String::new(),
        Some(Ok(Value::String(name))) => name,
        Some(_) => return Err(PredictBodyError::SignatureNameNotString.into()),
    };
    let layout = match (fields.instances, fields.inputs) {
        (Some(_), Some(_)) => return Err(PredictBodyError::BothLayouts.into()),
        (Some(instances), None) => {
            let rows: Vec<&RawValue> = serde_json::from_str(instances.get())
                .map_err(|_| PredictBodyError::InstancesNotArray)?;
            if rows.is_empty() {
                return Err(PredictBodyError::NoInstances.into());
            }
            Layout::Rows(rows)
        }
        (None, Some(columns)) => Layout::Columns(columns),
        (None, None) => return Err(PredictBodyError::NoLayout.into()),
    };

    let target = ModelTarget {
        model,
        version: version_selector(version)?,
        signature: &signature_name,
    };
    let row_format = matches!(layout, Layout::Rows(_));
    let prepared = infer
        .prepare(target, context, |sig| {
            let inputs = match &layout {
                Layout::Rows(rows) => row_inputs(sig, rows, infer)?,
                Layout::Columns(columns) => column_inputs(sig, columns, infer)?,
            };
            // TF Serving's API has no priority, and no timeout but the transport's.
            Ok(Decoded {
                inputs,
                ..Decoded::default()
            })
        })
        .await?;
    let result = infer.run(prepared).await?;
    let body = if row_format {
        predictions_body(&result)?
    } else {
        outputs_body(&result)?
    };
    Ok(crate::api::rest_util::raw_json_response(body))
}

/// An instance is "named" when it is a JSON object other than `{"b64": ...}`: its members,
/// still as text.
fn named(value: &RawValue) -> Option<RawObject<'_>> {
    if !value.get().trim_start().starts_with('{') {
        return None;
    }
    let object: RawObject<'_> = serde_json::from_str(value.get()).ok()?;
    (!(object.len() == 1 && object.contains_key("b64"))).then_some(object)
}

fn row_inputs(
    sig: &Signature,
    rows: &[&RawValue],
    infer: &InferService,
) -> Result<Vec<NamedTensor>, Error> {
    let limits = infer.limits();
    let first_named = rows.first().and_then(|row| named(row));
    let Some(first) = first_named else {
        // Bare values: allowed when the signature has a single input.
        let [spec] = sig.inputs.as_slice() else {
            return Err(PredictBodyError::InstancesNotNamed {
                count: sig.inputs.len(),
                names: sig.input_names(),
            }
            .into());
        };
        if rows.iter().any(|row| named(row).is_some()) {
            return Err(PredictBodyError::MixedInstances.into());
        }
        let tensor = decode_rows(rows, spec.dtype, limits).map_err(|e| e.in_input(&spec.name))?;
        return Ok(vec![(spec.name.clone(), tensor)]);
    };
    let mut objects = Vec::with_capacity(rows.len());
    objects.push(first);
    for (i, row) in rows.iter().enumerate().skip(1) {
        let object = named(row).ok_or(PredictBodyError::InstanceNotObject(i))?;
        objects.push(object);
    }
    let keys = objects
        .first()
        .map(|o| o.keys().collect::<Vec<_>>())
        .unwrap_or_default();
    if let Some(key) = keys.iter().find(|key| sig.input(key).is_none()) {
        return Err(RequestError::UnknownInput {
            name: (*key).clone(),
            expected: sig.input_names(),
        }
        .into());
    }
    if let Some((i, _)) = objects
        .iter()
        .enumerate()
        .find(|(_, o)| o.len() != keys.len())
    {
        return Err(PredictBodyError::DifferentKeys(i).into());
    }
    let mut inputs = Vec::with_capacity(keys.len());
    for spec in &sig.inputs {
        let mut values = Vec::with_capacity(objects.len());
        for (i, object) in objects.iter().enumerate() {
            match object.get(&spec.name) {
                Some(value) => values.push(*value),
                None if i == 0 => {
                    return Err(RequestError::MissingInput {
                        name: spec.name.clone(),
                        expected: sig.input_names(),
                    }
                    .into())
                }
                None => {
                    return Err(PredictBodyError::MissingInInstance {
                        instance: i,
                        input: spec.name.clone(),
                    }
                    .into())
                }
            }
        }
        let tensor =
            decode_rows(&values, spec.dtype, limits).map_err(|e| e.in_input(&spec.name))?;
        inputs.push((spec.name.clone(), tensor));
    }
    Ok(inputs)
}

fn column_inputs(
    sig: &Signature,
    columns: &RawValue,
    infer: &InferService,
) -> Result<Vec<NamedTensor>, Error> {
    let limits = infer.limits();
    let Some(map) = named(columns) else {
        let [spec] = sig.inputs.as_slice() else {
            return Err(PredictBodyError::InputsNotNamed {
                count: sig.inputs.len(),
                names: sig.input_names(),
            }
            .into());
        };
        let tensor =
            decode_value(columns, spec.dtype, limits).map_err(|e| e.in_input(&spec.name))?;
        return Ok(vec![(spec.name.clone(), tensor)]);
    };
    map.iter()
        .map(|(name, value)| {
            let spec = sig.input(name).ok_or_else(|| RequestError::UnknownInput {
                name: name.clone(),
                expected: sig.input_names(),
            })?;
            let tensor = decode_value(value, spec.dtype, limits).map_err(|e| e.in_input(name))?;
            Ok((name.clone(), tensor))
        })
        .collect()
}

/// TF Serving writes outputs whose name ends in `_bytes` as base64.
fn binary_output(name: &str) -> bool {
    name.ends_with("_bytes")
}

/// `{"predictions": [...]}`: one entry per row; an object per row when there are several outputs.
fn predictions_body(result: &PredictionResult) -> Result<Vec<u8>, Error> {
    let batch = result
        .outputs
        .first()
        .and_then(|(_, t)| t.shape().first().copied())
        .unwrap_or(0);
    for (name, tensor) in &result.outputs {
        if tensor.shape().first() != Some(&batch) {
            return Err(PredictBodyError::RaggedOutputs {
                output: name.clone(),
                shape: tensor.shape().to_vec(),
                batch,
            }
            .into());
        }
    }
    let mut out = Vec::with_capacity(64 + batch * 16);
    out.extend_from_slice(b"{\"predictions\":[");
    for row in 0..batch {
        if row > 0 {
            out.push(b',');
        }
        match result.outputs.as_slice() {
            [(name, tensor)] => write_tensor(&mut out, tensor, Some(row), binary_output(name))?,
            outputs => {
                out.push(b'{');
                for (i, (name, tensor)) in outputs.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_json_str(&mut out, name);
                    out.push(b':');
                    write_tensor(&mut out, tensor, Some(row), binary_output(name))?;
                }
                out.push(b'}');
            }
        }
    }
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// `{"outputs": value}` for one output, `{"outputs": {"name": value, ...}}` for several.
fn outputs_body(result: &PredictionResult) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"{\"outputs\":");
    match result.outputs.as_slice() {
        [(name, tensor)] => write_tensor(&mut out, tensor, None, binary_output(name))?,
        outputs => {
            out.push(b'{');
            for (i, (name, tensor)) in outputs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json_str(&mut out, name);
                out.push(b':');
                write_tensor(&mut out, tensor, None, binary_output(name))?;
            }
            out.push(b'}');
        }
    }
    out.push(b'}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_path_form() {
        use RestTarget::*;
        use VersionRef::*;
        assert_eq!(
            RestTarget::parse("m"),
            Some(Status {
                model: "m",
                version: Latest
            })
        );
        assert_eq!(
            RestTarget::parse("m/versions/3"),
            Some(Status {
                model: "m",
                version: Number("3")
            })
        );
        assert_eq!(
            RestTarget::parse("m/metadata"),
            Some(Metadata {
                model: "m",
                version: Latest
            })
        );
        assert_eq!(
            RestTarget::parse("m/versions/3/metadata"),
            Some(Metadata {
                model: "m",
                version: Number("3")
            })
        );
        assert_eq!(
            RestTarget::parse("m:predict"),
            Some(Verb {
                model: "m",
                version: Latest,
                verb: "predict"
            })
        );
        assert_eq!(
            RestTarget::parse("m/versions/2:predict"),
            Some(Verb {
                model: "m",
                version: Number("2"),
                verb: "predict"
            })
        );
        assert_eq!(
            RestTarget::parse("m/labels/stable:predict"),
            Some(Verb {
                model: "m",
                version: Label("stable"),
                verb: "predict"
            })
        );
        assert_eq!(RestTarget::parse(""), None);
        assert_eq!(RestTarget::parse("m/other"), None);
        assert_eq!(
            RestTarget::parse("a:b/metadata"),
            Some(Metadata {
                model: "a:b",
                version: Latest
            })
        );
    }

    /// Every path form the parser accepts is listed in `SERVED_PATHS` (and so must be in the
    /// OpenAPI document). A new form, such as a status by label, fails here until it is listed.
    #[test]
    fn every_accepted_path_form_is_listed() {
        let bases = [
            "m",
            "m/versions/1",
            "m/labels/l",
            "m/metadata",
            "m/versions/1/metadata",
        ];
        let tails = ["", "/metadata", "/labels/l", "/versions/1", "/other"];
        let verbs = [
            "",
            ":predict",
            ":classify",
            ":regress",
            ":explain",
            ":other",
        ];
        for base in bases {
            for tail in tails {
                for verb in verbs {
                    let path = format!("{base}{tail}{verb}");
                    let Some(target) = RestTarget::parse(&path) else {
                        continue;
                    };
                    match target.template() {
                        Some(template) => assert!(
                            SERVED_PATHS.contains(&template),
                            "{path} is answered as {template}, which SERVED_PATHS lacks"
                        ),
                        None => assert!(
                            matches!(target, RestTarget::Verb { verb, .. } if !VERBS.contains(&verb)),
                            "{path} parses but has no template"
                        ),
                    }
                }
            }
        }
    }

    #[test]
    fn every_listed_path_parses_back_to_itself() {
        for template in SERVED_PATHS {
            let path = template
                .trim_start_matches("/v1/models/")
                .replace("{name}", "m")
                .replace("{version}", "3")
                .replace("{label}", "stable");
            let target = RestTarget::parse(&path);
            assert_eq!(
                target.as_ref().and_then(RestTarget::template),
                Some(*template),
                "{path}"
            );
        }
    }
}
