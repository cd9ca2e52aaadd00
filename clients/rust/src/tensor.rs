//! Tensors as the wire carries them: a KServe datatype, a shape and little-endian raw bytes.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{ClientError, Result};
use crate::proto::tensorflow::DataType as TfDataType;

// The raw layout of both protocols is little-endian; values are reinterpreted in place.
#[cfg(target_endian = "big")]
compile_error!("tensorport-client assumes a little-endian target");

/// Element types of the KServe v2 protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    Bool,
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F16,
    Bf16,
    F32,
    F64,
    /// Byte strings; raw layout: each element as a 4-byte little-endian length and its bytes.
    Bytes,
}

const NAMES: [(DataType, &str, TfDataType); 14] = [
    (DataType::Bool, "BOOL", TfDataType::DtBool),
    (DataType::U8, "UINT8", TfDataType::DtUint8),
    (DataType::U16, "UINT16", TfDataType::DtUint16),
    (DataType::U32, "UINT32", TfDataType::DtUint32),
    (DataType::U64, "UINT64", TfDataType::DtUint64),
    (DataType::I8, "INT8", TfDataType::DtInt8),
    (DataType::I16, "INT16", TfDataType::DtInt16),
    (DataType::I32, "INT32", TfDataType::DtInt32),
    (DataType::I64, "INT64", TfDataType::DtInt64),
    (DataType::F16, "FP16", TfDataType::DtHalf),
    (DataType::Bf16, "BF16", TfDataType::DtBfloat16),
    (DataType::F32, "FP32", TfDataType::DtFloat),
    (DataType::F64, "FP64", TfDataType::DtDouble),
    (DataType::Bytes, "BYTES", TfDataType::DtString),
];

impl DataType {
    /// The KServe name, such as `FP32`.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(d, _, _)| *d == self)
            .map_or("BYTES", |(_, n, _)| n)
    }

    pub fn from_name(name: &str) -> Option<Self> {
        NAMES
            .iter()
            .find(|(_, n, _)| *n == name)
            .map(|(d, _, _)| *d)
    }

    pub(crate) fn tf(self) -> TfDataType {
        NAMES
            .iter()
            .find(|(d, _, _)| *d == self)
            .map_or(TfDataType::DtInvalid, |(_, _, t)| *t)
    }

    pub(crate) fn from_tf(code: i32) -> Option<Self> {
        NAMES
            .iter()
            .find(|(_, _, t)| *t as i32 == code)
            .map(|(d, _, _)| *d)
    }

    /// Bytes per element; `None` for BYTES.
    pub fn size(self) -> Option<usize> {
        Some(match self {
            Self::Bool | Self::U8 | Self::I8 => 1,
            Self::U16 | Self::I16 | Self::F16 | Self::Bf16 => 2,
            Self::U32 | Self::I32 | Self::F32 => 4,
            Self::U64 | Self::I64 | Self::F64 => 8,
            Self::Bytes => return None,
        })
    }
}

/// A Rust number type with a KServe datatype.
pub trait Element: bytemuck::Pod {
    const DATATYPE: DataType;
}

macro_rules! elements {
    ($($t:ty => $d:ident),*) => {
        $(impl Element for $t { const DATATYPE: DataType = DataType::$d; })*
    };
}
elements!(u8 => U8, u16 => U16, u32 => U32, u64 => U64, i8 => I8, i16 => I16, i32 => I32,
          i64 => I64, f32 => F32, f64 => F64);

/// A tensor: datatype, shape, and its raw bytes (shared, not copied, when cloned).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    datatype: DataType,
    shape: Vec<i64>,
    data: Bytes,
}

/// An output's name and tensor.
pub type NamedTensor = (String, Tensor);

pub(crate) fn element_count(shape: &[i64]) -> Result<usize> {
    shape.iter().try_fold(1usize, |count, &dim| {
        usize::try_from(dim)
            .ok()
            .and_then(|d| count.checked_mul(d))
            .ok_or_else(|| ClientError::Tensor(format!("shape {shape:?} is not a valid size")))
    })
}

impl Tensor {
    /// A tensor of `shape` holding `values` (row-major).
    pub fn new<T: Element>(shape: impl Into<Vec<i64>>, values: &[T]) -> Result<Self> {
        let data = Bytes::copy_from_slice(bytemuck::cast_slice(values));
        Self::from_raw(T::DATATYPE, shape, data)
    }

    /// A BOOL tensor.
    pub fn from_bools(shape: impl Into<Vec<i64>>, values: &[bool]) -> Result<Self> {
        let data: Vec<u8> = values.iter().map(|&b| u8::from(b)).collect();
        Self::from_raw(DataType::Bool, shape, data.into())
    }

