//! Merging the inputs of several requests along dimension 0, and splitting the outputs back.
//!
//! Gathering a dense input costs one copy into one buffer per input: the runtime wants one
//! contiguous tensor, and the requests' bytes live in separate request buffers. That is the only
//! copy on the way; string elements held as handles only move, and packed ones (a wire buffer
//! with offsets) are copied into one buffer like dense bytes. Scattering is free: each
//! request's outputs are slices of the runtime's buffer (for strings, a share of its offsets).

use bytes::Bytes;

use super::BatchError;
use crate::backend::NamedTensor;
use crate::tensor::{element_count, DataType, DecodeError, Strings, Tensor, TensorData};

/// Everything two requests must share to run in one batch: the signature, the outputs asked
/// for, and each input's name, dtype and shape past dimension 0.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BatchKey {
    signature: usize,
    inputs: Vec<(String, DataType, Vec<usize>)>,
    outputs: Vec<String>,
}

/// The request's key and its row count, or `None` when it cannot be merged: it has no inputs,
/// a scalar input, or inputs that disagree on dimension 0.
pub fn batch_key(
    signature: usize,
    inputs: &[NamedTensor],
    outputs: &[String],
) -> Option<(BatchKey, usize)> {
    let mut rows = None;
    let mut layouts = Vec::with_capacity(inputs.len());
    for (name, tensor) in inputs {
        let (&dim0, rest) = tensor.shape().split_first()?;
        if *rows.get_or_insert(dim0) != dim0 {
            return None;
        }
        layouts.push((name.clone(), tensor.dtype(), rest.to_vec()));
    }
    // Name order, so that requests listing the same inputs differently still merge.
    layouts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let key = BatchKey {
        signature,
        inputs: layouts,
        outputs: outputs.to_vec(),
    };
    Some((key, rows?))
}

/// Concatenates each input of `requests` along dimension 0. The requests must share a
/// [`BatchKey`]; anything else is refused rather than merged wrongly.
pub fn gather(mut requests: Vec<Vec<NamedTensor>>) -> Result<Vec<NamedTensor>, BatchError> {
    for inputs in &mut requests {
        inputs.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
    }
    let mut requests = requests.into_iter();
    let Some(first) = requests.next() else {
        return Ok(Vec::new());
    };
    let width = first.len();
    let mut columns: Vec<(String, Vec<Tensor>)> = first
        .into_iter()
        .map(|(name, tensor)| {
            let mut parts = Vec::with_capacity(requests.len() + 1);
            parts.push(tensor);
            (name, parts)
        })
        .collect();
    for request in requests {
        if request.len() != width {
            let input = columns.first().map(|(name, _)| name.clone());
            return Err(BatchError::Incompatible {
                input: input.unwrap_or_default(),
            });
        }
        for ((column, parts), (name, tensor)) in columns.iter_mut().zip(request) {
            if *column != name {
                return Err(BatchError::Incompatible { input: name });
            }
            parts.push(tensor);
        }
    }
    columns
        .into_iter()
        .map(|(name, parts)| {
            let merged = concat(&name, parts)?;
            Ok((name, merged))
        })
        .collect()
}

