//! A TF Serving REST predict body's inputs, decoded against the signature: the row format
//! (`instances`, bare rows or objects of named tensors), the columnar format (`inputs`), and
//! `instances` lifted whole. Lifted lists are read by the number scanner alone.

use serde_json::value::RawValue;

use super::lift::Lifted;
use crate::api::json::body::RawObject;
use crate::api::json::decode::{decode_rows, decode_value, scan_rows_text, scan_value_text};
use crate::backend::{NamedTensor, Signature};
use crate::batcher::RequestError;
use crate::error::Error;
use crate::infer::InferService;
use crate::tensor::{DataType, DecodeError, DecodeLimits, Tensor};
use crate::wire_error::PredictBodyError;

/// The request layouts TF Serving accepts (the row format in two forms), as unparsed JSON text.
pub(super) enum Layout<'b> {
    /// `"instances"`: one entry per batch row.
    Rows(Vec<&'b RawValue>),
    /// `"inputs"`: whole tensors.
    Columns(&'b RawValue),
    /// `"instances"` lifted whole: bare rows of numbers in one list, which read as one tensor
    /// are the rows stacked.
    WholeRows(&'b str),
}

/// The text of a tensor value: as the envelope parser checked it, or the large list it
/// stands for on the lifted route, which only the number scanner reads.
pub(super) struct Texts<'l, 'b> {
    pub(super) lifted: Option<&'l Lifted<'b>>,
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

pub(super) fn row_inputs(
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
pub(super) fn whole_row_inputs(
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

pub(super) fn column_inputs(
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
