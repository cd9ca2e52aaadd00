//! A numeric tensor's elements as `f64`, for comparing two answers and for score histograms.
//! Strings have no number; 64-bit integers beyond 2^53 round, which a difference or a bucket
//! can afford.
//!
//! The elements are read one at a time from the tensor's own buffer, never collected: an
//! answer of 24 MiB of `f32` would otherwise take 48 MiB more as `f64`, twice for a
//! comparison, outside anything the request memory budget counts.

use std::borrow::Cow;

use crate::tensor::{BoolByte, DataType, Element, Tensor};

/// Every element of `tensor` as `f64`, in row-major order; `None` for strings.
pub fn values(tensor: &Tensor) -> Option<Box<dyn Iterator<Item = f64> + '_>> {
    Some(match tensor.dtype() {
        DataType::F32 => cast::<f32>(tensor, f64::from)?,
        DataType::F64 => cast::<f64>(tensor, |v| v)?,
        DataType::F16 => cast::<half::f16>(tensor, f64::from)?,
        DataType::BF16 => cast::<half::bf16>(tensor, f64::from)?,
        DataType::I8 => cast::<i8>(tensor, f64::from)?,
        DataType::I16 => cast::<i16>(tensor, f64::from)?,
        DataType::I32 => cast::<i32>(tensor, f64::from)?,
        DataType::I64 => cast::<i64>(tensor, |v| v as f64)?,
        DataType::U8 => cast::<u8>(tensor, f64::from)?,
        DataType::U16 => cast::<u16>(tensor, f64::from)?,
        DataType::U32 => cast::<u32>(tensor, f64::from)?,
        DataType::U64 => cast::<u64>(tensor, |v| v as f64)?,
        DataType::Bool => cast::<BoolByte>(tensor, |b| f64::from(b.0))?,
        DataType::String => return None,
    })
}

fn cast<T: Element + 'static>(
    tensor: &Tensor,
    to_f64: fn(T) -> f64,
) -> Option<Box<dyn Iterator<Item = f64> + '_>> {
    let view = tensor.view::<T>().ok()?;
    Some(Box::new(Cast {
        view,
        next: 0,
        to_f64,
    }))
}

/// The elements of a typed view (borrowed from the tensor where it is aligned), converted
/// one by one.
struct Cast<'t, T: Clone + 'static> {
    view: Cow<'t, [T]>,
    next: usize,
    to_f64: fn(T) -> f64,
}

impl<T: Copy + 'static> Iterator for Cast<'_, T> {
    type Item = f64;

    fn next(&mut self) -> Option<f64> {
        let value = *self.view.get(self.next)?;
        self.next += 1;
        Some((self.to_f64)(value))
    }
}

/// The largest absolute difference between two answers' elements: `None` when they cannot
/// be compared (different shapes, or strings). A NaN on one side only counts as infinitely
/// far; NaN on both as equal.
pub fn max_abs_difference(a: &Tensor, b: &Tensor) -> Option<f64> {
    if a.shape() != b.shape() {
        return None;
    }
    let (a, b) = (values(a)?, values(b)?);
    let mut largest = 0.0f64;
    for (x, y) in a.zip(b) {
        let difference = match (x.is_nan(), y.is_nan()) {
            (true, true) => 0.0,
            (true, false) | (false, true) => f64::INFINITY,
            _ => (x - y).abs(),
        };
        largest = largest.max(difference);
    }
    Some(largest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_are_elementwise_and_shapes_must_agree() {
        let a = Tensor::from_vec(vec![2, 1], vec![0.5f32, 1.0]).unwrap();
        let b = Tensor::from_vec(vec![2, 1], vec![0.25f32, 1.0]).unwrap();
        assert_eq!(max_abs_difference(&a, &b), Some(0.25));
        assert_eq!(max_abs_difference(&a, &a), Some(0.0));
        let wide = Tensor::from_vec(vec![1, 2], vec![0.5f32, 1.0]).unwrap();
        assert_eq!(max_abs_difference(&a, &wide), None);
        let nan = Tensor::from_vec(vec![2, 1], vec![f32::NAN, 1.0]).unwrap();
        assert_eq!(max_abs_difference(&a, &nan), Some(f64::INFINITY));
        assert_eq!(max_abs_difference(&nan, &nan), Some(0.0));
    }

    #[test]
    fn integers_read_as_numbers_and_strings_do_not() {
        let ints = Tensor::from_vec(vec![3], vec![-1i64, 0, 7]).unwrap();
        assert_eq!(
            values(&ints).map(Iterator::collect::<Vec<_>>),
            Some(vec![-1.0, 0.0, 7.0])
        );
        let strings = Tensor::strings(vec![1], vec![bytes::Bytes::from_static(b"x")]).unwrap();
        assert!(values(&strings).is_none());
    }
}
