//! TF Serving REST predict: `POST /v1/models/{name}[...]:predict`, in the row
//! (`instances`) and columnar (`inputs`) formats, answered as `predictions` or `outputs`.

use axum::response::Response;
use serde_json::value::RawValue;
use serde_json::Value;

use super::predict_body::{Instances, PredictBody};
use super::predict_lift::{self, Lifted, PredictLift};
use super::rest_path::{version_selector, VersionRef};
use crate::api::heavy::{json_text_estimate, run_heavy};
use crate::api::json_body::{self, RawObject};
use crate::api::json_decode::{decode_rows, decode_value, scan_rows_text, scan_value_text};
use crate::api::json_tensor::{write_json_str, write_tensor};
use crate::backend::{NamedTensor, Signature};
use crate::batcher::RequestError;
use crate::error::Error;
use crate::infer::{Decoded, InferService, ModelTarget, PredictionResult, Prepared};
use crate::request::RequestContext;
use crate::tensor::{DataType, DecodeError, DecodeLimits, Tensor};
use crate::wire_error::{BodyError, PredictBodyError};

/// The two request layouts TF Serving accepts, as unparsed JSON text.
enum Layout<'b> {
    /// `"instances"`: one entry per batch row.
    Rows(Vec<&'b RawValue>),
    /// `"inputs"`: whole tensors.
    Columns(&'b RawValue),
    /// `"instances"` lifted whole: bare rows of numbers in one list, which read as one tensor
    /// are the rows stacked.
    WholeRows(&'b str),
}

pub(super) async fn predict(
    infer: &InferService,
    context: Option<&RequestContext>,
    model: &str,
    version: VersionRef<'_>,
    body: &[u8],
) -> Result<Response, Error> {
    if !body.trim_ascii_start().starts_with(b"{") {
        // Not an object: say whether it is JSON at all.
        return Err(match json_body::parse(body) {
            Ok(_) => PredictBodyError::NotObject,
            Err(err) => PredictBodyError::NotJson(err.to_string()),
        }
        .into());
    }
    let request = Request {
        infer,
        context,
        model,
        version,
    };
    // Large tensor lists first take the lifted route; anything it does not take to the end
    // of decoding goes the general way, which accepts it or words the error.
    let lifted = run_heavy(body.len(), || predict_lift::lift(body));
    let mut prepared = None;
    if let Some(lifted) = &lifted {
        match request
            .prepare(lifted.lifted.envelope(), Some(lifted))
            .await
        {
            Ok(done) => prepared = Some(done),
            Err(Failure::Lifted) => {}
            Err(Failure::Request(err)) => return Err(err),
        }
    }
    let (prepared, row_format) = match prepared {
        Some(done) => done,
        None => request
            .prepare(body, None)
            .await
            .map_err(Failure::into_error)?,
    };
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

/// What a predict request names, apart from its body.
struct Request<'r> {
    infer: &'r InferService,
    context: Option<&'r RequestContext>,
    model: &'r str,
    version: VersionRef<'r>,
}

/// Why a body was not prepared.
enum Failure {
    /// On the lifted route, anything in the body: the general route reads it again.
    Lifted,
    /// What the client gets.
    Request(Error),
}

impl Failure {
    fn into_error(self) -> Error {
        match self {
            Failure::Request(err) => err,
            // Only the lifted route fails this way; the general one is never asked to.
            Failure::Lifted => {
                PredictBodyError::NotJson("the body could not be read".into()).into()
            }
        }
    }
}

impl Request<'_> {
    /// The request from `body` (the envelope, when `lifted` holds its large lists), validated
    /// against the signature, and whether it is in the row format.
    async fn prepare(
        &self,
        body: &[u8],
        lifted: Option<&PredictLift<'_>>,
    ) -> Result<(Prepared, bool), Failure> {
        let on_lifted = |err: Error| match lifted {
            Some(_) => Failure::Lifted,
            None => Failure::Request(err),
        };
        let mut rewritten = Vec::new();
        // The envelope pass reads the whole body; the tensors are read below, in `prepare`.
        let fields: PredictBody<'_> = run_heavy(body.len(), || {
            json_body::parse_borrowed(body, &mut rewritten)
        })
        .map_err(|err| {
            on_lifted(if err.is_data() {
                Error::from(BodyError::Malformed(err.to_string()))
            } else {
                PredictBodyError::NotJson(err.to_string()).into()
            })
        })?;
        let signature_name = match fields
            .signature_name
            .map(|raw| serde_json::from_str(raw.get()))
        {
            None => String::new(),
            Some(Ok(Value::String(name))) => name,
            Some(_) => return Err(on_lifted(PredictBodyError::SignatureNameNotString.into())),
        };
        let layout = match (fields.instances, fields.inputs) {
            (Some(_), Some(_)) => Err(PredictBodyError::BothLayouts),
            (Some(Instances::NotAList), None) => Err(PredictBodyError::InstancesNotArray),
            // The placeholder of a lifted `instances` reads as an empty list.
            (Some(Instances::List(rows)), None) if rows.is_empty() => {
                match lifted.and_then(|lifted| lifted.instances) {
                    Some(whole) => Ok(Layout::WholeRows(whole)),
                    None => Err(PredictBodyError::NoInstances),
                }
            }
            (Some(Instances::List(rows)), None) => Ok(Layout::Rows(rows)),
            (None, Some(columns)) => Ok(Layout::Columns(columns)),
            (None, None) => Err(PredictBodyError::NoLayout),
        }
        .map_err(|err| on_lifted(err.into()))?;

        let target = ModelTarget {
            model: self.model,
            version: version_selector(self.version).map_err(Failure::Request)?,
            signature: &signature_name,
        };
        let row_format = matches!(layout, Layout::Rows(_) | Layout::WholeRows(_));
        let texts = Texts {
            lifted: lifted.map(|lifted| &lifted.lifted),
        };
        // Set when decoding fails on the lifted route, to tell that apart from the
        // repository's own answers (unknown model, a load that timed out), which stand.
        let mut decoding_failed = false;
        let prepared = self
            .infer
            .prepare(target, self.context, |sig| {
                let inputs = run_heavy(body.len(), || match &layout {
                    Layout::Rows(rows) => row_inputs(sig, rows, self.infer, &texts),
                    Layout::WholeRows(whole) => whole_row_inputs(sig, whole, self.infer),
                    Layout::Columns(columns) => column_inputs(sig, columns, self.infer, &texts),
                })
                .inspect_err(|_| decoding_failed = true)?;
                // TF Serving's API has no priority, and no timeout but the transport's.
                Ok(Decoded {
                    inputs,
                    ..Decoded::default()
                })
            })
            .await
            .map_err(|err| match decoding_failed {
                true => on_lifted(err),
                false => Failure::Request(err),
            })?;
        Ok((prepared, row_format))
    }
}

