//! The one domain tensor type every protocol decodes into and every backend runs on.
//!
//! Dense tensors keep their elements as packed little-endian bytes in a [`bytes::Bytes`]: a
//! slice of the received request buffer, a buffer the runtime produced, or a vector built by a
//! decoder. Typed access goes through [`Tensor::view`], a cast where alignment allows. String
//! tensors keep [`Strings`]: a handle per element, or the elements in one buffer with an
//! offset each.

mod dtype;
mod element;
mod error;
mod scan_helpers;
pub mod strings;
pub mod tensor_proto;

pub use dtype::DataType;
pub use element::{BoolByte, Element};
pub use error::DecodeError;
pub use scan_helpers::{Lease, ScanHelpers};
pub use strings::{PrefixedLayout, Strings};

use std::borrow::Cow;

use bytes::Bytes;

/// Limits applied while decoding client data, so that nothing a client sends makes the server
/// allocate more than the request (or the configured ceiling) justifies.
#[derive(Debug, Clone)]
pub struct DecodeLimits {
    /// Largest tensor, in bytes, that a decoder will materialise (e.g. by broadcasting a scalar).
    pub max_tensor_bytes: usize,
    /// Threads that may help read a long JSON tensor (a megabyte of numbers takes
    /// milliseconds on one core), shared by all requests.
    pub scan_helpers: ScanHelpers,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self {
            max_tensor_bytes: 64 << 20,
            scan_helpers: ScanHelpers::none(),
        }
    }
}

/// Where a tensor's elements live.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    /// Packed little-endian elements of a fixed-size type.
    Dense(Bytes),
    /// One byte string per element, in row-major order.
    Strings(Strings),
}

/// A typed, shaped tensor. The constructors check that the data matches the shape, so code that
/// holds a `Tensor` can trust `shape`, `dtype` and the data to agree.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    dtype: DataType,
    shape: Vec<usize>,
    data: TensorData,
}

impl Tensor {
    /// A dense tensor over `bytes`, which must hold exactly the shape's elements.
    pub fn dense(dtype: DataType, shape: Vec<usize>, bytes: Bytes) -> Result<Self, DecodeError> {
        let Some(size) = dtype.size() else {
            return Err(DecodeError::StringNeedsElements);
        };
        let count = element_count(&shape)?;
        let expected = count.checked_mul(size).ok_or(DecodeError::ShapeOverflow {
            shape: shape.clone(),
        })?;
        if bytes.len() != expected {
            return Err(DecodeError::ByteLengthMismatch {
                dtype,
                shape,
                expected,
                actual: bytes.len(),
            });
        }
        Ok(Self {
            dtype,
            shape,
            data: TensorData::Dense(bytes),
        })
    }

    /// A string tensor with one element per entry of `strings`.
    pub fn strings(shape: Vec<usize>, strings: Vec<Bytes>) -> Result<Self, DecodeError> {
        Self::from_strings(shape, Strings::from_handles(strings))
    }

    /// A string tensor over `strings`, however they are held.
    pub fn from_strings(shape: Vec<usize>, strings: Strings) -> Result<Self, DecodeError> {
        let count = element_count(&shape)?;
        if strings.len() != count {
            return Err(DecodeError::ElementCountMismatch {
                shape,
                expected: count,
                actual: strings.len(),
            });
        }
        Ok(Self {
            dtype: DataType::String,
            shape,
            data: TensorData::Strings(strings),
        })
    }

    /// A dense tensor that takes ownership of `values` without copying them.
    pub fn from_vec<T: Element>(shape: Vec<usize>, values: Vec<T>) -> Result<Self, DecodeError> {
        Self::dense(T::DTYPE, shape, element::into_bytes(values))
    }

    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn data(&self) -> &TensorData {
        &self.data
    }

    pub fn element_count(&self) -> usize {
        // The constructors proved the product fits.
        self.shape.iter().product()
    }

    /// The raw packed bytes of a dense tensor.
    pub fn bytes(&self) -> Option<&Bytes> {
        match &self.data {
            TensorData::Dense(bytes) => Some(bytes),
            TensorData::Strings(_) => None,
        }
    }

    /// The elements of a string tensor.
    pub fn string_elements(&self) -> Option<&Strings> {
        match &self.data {
            TensorData::Strings(strings) => Some(strings),
            TensorData::Dense(_) => None,
        }
    }

