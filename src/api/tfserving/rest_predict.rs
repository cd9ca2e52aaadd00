//! TF Serving REST predict: `POST /v1/models/{name}[...]:predict`, in the row
//! (`instances`) and columnar (`inputs`) formats, answered as `predictions` or `outputs`.

use axum::response::Response;
use serde_json::value::RawValue;
use serde_json::Value;

use super::predict_body::{Instances, PredictBody};
use super::rest_path::{version_selector, VersionRef};
use crate::api::heavy::{json_text_estimate, run_heavy};
use crate::api::json_body::{self, RawObject};
use crate::api::json_decode::{decode_rows, decode_value};
use crate::api::json_tensor::{write_json_str, write_tensor};
use crate::backend::{NamedTensor, Signature};
use crate::batcher::RequestError;
use crate::error::Error;
use crate::infer::{Decoded, InferService, ModelTarget, PredictionResult};
use crate::request::RequestContext;
use crate::wire_error::{BodyError, PredictBodyError};

/// The two request layouts TF Serving accepts, as unparsed JSON text.
enum Layout<'b> {
    /// `"instances"`: one entry per batch row.
    Rows(Vec<&'b RawValue>),
    /// `"inputs"`: whole tensors.
    Columns(&'b RawValue),
}

pub(super) async fn predict(
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
    // The envelope pass reads the whole body; the tensors are read below, in `prepare`.
    let fields: PredictBody<'_> = run_heavy(body.len(), || {
        json_body::parse_borrowed(body, &mut rewritten)
    })
    .map_err(|err| {
        if err.is_data() {
            Error::from(BodyError::Malformed(err.to_string()))
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
        (Some(Instances::NotAList), None) => return Err(PredictBodyError::InstancesNotArray.into()),
        (Some(Instances::List(rows)), None) => {
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
            let inputs = run_heavy(body.len(), || match &layout {
                Layout::Rows(rows) => row_inputs(sig, rows, infer),
                Layout::Columns(columns) => column_inputs(sig, columns, infer),
            })?;
            // TF Serving's API has no priority, and no timeout but the transport's.
            Ok(Decoded {
                inputs,
                ..Decoded::default()
            })
        })
        .await?;
    let result = infer.run(prepared).await?;
    let elements = result.outputs.iter().map(|(_, t)| t.element_count()).sum();
    let body = run_heavy(json_text_estimate(elements), || {
        if row_format {
            predictions_body(&result)
        } else {
            outputs_body(&result)
        }
    })?;
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
