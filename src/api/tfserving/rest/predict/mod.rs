//! TF Serving REST predict: `POST /v1/models/{name}[...]:predict`, in the row
//! (`instances`) and columnar (`inputs`) formats, answered as `predictions` or `outputs`.
//!
//! The body's envelope is read by `body`, its large tensor lists first lifted out by `lift`,
//! and its tensors decoded against the signature by `inputs`.

mod body;
mod inputs;
mod lift;

use axum::response::Response;
use serde_json::Value;

use self::body::{Instances, PredictBody};
use self::inputs::{column_inputs, row_inputs, whole_row_inputs, Layout, Texts};
use self::lift::PredictLift;
use super::path::{version_selector, VersionRef};
use crate::api::http::heavy::{json_text_estimate, run_heavy};
use crate::api::json::body as json_body;
use crate::api::json::encode::{write_json_str, write_tensor};
use crate::error::Error;
use crate::infer::{Decoded, InferService, ModelTarget, PredictionResult, Prepared};
use crate::request::RequestContext;
use crate::wire_error::{BodyError, PredictBodyError};

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
    let lifted = run_heavy(body.len(), || lift::lift(body));
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
    Ok(crate::api::http::response::raw_json_response(body))
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
