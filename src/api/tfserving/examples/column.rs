//! The values of one input, gathered example by example from the feature of its name.

use bytes::Bytes;

use crate::api::tfserving::error::ExampleError;
use crate::proto::tensorflow::feature;
use crate::tensor::{DataType, DecodeError, Tensor};

/// The feeding rule, repeated in messages so that a client sees it where it went wrong.
pub(super) const RULE: &str = "float_list feeds float32/float64, int64_list feeds int64/int32 (and float32), bytes_list feeds string";

pub(super) fn kind_len(kind: &feature::Kind) -> usize {
    match kind {
        feature::Kind::FloatList(list) => list.value.len(),
        feature::Kind::Int64List(list) => list.value.len(),
        feature::Kind::BytesList(list) => list.value.len(),
    }
}

fn kind_name(kind: &feature::Kind) -> &'static str {
    match kind {
        feature::Kind::FloatList(_) => "float_list",
        feature::Kind::Int64List(_) => "int64_list",
        feature::Kind::BytesList(_) => "bytes_list",
    }
}

/// The values of one input, gathered example by example.
pub(super) enum Column {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    Strings(Vec<Bytes>),
}

impl Column {
    pub(super) fn for_dtype(dtype: DataType) -> Self {
        match dtype {
            DataType::F64 => Self::F64(Vec::new()),
            DataType::I64 => Self::I64(Vec::new()),
            DataType::I32 => Self::I32(Vec::new()),
            DataType::String => Self::Strings(Vec::new()),
            _ => Self::F32(Vec::new()),
        }
    }

    fn dtype(&self) -> DataType {
        match self {
            Self::F32(_) => DataType::F32,
            Self::F64(_) => DataType::F64,
            Self::I64(_) => DataType::I64,
            Self::I32(_) => DataType::I32,
            Self::Strings(_) => DataType::String,
        }
    }

    pub(super) fn push(
        &mut self,
        kind: &feature::Kind,
        name: &str,
        example: usize,
    ) -> Result<(), ExampleError> {
        use feature::Kind::{BytesList, FloatList, Int64List};
        let dtype = self.dtype();
        match (self, kind) {
            (Self::F32(out), FloatList(list)) => out.extend_from_slice(&list.value),
            // JSON has one number type: `1` in a REST example arrives as an int64_list.
            (Self::F32(out), Int64List(list)) => out.extend(list.value.iter().map(|&v| v as f32)),
            (Self::F64(out), FloatList(list)) => {
                out.extend(list.value.iter().map(|&v| f64::from(v)))
            }
            (Self::F64(out), Int64List(list)) => out.extend(list.value.iter().map(|&v| v as f64)),
            (Self::I64(out), Int64List(list)) => out.extend_from_slice(&list.value),
            (Self::I32(out), Int64List(list)) => {
                for &value in &list.value {
                    let narrow = i32::try_from(value).map_err(|_| ExampleError::OutOfRange {
                        feature: name.to_owned(),
                        value,
                        dtype,
                    })?;
                    out.push(narrow);
                }
            }
            (Self::Strings(out), BytesList(list)) => out.extend(list.value.iter().cloned()),
            (_, kind) => {
                return Err(ExampleError::WrongKind {
                    example,
                    feature: name.to_owned(),
                    got: kind_name(kind),
                    dtype,
                    rule: RULE,
                })
            }
        }
        Ok(())
    }

    pub(super) fn into_tensor(self, shape: Vec<usize>) -> Result<Tensor, DecodeError> {
        match self {
            Self::F32(values) => Tensor::from_vec(shape, values),
            Self::F64(values) => Tensor::from_vec(shape, values),
            Self::I64(values) => Tensor::from_vec(shape, values),
            Self::I32(values) => Tensor::from_vec(shape, values),
            Self::Strings(values) => Tensor::strings(shape, values),
        }
    }
}
