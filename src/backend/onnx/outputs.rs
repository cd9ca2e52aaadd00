//! Outputs out of the runtime, left in the buffers it allocated and handed on as `Bytes` that
//! own them, and the runtime's errors as ours.

use bytes::Bytes;
use ort::value::{DynValue, PrimitiveTensorElementType, ValueType};

use super::types::data_type;
use crate::backend::onnx_raw;
use crate::backend::BackendError;
use crate::tensor::{DataType, Tensor};

pub(super) fn run_failure(failure: onnx_raw::RunFailure) -> BackendError {
    if failure.invalid_input {
        BackendError::invalid_input(failure.message)
    } else {
        BackendError::runtime(failure.message)
    }
}

pub(super) fn output_tensor(value: DynValue) -> Result<Tensor, BackendError> {
    let ValueType::Tensor { ty, shape, .. } = value.dtype() else {
        return Err(BackendError::runtime("an output is not a tensor".into()));
    };
    let dtype = data_type(*ty)
        .ok_or_else(|| BackendError::runtime(format!("unsupported output element type {ty}")))?;
    let shape = shape
        .iter()
        .map(|&dim| usize::try_from(dim))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| BackendError::runtime("an output has a negative dimension".into()))?;
    let tensor = if dtype == DataType::String {
        let count = crate::tensor::element_count(&shape)
            .map_err(|err| BackendError::runtime(err.to_string()))?;
        let strings = onnx_raw::string_elements(&value, count).map_err(BackendError::runtime)?;
        Tensor::from_strings(shape, strings)
    } else {
        Tensor::dense(
            dtype,
            shape,
            Bytes::from_owner(OutputBuffer { value, dtype }),
        )
    };
    tensor.map_err(|err| BackendError::runtime(err.to_string()))
}

/// Keeps a runtime-allocated output alive for as long as its bytes are referenced.
struct OutputBuffer {
    value: DynValue,
    dtype: DataType,
}

impl AsRef<[u8]> for OutputBuffer {
    fn as_ref(&self) -> &[u8] {
        fn bytes<T: PrimitiveTensorElementType + bytemuck::NoUninit>(value: &DynValue) -> &[u8] {
            // The element type was read from the value itself, so extraction cannot fail; an
            // empty slice would be caught by `Tensor::dense`'s length check.
            value
                .try_extract_tensor::<T>()
                .map(|(_, data)| bytemuck::cast_slice(data))
                .unwrap_or_default()
        }
        match self.dtype {
            DataType::Bool => bytes::<bool>(&self.value),
            DataType::U8 => bytes::<u8>(&self.value),
            DataType::U16 => bytes::<u16>(&self.value),
            DataType::U32 => bytes::<u32>(&self.value),
            DataType::U64 => bytes::<u64>(&self.value),
            DataType::I8 => bytes::<i8>(&self.value),
            DataType::I16 => bytes::<i16>(&self.value),
            DataType::I32 => bytes::<i32>(&self.value),
            DataType::I64 => bytes::<i64>(&self.value),
            DataType::F16 => bytes::<half::f16>(&self.value),
            DataType::BF16 => bytes::<half::bf16>(&self.value),
            DataType::F32 => bytes::<f32>(&self.value),
            DataType::F64 => bytes::<f64>(&self.value),
            DataType::String => &[],
        }
    }
}