    /// The elements as `T`, borrowed when the buffer is aligned for `T`. A misaligned buffer
    /// (possible when it is a slice of a protobuf message) costs one copy.
    pub fn view<T: Element>(&self) -> Result<Cow<'_, [T]>, DecodeError> {
        if self.dtype != T::DTYPE {
            return Err(DecodeError::DtypeMismatch {
                expected: T::DTYPE,
                actual: self.dtype,
            });
        }
        match &self.data {
            TensorData::Dense(bytes) => Ok(element::cast_or_copy(bytes)),
            TensorData::Strings(_) => Err(DecodeError::StringNeedsElements),
        }
    }

    /// Bytes a typed view of this tensor would have to copy because its buffer is not aligned
    /// for the element type (a slice of a protobuf message can start anywhere).
    pub fn misaligned_bytes(&self) -> usize {
        match (&self.data, self.dtype.size()) {
            (TensorData::Dense(bytes), Some(size))
                if !(bytes.as_ptr() as usize).is_multiple_of(size) =>
            {
                bytes.len()
            }
            _ => 0,
        }
    }

    /// The same elements under another shape with as many elements (Triton's `reshape`):
    /// the data is shared, not copied.
    pub fn reshaped(self, shape: Vec<usize>) -> Result<Self, DecodeError> {
        let count = element_count(&shape)?;
        if count != self.element_count() {
            return Err(DecodeError::ElementCountMismatch {
                shape,
                expected: count,
                actual: self.element_count(),
            });
        }
        Ok(Self { shape, ..self })
    }

    /// Splits the tensor into its parts.
    pub fn into_parts(self) -> (DataType, Vec<usize>, TensorData) {
        (self.dtype, self.shape, self.data)
    }
}

/// Product of the dimensions, refusing shapes whose element count overflows.
pub fn element_count(shape: &[usize]) -> Result<usize, DecodeError> {
    shape
        .iter()
        .try_fold(1usize, |acc, &dim| acc.checked_mul(dim))
        .ok_or_else(|| DecodeError::ShapeOverflow {
            shape: shape.to_vec(),
        })
}

/// Converts client-declared dimensions into a shape, refusing negative sizes.
pub fn shape_from_dims(dims: &[i64]) -> Result<Vec<usize>, DecodeError> {
    dims.iter()
        .map(|&dim| usize::try_from(dim).map_err(|_| DecodeError::NegativeDimension(dim)))
        .collect()
}

/// Byte size of `count` elements of `dtype`, checked against the decode limit before any
/// buffer of that size is allocated.
pub fn checked_byte_len(
    dtype: DataType,
    shape: &[usize],
    limits: &DecodeLimits,
) -> Result<usize, DecodeError> {
    let count = element_count(shape)?;
    let size = dtype.size().unwrap_or(1);
    let bytes = count
        .checked_mul(size)
        .ok_or_else(|| DecodeError::ShapeOverflow {
            shape: shape.to_vec(),
        })?;
    if bytes > limits.max_tensor_bytes {
        return Err(DecodeError::TooLarge {
            shape: shape.to_vec(),
            bytes,
            limit: limits.max_tensor_bytes,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_checks_byte_length() {
        let ok = Tensor::dense(DataType::F32, vec![2, 2], Bytes::from(vec![0u8; 16]));
        assert!(ok.is_ok());
        let err = Tensor::dense(DataType::F32, vec![2, 2], Bytes::from(vec![0u8; 15]));
        assert!(matches!(
            err,
            Err(DecodeError::ByteLengthMismatch {
                expected: 16,
                actual: 15,
                ..
            })
        ));
    }

    #[test]
    fn element_count_refuses_overflow() {
        assert!(element_count(&[usize::MAX, 2]).is_err());
        assert_eq!(element_count(&[]).ok(), Some(1));
        assert_eq!(element_count(&[3, 0]).ok(), Some(0));
    }

    #[test]
    fn byte_len_respects_limit() {
        let limits = DecodeLimits {
            max_tensor_bytes: 1024,
            ..DecodeLimits::default()
        };
        assert_eq!(
            checked_byte_len(DataType::F32, &[16, 16], &limits).ok(),
            Some(1024)
        );
        assert!(matches!(
            checked_byte_len(DataType::F32, &[1_000_000_000, 1_000_000_000], &limits),
            Err(DecodeError::TooLarge { .. })
        ));
    }

    #[test]
    fn negative_dims_are_refused() {
        assert!(matches!(
            shape_from_dims(&[2, -1]),
            Err(DecodeError::NegativeDimension(-1))
        ));
    }

    #[test]
    fn view_borrows_aligned_and_copies_misaligned() {
        let values = vec![1.0f32, 2.0, 3.0];
        let tensor = Tensor::from_vec(vec![3], values.clone()).expect("valid tensor");
        let view = tensor.view::<f32>().expect("f32 view");
        assert!(matches!(view, Cow::Borrowed(_)));
        assert_eq!(&*view, &values[..]);

        let mut raw = vec![0u8];
        raw.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        let misaligned = Bytes::from(raw).slice(1..);
        let tensor = Tensor::dense(DataType::F32, vec![3], misaligned).expect("valid tensor");
        assert_eq!(&*tensor.view::<f32>().expect("f32 view"), &values[..]);
    }

    #[test]
    fn view_refuses_wrong_type() {
        let tensor = Tensor::from_vec(vec![1], vec![1i64]).expect("valid tensor");
        assert!(tensor.view::<f32>().is_err());
    }
}
