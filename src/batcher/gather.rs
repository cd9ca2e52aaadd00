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
mod tests {
    use super::*;

    fn floats(name: &str, shape: Vec<usize>, values: &[f32]) -> NamedTensor {
        (
            name.to_owned(),
            Tensor::from_vec(shape, values.to_vec()).unwrap(),
        )
    }

    fn strings(name: &str, shape: Vec<usize>, values: &[&str]) -> NamedTensor {
        let values = values.iter().map(|v| Bytes::from(v.to_string())).collect();
        (name.to_owned(), Tensor::strings(shape, values).unwrap())
    }

    fn values(tensor: &Tensor) -> Vec<f32> {
        tensor.view::<f32>().unwrap().into_owned()
    }

    #[test]
    fn keys_ignore_dim_zero_only() {
        let outputs = vec!["y".to_owned()];
        let key = |inputs: &[NamedTensor]| batch_key(0, inputs, &outputs);
        let (one, rows) = key(&[floats("x", vec![1, 2], &[0.0; 2])]).unwrap();
        let (three, rows3) = key(&[floats("x", vec![3, 2], &[0.0; 6])]).unwrap();
        assert_eq!((one.clone(), rows, rows3), (three, 1, 3));
        let (wider, _) = key(&[floats("x", vec![1, 3], &[0.0; 3])]).unwrap();
        assert_ne!(one, wider);
        let (other_sig, _) = batch_key(1, &[floats("x", vec![1, 2], &[0.0; 2])], &outputs).unwrap();
        assert_ne!(one, other_sig);
        let (other_outputs, _) = batch_key(0, &[floats("x", vec![1, 2], &[0.0; 2])], &[]).unwrap();
        assert_ne!(one, other_outputs);
        let ints = (
            "x".to_owned(),
            Tensor::from_vec(vec![1, 2], vec![0i32; 2]).unwrap(),
        );
        assert_ne!(one, key(&[ints]).unwrap().0);
    }

    #[test]
    fn unbatchable_requests_have_no_key() {
        let outputs = [];
        // Inputs disagreeing on dimension 0, a scalar, no inputs at all.
        let mixed = [
            floats("a", vec![2, 1], &[0.0; 2]),
            floats("b", vec![3, 1], &[0.0; 3]),
        ];
        assert!(batch_key(0, &mixed, &outputs).is_none());
        assert!(batch_key(0, &[floats("a", vec![], &[0.0])], &outputs).is_none());
        assert!(batch_key(0, &[], &outputs).is_none());
    }

    #[test]
    fn input_order_does_not_matter() {
        let ab = vec![floats("a", vec![1], &[1.0]), floats("b", vec![1], &[2.0])];
        let ba = vec![floats("b", vec![1], &[3.0]), floats("a", vec![1], &[4.0])];
        assert_eq!(batch_key(0, &ab, &[]), batch_key(0, &ba, &[]));
        let merged = gather(vec![ab, ba]).unwrap();
        assert_eq!(merged[0].0, "a");
        assert_eq!(values(&merged[0].1), vec![1.0, 4.0]);
        assert_eq!(values(&merged[1].1), vec![2.0, 3.0]);
    }

    #[test]
    fn dense_inputs_concatenate_and_outputs_split_without_copying() {
        let merged = gather(vec![
            vec![floats("x", vec![1, 2], &[1.0, 2.0])],
            vec![floats("x", vec![2, 2], &[3.0, 4.0, 5.0, 6.0])],
        ])
        .unwrap();
        assert_eq!(merged.len(), 1);
        let (name, tensor) = &merged[0];
        assert_eq!((name.as_str(), tensor.shape()), ("x", &[3, 2][..]));
        assert_eq!(values(tensor), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);

        let output = floats("y", vec![3, 2], &[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
        let base = output.1.bytes().unwrap().as_ptr() as usize;
        let split = scatter(vec![output], &[1, 2]).unwrap();
        assert_eq!(split.len(), 2);
        assert_eq!(split[0][0].1.shape(), &[1, 2]);
        assert_eq!(values(&split[0][0].1), vec![10.0, 20.0]);
        assert_eq!(split[1][0].1.shape(), &[2, 2]);
        assert_eq!(values(&split[1][0].1), vec![30.0, 40.0, 50.0, 60.0]);
        // The pieces are windows of the runtime's buffer.
        assert_eq!(split[0][0].1.bytes().unwrap().as_ptr() as usize, base);
        assert_eq!(split[1][0].1.bytes().unwrap().as_ptr() as usize, base + 8);
    }

    #[test]
    fn string_inputs_concatenate_and_outputs_split() {
        let merged = gather(vec![
            vec![strings("s", vec![1, 2], &["a", "b"])],
            vec![strings("s", vec![1, 2], &["c", "d"])],
        ])
        .unwrap();
        assert_eq!(merged[0].1.shape(), &[2, 2]);
        let split = scatter(merged, &[1, 1]).unwrap();
        let second = split[1][0].1.string_elements().unwrap();
        assert_eq!(second, &[Bytes::from("c"), Bytes::from("d")]);
        assert_eq!(split[1][0].1.shape(), &[1, 2]);
    }

    #[test]
    fn every_output_is_split_and_zero_row_requests_get_empty_pieces() {
        let outputs = vec![
            floats("y", vec![2, 1], &[1.0, 2.0]),
            floats("sum", vec![2], &[3.0, 4.0]),
        ];
        let split = scatter(outputs, &[0, 2]).unwrap();
        assert_eq!(split[0][0].1.shape(), &[0, 1]);
        assert_eq!(split[0][1].1.shape(), &[0]);
        assert_eq!(split[1][0].0, "y");
        assert_eq!(split[1][1].0, "sum");
        assert_eq!(values(&split[1][1].1), vec![3.0, 4.0]);
    }

    #[test]
    fn outputs_without_a_batch_dimension_fail_the_batch() {
        let scalar = floats("loss", vec![], &[1.0]);
        assert!(matches!(
            scatter(vec![scalar], &[1, 1]),
            Err(BatchError::OutputNotBatched { rows: 2, .. })
        ));
        let fixed = floats("table", vec![3, 1], &[1.0, 2.0, 3.0]);
        let err = scatter(vec![fixed], &[1, 1]).unwrap_err();
        assert!(err.to_string().contains("dimension 0"), "{err}");
    }

    #[test]
    fn mismatched_requests_are_refused_not_merged() {
        let wrong_name = gather(vec![
            vec![floats("x", vec![1], &[1.0])],
            vec![floats("z", vec![1], &[1.0])],
        ]);
        assert!(matches!(wrong_name, Err(BatchError::Incompatible { .. })));
        let wrong_shape = gather(vec![
            vec![floats("x", vec![1, 1], &[1.0])],
            vec![floats("x", vec![1, 2], &[1.0, 2.0])],
        ]);
        assert!(matches!(wrong_shape, Err(BatchError::Incompatible { .. })));
        let wrong_width = gather(vec![
            vec![floats("x", vec![1], &[1.0])],
            vec![floats("x", vec![1], &[1.0]), floats("y", vec![1], &[1.0])],
        ]);
        assert!(matches!(wrong_width, Err(BatchError::Incompatible { .. })));
    }
}