fn concat(name: &str, parts: Vec<Tensor>) -> Result<Tensor, BatchError> {
    let incompatible = || BatchError::Incompatible {
        input: name.to_owned(),
    };
    let first = parts.first().ok_or_else(incompatible)?;
    let dtype = first.dtype();
    let row_shape = first.shape().get(1..).ok_or_else(incompatible)?.to_vec();
    let mut rows = 0usize;
    let mut elements = 0usize;
    for part in &parts {
        let (&dim0, rest) = part.shape().split_first().ok_or_else(incompatible)?;
        if part.dtype() != dtype || rest != row_shape.as_slice() {
            return Err(incompatible());
        }
        rows = rows.checked_add(dim0).ok_or_else(incompatible)?;
        elements = elements
            .checked_add(part.element_count())
            .ok_or_else(incompatible)?;
    }
    let mut shape = Vec::with_capacity(row_shape.len() + 1);
    shape.push(rows);
    shape.extend_from_slice(&row_shape);
    let merged = match dtype.size() {
        Some(size) => {
            let len = elements.checked_mul(size).ok_or_else(incompatible)?;
            // The one copy of the batch path: every request's rows into one buffer.
            let mut buffer = Vec::with_capacity(len);
            for part in &parts {
                buffer.extend_from_slice(part.bytes().ok_or_else(incompatible)?);
            }
            Tensor::dense(dtype, shape, Bytes::from(buffer))?
        }
        None => {
            let mut strings = Vec::with_capacity(parts.len());
            for part in parts {
                match part.into_parts().2 {
                    TensorData::Strings(values) => strings.push(values),
                    TensorData::Dense(_) => return Err(incompatible()),
                }
            }
            Tensor::from_strings(shape, Strings::concat(strings))?
        }
    };
    Ok(merged)
}

/// Splits each output of a merged run into one piece per request, `rows[i]` rows for request
/// `i`. Every output must have exactly `sum(rows)` rows in dimension 0; a model whose outputs
/// do not is not batchable, and the whole batch fails.
pub fn scatter(
    outputs: Vec<NamedTensor>,
    rows: &[usize],
) -> Result<Vec<Vec<NamedTensor>>, BatchError> {
    let total = rows
        .iter()
        .try_fold(0usize, |sum, &count| sum.checked_add(count))
        .ok_or_else(|| DecodeError::ShapeOverflow {
            shape: rows.to_vec(),
        })?;
    let mut per_request: Vec<Vec<NamedTensor>> = rows
        .iter()
        .map(|_| Vec::with_capacity(outputs.len()))
        .collect();
    for (name, tensor) in outputs {
        let pieces = split(&name, tensor, rows, total)?;
        for (request, piece) in per_request.iter_mut().zip(pieces) {
            request.push((name.clone(), piece));
        }
    }
    Ok(per_request)
}

fn split(
    name: &str,
    tensor: Tensor,
    rows: &[usize],
    total: usize,
) -> Result<Vec<Tensor>, BatchError> {
    let not_batched = |shape: &[usize]| BatchError::OutputNotBatched {
        output: name.to_owned(),
        shape: shape.to_vec(),
        rows: total,
    };
    let (dtype, shape, data) = tensor.into_parts();
    let Some((&dim0, row_shape)) = shape.split_first() else {
        return Err(not_batched(&shape));
    };
    if dim0 != total {
        return Err(not_batched(&shape));
    }
    let row_elements = element_count(row_shape)?;
    let piece_shape = |count: usize| {
        let mut piece = Vec::with_capacity(shape.len());
        piece.push(count);
        piece.extend_from_slice(row_shape);
        piece
    };
    let mut pieces = Vec::with_capacity(rows.len());
    match data {
        TensorData::Dense(bytes) => {
            let row_bytes = dtype
                .size()
                .and_then(|size| row_elements.checked_mul(size))
                .ok_or_else(|| not_batched(&shape))?;
            // `Bytes::slice` panics out of range; the tensor's invariant says this holds, but
            // checking it here keeps a broken backend from taking the batcher down.
            if total.checked_mul(row_bytes) != Some(bytes.len()) {
                return Err(not_batched(&shape));
            }
            let mut offset = 0;
            for &count in rows {
                let end = offset + count * row_bytes;
                let piece = bytes.slice(offset..end);
                pieces.push(Tensor::dense(dtype, piece_shape(count), piece)?);
                offset = end;
            }
        }
        TensorData::Strings(strings) => {
            let mut start = 0usize;
            for &count in rows {
                let end = start.saturating_add(count.saturating_mul(row_elements));
                let piece = strings.slice(start, end);
                pieces.push(Tensor::from_strings(piece_shape(count), piece)?);
                start = end;
            }
        }
    }
    Ok(pieces)
}

#[cfg(test)]
#[path = "gather_tests.rs"]
mod tests;
