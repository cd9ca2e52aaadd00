//! Triton's classification extension: a requested output with the `classification`
//! parameter set to N comes back as the N highest-scoring classes of each batch row, as
//! BYTES elements `score:index` or, where the model's configuration names a labels file,
//! `score:index:label`. Scores are written as Triton writes them: floating-point values with
//! six decimals (`0.982100`), integers as they are.

use super::params::{param_u64, Params};
use crate::error::Error;
use crate::tensor::{DataType, Tensor};
use crate::wire_error::InferRequestError;

/// The `classification` parameter of a requested output: how many classes to return.
pub fn class_count(output: &str, params: &Params) -> Result<Option<usize>, Error> {
    let count = param_u64(params, "classification")
        .map_err(|_| InferRequestError::ClassificationCount(output.to_owned()))?;
    match count {
        None => Ok(None),
        Some(0) => Err(InferRequestError::ClassificationCount(output.to_owned()).into()),
        Some(count) => Ok(Some(usize::try_from(count).unwrap_or(usize::MAX))),
    }
}

/// `tensor` as its `count` best classes per row (each row: everything after the batch
/// dimension when `batched`, else the whole tensor). Ties keep the lower index first.
pub fn classify(
    output: &str,
    tensor: &Tensor,
    count: usize,
    labels: Option<&[String]>,
    batched: bool,
) -> Result<Tensor, Error> {
    let scores = Scores::of(tensor).ok_or_else(|| InferRequestError::ClassificationNotNumeric {
        output: output.to_owned(),
        datatype: tensor.dtype().kserve_name(),
    })?;
    let (rows, batch_shape) = match (batched, tensor.shape().first()) {
        (true, Some(&rows)) => (rows, vec![rows]),
        _ => (1, Vec::new()),
    };
    let per_row = scores.len().checked_div(rows).unwrap_or(0);
    let kept = count.min(per_row);
    let mut strings = Vec::with_capacity(rows.saturating_mul(kept));
    let mut order: Vec<usize> = Vec::with_capacity(per_row);
    for row in 0..rows {
        let start = row * per_row;
        order.clear();
        order.extend(0..per_row);
        // Highest first; a stable sort keeps equal scores in index order.
        order.sort_by(|&a, &b| scores.value(start + b).total_cmp(&scores.value(start + a)));
        for &index in order.iter().take(kept) {
            let mut text = format!("{}:{index}", scores.text(start + index));
            if let Some(label) = labels.and_then(|labels| labels.get(index)) {
                text.push(':');
                text.push_str(label);
            }
            strings.push(bytes::Bytes::from(text));
        }
    }
    let mut shape = batch_shape;
    shape.push(kept);
    Ok(Tensor::strings(shape, strings)?)
}

/// A numeric tensor's elements, read for ranking and for printing.
enum Scores {
    Float(Vec<f64>),
    Int(Vec<i128>),
}

impl Scores {
    fn of(tensor: &Tensor) -> Option<Self> {
        fn floats<T: crate::tensor::Element + Into<f64>>(tensor: &Tensor) -> Option<Scores> {
            let view = tensor.view::<T>().ok()?;
            Some(Scores::Float(view.iter().map(|&v| v.into()).collect()))
        }
        fn ints<T: crate::tensor::Element + Into<i128>>(tensor: &Tensor) -> Option<Scores> {
            let view = tensor.view::<T>().ok()?;
            Some(Scores::Int(view.iter().map(|&v| v.into()).collect()))
        }
        match tensor.dtype() {
            DataType::F32 => floats::<f32>(tensor),
            DataType::F64 => floats::<f64>(tensor),
            DataType::F16 => {
                let view = tensor.view::<half::f16>().ok()?;
                Some(Self::Float(view.iter().map(|v| v.to_f64()).collect()))
            }
            DataType::BF16 => {
                let view = tensor.view::<half::bf16>().ok()?;
                Some(Self::Float(view.iter().map(|v| v.to_f64()).collect()))
            }
            DataType::U8 => ints::<u8>(tensor),
            DataType::U16 => ints::<u16>(tensor),
            DataType::U32 => ints::<u32>(tensor),
            DataType::U64 => ints::<u64>(tensor),
            DataType::I8 => ints::<i8>(tensor),
            DataType::I16 => ints::<i16>(tensor),
            DataType::I32 => ints::<i32>(tensor),
            DataType::I64 => ints::<i64>(tensor),
            DataType::Bool | DataType::String => None,
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Float(values) => values.len(),
            Self::Int(values) => values.len(),
        }
    }

    /// The element at `index` for ordering (integers past 2^53 order approximately).
    fn value(&self, index: usize) -> f64 {
        match self {
            Self::Float(values) => values.get(index).copied().unwrap_or(f64::NAN),
            Self::Int(values) => values.get(index).map_or(f64::NAN, |&v| v as f64),
        }
    }

    fn text(&self, index: usize) -> String {
        match self {
            Self::Float(values) => format!("{:.6}", values.get(index).copied().unwrap_or(0.0)),
            Self::Int(values) => values.get(index).copied().unwrap_or(0).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(tensor: &Tensor) -> Vec<String> {
        tensor
            .string_elements()
            .map(|s| {
                (0..s.len())
                    .filter_map(|i| s.get(i))
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn each_row_gives_its_best_classes_with_labels() -> Result<(), Error> {
        let scores = Tensor::from_vec(vec![2, 3], vec![0.1f32, 0.7, 0.2, 0.5, 0.5, 0.9])?;
        let labels = ["cat".to_owned(), "dog".to_owned(), "fish".to_owned()];
        let classes = classify("probs", &scores, 2, Some(&labels), true)?;
        assert_eq!(classes.shape(), &[2, 2]);
        assert_eq!(
            texts(&classes),
            [
                "0.700000:1:dog",
                "0.200000:2:fish",
                "0.900000:2:fish",
                "0.500000:0:cat"
            ]
        );
        Ok(())
    }

    #[test]
    fn integers_print_as_integers_and_count_is_capped() -> Result<(), Error> {
        let scores = Tensor::from_vec(vec![3], vec![4i64, -2, 9])?;
        let classes = classify("y", &scores, 10, None, false)?;
        assert_eq!(classes.shape(), &[3]);
        assert_eq!(texts(&classes), ["9:2", "4:0", "-2:1"]);
        Ok(())
    }

    #[test]
    fn strings_cannot_be_classified() -> Result<(), Error> {
        let words = Tensor::strings(vec![1], vec![bytes::Bytes::from_static(b"a")])?;
        let err = classify("w", &words, 1, None, false)
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("'w'") && e.contains("BYTES")));
        Ok(())
    }
}