    /// A BYTES tensor of byte strings.
    pub fn from_strings<S: AsRef<[u8]>>(shape: impl Into<Vec<i64>>, items: &[S]) -> Result<Self> {
        let shape = shape.into();
        if element_count(&shape)? != items.len() {
            return Err(ClientError::Tensor(format!(
                "shape {shape:?} needs {} strings, got {}",
                element_count(&shape)?,
                items.len()
            )));
        }
        let mut data = BytesMut::new();
        for item in items {
            let item = item.as_ref();
            let length = u32::try_from(item.len())
                .map_err(|_| ClientError::Tensor("a string is longer than 4 GiB".into()))?;
            data.put_u32_le(length);
            data.put_slice(item);
        }
        Ok(Self {
            datatype: DataType::Bytes,
            shape,
            data: data.freeze(),
        })
    }

    /// A tensor over raw little-endian bytes; the size must fit the shape.
    pub fn from_raw(datatype: DataType, shape: impl Into<Vec<i64>>, data: Bytes) -> Result<Self> {
        let shape = shape.into();
        let count = element_count(&shape)?;
        if let Some(size) = datatype.size() {
            if count.checked_mul(size) != Some(data.len()) {
                return Err(ClientError::Tensor(format!(
                    "{} of shape {shape:?} needs {count} x {size} bytes, got {}",
                    datatype.name(),
                    data.len()
                )));
            }
        }
        Ok(Self {
            datatype,
            shape,
            data,
        })
    }

    pub fn datatype(&self) -> DataType {
        self.datatype
    }

    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// The raw bytes, as they travel on the wire.
    pub fn raw(&self) -> &Bytes {
        &self.data
    }

    /// The values, copied out (the raw bytes need not be aligned for `T`).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if self.datatype != T::DATATYPE {
            return Err(ClientError::Tensor(format!(
                "the tensor is {}, not {}",
                self.datatype.name(),
                T::DATATYPE.name()
            )));
        }
        Ok(bytemuck::pod_collect_to_vec(&self.data))
    }

    /// The values of a BOOL tensor.
    pub fn to_bools(&self) -> Result<Vec<bool>> {
        if self.datatype != DataType::Bool {
            return Err(ClientError::Tensor(format!(
                "the tensor is {}, not BOOL",
                self.datatype.name()
            )));
        }
        Ok(self.data.iter().map(|&b| b != 0).collect())
    }

    /// The elements of a BYTES tensor.
    pub fn to_strings(&self) -> Result<Vec<Bytes>> {
        if self.datatype != DataType::Bytes {
            return Err(ClientError::Tensor(format!(
                "the tensor is {}, not BYTES",
                self.datatype.name()
            )));
        }
        let mut items = Vec::new();
        let mut rest = self.data.clone();
        while !rest.is_empty() {
            let truncated = || ClientError::Tensor("a BYTES element runs past the data".into());
            let header: [u8; 4] = rest
                .get(..4)
                .and_then(|h| h.try_into().ok())
                .ok_or_else(truncated)?;
            let length = u32::from_le_bytes(header) as usize;
            if rest.len() < 4 + length {
                return Err(truncated());
            }
            items.push(rest.slice(4..4 + length));
            rest = rest.slice(4 + length..);
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip() {
        let t = Tensor::new([2, 2], &[1.5f32, -2.0, 0.0, 4.25]).unwrap();
        assert_eq!(t.datatype(), DataType::F32);
        assert_eq!(t.raw().len(), 16);
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.5, -2.0, 0.0, 4.25]);
        assert!(t.to_vec::<i32>().is_err());
    }

    #[test]
    fn sizes_are_checked() {
        assert!(Tensor::new([3], &[1i64, 2]).is_err());
        assert!(Tensor::new([-1], &[1i64]).is_err());
        assert!(Tensor::from_raw(DataType::F64, [1], Bytes::from_static(&[0; 4])).is_err());
    }

    #[test]
    fn strings_round_trip() {
        let t = Tensor::from_strings([2], &["ab", ""]).unwrap();
        assert_eq!(t.raw().as_ref(), b"\x02\0\0\0ab\0\0\0\0");
        assert_eq!(
            t.to_strings().unwrap(),
            vec![Bytes::from("ab"), Bytes::new()]
        );
        let cut = Tensor::from_raw(DataType::Bytes, [1], Bytes::from_static(b"\x05\0\0\0ab"));
        assert!(cut.unwrap().to_strings().is_err());
    }

    #[test]
    fn names_and_tf_codes_map_both_ways() {
        for (datatype, name, tf) in NAMES {
            assert_eq!(DataType::from_name(name), Some(datatype));
            assert_eq!(datatype.name(), name);
            assert_eq!(DataType::from_tf(tf as i32), Some(datatype));
        }
    }
}