/// The text of a tensor value: as the envelope parser checked it, or the large list it
/// stands for on the lifted route, which only the number scanner reads.
struct Texts<'l, 'b> {
    lifted: Option<&'l Lifted<'b>>,
}

/// What a lifted list the scanner did not take fails with. No client sees it: any failure
/// on the lifted route sends the body the general way, which words its own error.
fn not_scanned() -> DecodeError {
    DecodeError::Malformed("a lifted list the number scanner did not read".into())
}

impl Texts<'_, '_> {
    fn lifted(&self, value: &RawValue) -> Option<&str> {
        self.lifted.and_then(|lifted| lifted.list(value))
    }

    /// [`decode_value`], reading a lifted list with the scanner alone.
    fn decode_value(
        &self,
        value: &RawValue,
        dtype: DataType,
        limits: &DecodeLimits,
    ) -> Result<Tensor, DecodeError> {
        match self.lifted(value) {
            Some(text) => scan_value_text(text, dtype, limits).ok_or_else(not_scanned),
            None => decode_value(value, dtype, limits),
        }
    }

    /// [`decode_rows`], reading lifted rows with the scanner alone.
    fn decode_rows(
        &self,
        rows: &[&RawValue],
        dtype: DataType,
        limits: &DecodeLimits,
    ) -> Result<Tensor, DecodeError> {
        if !rows.iter().any(|row| self.lifted(row).is_some()) {
            return decode_rows(rows, dtype, limits);
        }
        let texts: Vec<&str> = rows
            .iter()
            .map(|row| self.lifted(row).unwrap_or(row.get()))
            .collect();
        scan_rows_text(&texts, dtype, limits).ok_or_else(not_scanned)
    }
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
    texts: &Texts<'_, '_>,
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
        let tensor = texts
            .decode_rows(rows, spec.dtype, limits)
            .map_err(|e| e.in_input(&spec.name))?;
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
        let tensor = texts
            .decode_rows(&values, spec.dtype, limits)
            .map_err(|e| e.in_input(&spec.name))?;
        inputs.push((spec.name.clone(), tensor));
    }
    Ok(inputs)
}

/// The one input of a signature from `instances` lifted whole: read by the scanner alone (its
/// shape is the rows stacked), and on the lifted route only, so any failure is handed back to
/// the general route.
fn whole_row_inputs(
    sig: &Signature,
    whole: &str,
    infer: &InferService,
) -> Result<Vec<NamedTensor>, Error> {
    let [spec] = sig.inputs.as_slice() else {
        return Err(PredictBodyError::InstancesNotNamed {
            count: sig.inputs.len(),
            names: sig.input_names(),
        }
        .into());
    };
    let tensor = scan_value_text(whole, spec.dtype, infer.limits())
        .ok_or_else(not_scanned)
        .map_err(|e| e.in_input(&spec.name))?;
    Ok(vec![(spec.name.clone(), tensor)])
}

fn column_inputs(
    sig: &Signature,
    columns: &RawValue,
    infer: &InferService,
    texts: &Texts<'_, '_>,
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
        let tensor = texts
            .decode_value(columns, spec.dtype, limits)
            .map_err(|e| e.in_input(&spec.name))?;
        return Ok(vec![(spec.name.clone(), tensor)]);
    };
    map.iter()
        .map(|(name, value)| {
            let spec = sig.input(name).ok_or_else(|| RequestError::UnknownInput {
                name: name.clone(),
                expected: sig.input_names(),
            })?;
            let tensor = texts
                .decode_value(value, spec.dtype, limits)
                .map_err(|e| e.in_input(name))?;
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
