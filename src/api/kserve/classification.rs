//! Triton's classification extension: a requested output with the `classification`
//! parameter set to N comes back as the N highest-scoring classes of each batch row, as
//! BYTES elements `score:index` or, where the model's configuration names a labels file,
//! `score:index:label`. Scores are written as Triton writes them: floating-point values with
//! six decimals (`0.982100`), integers as they are.

use std::borrow::Cow;
use std::io::Write;

use bytes::Bytes;

use super::params::{param_u64, Params};
use crate::error::Error;
use crate::tensor::{DataType, Element, Strings, Tensor};
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

/// Bytes the text of one class takes at most, besides its label: the score (`{:.6}` of the
/// largest `f64` is 317 characters; integers take at most 40), `:` and the index.
const SCORE_AND_INDEX_TEXT: usize = 317 + 1 + 20;

/// The classes' text is allocated in blocks of at least this, each charged before it is taken.
const TEXT_BLOCK: usize = 4096;

/// `tensor` as its `count` best classes per row (each row: everything after the batch
/// dimension when `batched`, else the whole tensor). Ties keep the lower index first. Never
/// more classes than a row has, whatever `count` asks.
///
/// What the classes take is passed to `charge` before it is allocated (the request memory
/// budget, whose refusal ends the classification): the ranking's index per class of a row,
/// an offset per class kept, and the text, which is written into one buffer (not an
/// allocation per class) charged block by block as it grows.
pub fn classify(
    output: &str,
    tensor: &Tensor,
    count: usize,
    labels: Option<&[String]>,
    batched: bool,
    charge: &mut dyn FnMut(u64) -> Result<(), Error>,
) -> Result<Tensor, Error> {
    let not_numeric = || InferRequestError::ClassificationNotNumeric {
        output: output.to_owned(),
        datatype: tensor.dtype().kserve_name(),
    };
    let scores = scores(tensor).ok_or_else(not_numeric)?;
    let (rows, batch_shape) = match (batched, tensor.shape().first()) {
        (true, Some(&rows)) => (rows, vec![rows]),
        _ => (1, Vec::new()),
    };
    let per_row = scores.len().checked_div(rows).unwrap_or(0);
    let kept = count.min(per_row);
    let classes = rows.saturating_mul(kept);
    let words = |n: usize| (n as u64).saturating_mul(8);
    let scratch = words(per_row)
        .saturating_add(words(classes.saturating_add(1)))
        .saturating_add(tensor.misaligned_bytes() as u64);
    charge(scratch)?;
    let longest_label = labels.map_or(0, |labels| {
        labels.iter().map(String::len).max().unwrap_or(0)
    });
    let room = SCORE_AND_INDEX_TEXT + 1 + longest_label;
    let mut order: Vec<usize> = Vec::with_capacity(per_row);
    let mut starts = Vec::with_capacity(classes + 1);
    let mut text: Vec<u8> = Vec::new();
    for row in 0..rows {
        let start = row * per_row;
        order.clear();
        order.extend(0..per_row);
        // Highest first; a stable sort keeps equal scores in index order.
        order.sort_by(|&a, &b| scores.value(start + b).total_cmp(&scores.value(start + a)));
        for &index in order.iter().take(kept) {
            if text.capacity() - text.len() < room {
                let grow = text.capacity().max(room).max(TEXT_BLOCK);
                charge(grow as u64)?;
                text.reserve_exact(grow);
            }
            starts.push(text.len());
            scores.write_text(start + index, &mut text);
            // Writing into a vector cannot fail; its room was reserved above.
            let _ = write!(text, ":{index}");
            if let Some(label) = labels.and_then(|labels| labels.get(index)) {
                text.push(b':');
                text.extend_from_slice(label.as_bytes());
            }
        }
    }
    let strings = Strings::contiguous(Bytes::from(text), starts)?;
    let mut shape = batch_shape;
    shape.push(kept);
    Ok(Tensor::from_strings(shape, strings)?)
}

/// A numeric tensor's elements, read in place for ranking and for printing.
trait Scores {
    fn len(&self) -> usize;
    /// The element at `index` for ordering (integers past 2^53 order approximately).
    fn value(&self, index: usize) -> f64;
    /// The element at `index` as Triton prints it.
    fn write_text(&self, index: usize, out: &mut Vec<u8>);
}

/// Floating-point scores, printed with six decimals.
struct Floats<'t, T: Clone + 'static>(Cow<'t, [T]>);

impl<T: Element + Into<f64>> Scores for Floats<'_, T> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn value(&self, index: usize) -> f64 {
        self.0.get(index).map_or(f64::NAN, |&v| v.into())
    }

    fn write_text(&self, index: usize, out: &mut Vec<u8>) {
        let value: f64 = self.0.get(index).map_or(0.0, |&v| v.into());
        let _ = write!(out, "{value:.6}");
    }
}

