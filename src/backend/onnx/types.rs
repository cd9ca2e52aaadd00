//! A session's signature as ONNX Runtime describes it, and ONNX's element types against ours.

use ort::value::{TensorElementType, ValueType};

use crate::backend::TensorSpec;
use crate::tensor::DataType;

pub(super) fn element_type(dtype: DataType) -> TensorElementType {
    match dtype {
        DataType::Bool => TensorElementType::Bool,
        DataType::U8 => TensorElementType::Uint8,
        DataType::U16 => TensorElementType::Uint16,
        DataType::U32 => TensorElementType::Uint32,
        DataType::U64 => TensorElementType::Uint64,
        DataType::I8 => TensorElementType::Int8,
        DataType::I16 => TensorElementType::Int16,
        DataType::I32 => TensorElementType::Int32,
        DataType::I64 => TensorElementType::Int64,
        DataType::F16 => TensorElementType::Float16,
        DataType::BF16 => TensorElementType::Bfloat16,
        DataType::F32 => TensorElementType::Float32,
        DataType::F64 => TensorElementType::Float64,
        DataType::String => TensorElementType::String,
    }
}

pub(super) fn specs(outlets: &[ort::value::Outlet]) -> Result<Vec<TensorSpec>, String> {
    outlets
        .iter()
        .map(|outlet| match outlet.dtype() {
            ValueType::Tensor {
                ty,
                shape,
                dimension_symbols,
            } => Ok(TensorSpec {
                name: outlet.name().to_owned(),
                dtype: data_type(*ty).ok_or_else(|| {
                    format!("'{}' has unsupported element type {ty}", outlet.name())
                })?,
                shape: shape
                    .iter()
                    .map(|&dim| if dim < 0 { -1 } else { dim })
                    .collect(),
                symbols: (0..shape.len())
                    .map(|i| dimension_symbols.get(i).cloned().unwrap_or_default())
                    .collect(),
                any_shape: false,
            }),
            other => Err(format!("'{}' is a {other}, not a tensor", outlet.name())),
        })
        .collect()
}

pub(super) fn data_type(ty: TensorElementType) -> Option<DataType> {
    Some(match ty {
        TensorElementType::Bool => DataType::Bool,
        TensorElementType::Uint8 => DataType::U8,
        TensorElementType::Uint16 => DataType::U16,
        TensorElementType::Uint32 => DataType::U32,
        TensorElementType::Uint64 => DataType::U64,
        TensorElementType::Int8 => DataType::I8,
        TensorElementType::Int16 => DataType::I16,
        TensorElementType::Int32 => DataType::I32,
        TensorElementType::Int64 => DataType::I64,
        TensorElementType::Float16 => DataType::F16,
        TensorElementType::Bfloat16 => DataType::BF16,
        TensorElementType::Float32 => DataType::F32,
        TensorElementType::Float64 => DataType::F64,
        TensorElementType::String => DataType::String,
        _ => return None,
    })
}