/// Integer scores, printed as they are.
struct Ints<'t, T: Clone + 'static>(Cow<'t, [T]>);

impl<T: Element + Into<i128> + std::fmt::Display> Scores for Ints<'_, T> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn value(&self, index: usize) -> f64 {
        self.0.get(index).map_or(f64::NAN, |&v| v.into() as f64)
    }

    fn write_text(&self, index: usize, out: &mut Vec<u8>) {
        if let Some(value) = self.0.get(index) {
            let _ = write!(out, "{value}");
        }
    }
}

/// The scores of `tensor`, over its own buffer where it is aligned; `None` unless numeric.
fn scores(tensor: &Tensor) -> Option<Box<dyn Scores + '_>> {
    fn floats<T: Element + Into<f64>>(tensor: &Tensor) -> Option<Box<dyn Scores + '_>> {
        Some(Box::new(Floats(tensor.view::<T>().ok()?)))
    }
    fn ints<T: Element + Into<i128> + std::fmt::Display>(
        tensor: &Tensor,
    ) -> Option<Box<dyn Scores + '_>> {
        Some(Box::new(Ints(tensor.view::<T>().ok()?)))
    }
    match tensor.dtype() {
        DataType::F32 => floats::<f32>(tensor),
        DataType::F64 => floats::<f64>(tensor),
        DataType::F16 => floats::<half::f16>(tensor),
        DataType::BF16 => floats::<half::bf16>(tensor),
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

    /// A budget with room for everything.
    fn free(_: u64) -> Result<(), Error> {
        Ok(())
    }

    #[test]
    fn each_row_gives_its_best_classes_with_labels() -> Result<(), Error> {
        let scores = Tensor::from_vec(vec![2, 3], vec![0.1f32, 0.7, 0.2, 0.5, 0.5, 0.9])?;
        let labels = ["cat".to_owned(), "dog".to_owned(), "fish".to_owned()];
        let classes = classify("probs", &scores, 2, Some(&labels), true, &mut free)?;
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
        let classes = classify("y", &scores, 10, None, false, &mut free)?;
        assert_eq!(classes.shape(), &[3]);
        assert_eq!(texts(&classes), ["9:2", "4:0", "-2:1"]);
        Ok(())
    }

    #[test]
    fn strings_cannot_be_classified() -> Result<(), Error> {
        let words = Tensor::strings(vec![1], vec![bytes::Bytes::from_static(b"a")])?;
        let err = classify("w", &words, 1, None, false, &mut free)
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("'w'") && e.contains("BYTES")));
        Ok(())
    }

    #[test]
    fn everything_the_classes_hold_is_charged_first_and_bounded_by_the_output() -> Result<(), Error>
    {
        let count = 100_000;
        let scores: Vec<f32> = (0..count).map(|i| i as f32 / count as f32).collect();
        let scores = Tensor::from_vec(vec![1, count], scores)?;
        let mut charged = 0u64;
        let mut charge = |bytes: u64| {
            charged += bytes;
            Ok(())
        };
        // A count far past the output's size asks for every class, and no more.
        let classes = classify("y", &scores, usize::MAX, None, true, &mut charge)?;
        assert_eq!(classes.shape(), &[1, count]);
        let strings = classes.string_elements().unwrap_or_default();
        assert_eq!(strings.first(), Some(&b"0.999990:99999"[..]));
        // One buffer of text and an offset per class, not a block and a handle per class.
        assert!(strings.clone().into_handles().is_err());
        let text = strings.payload_len() as u64;
        let offsets = 8 * (count as u64 + 1);
        let ranking = 8 * count as u64;
        assert!(charged >= text + offsets + ranking, "{charged}");
        // The text grows by doubling: never charged more than twice what it holds.
        assert!(charged <= 2 * text + offsets + ranking + 4096, "{charged}");
        Ok(())
    }

    #[test]
    fn a_refused_charge_ends_the_classification_before_its_text() -> Result<(), Error> {
        let scores = Tensor::from_vec(vec![1, 1000], vec![0.5f32; 1000])?;
        let mut calls = 0;
        let mut charge = |bytes: u64| {
            calls += 1;
            match calls {
                // The ranking's scratch and the offsets fit; the first block of text does not.
                1 => Ok(()),
                _ => Err(Error::Internal(format!("no room for {bytes}"))),
            }
        };
        let refused = classify("y", &scores, 1000, None, true, &mut charge);
        assert!(matches!(refused, Err(Error::Internal(message)) if message.contains("4096")));
        assert_eq!(calls, 2);
        Ok(())
    }
}
