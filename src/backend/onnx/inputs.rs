//! Request tensors into the runtime: a view over the request's own bytes where the element
//! type's alignment allows, a copy only where it does not.

use std::borrow::Cow;

use ort::session::SessionInputValue;
use ort::value::{PrimitiveTensorElementType, Tensor as OrtTensor, TensorRef};

use crate::backend::onnx_raw;
use crate::tensor::{DataType, DecodeError, Element, Tensor};

pub(super) fn input_value(tensor: &Tensor) -> Result<SessionInputValue<'_>, DecodeError> {
    let shape: Vec<i64> = tensor.shape().iter().map(|&dim| dim as i64).collect();
    match tensor.dtype() {
        DataType::Bool => {
            let bytes = tensor.bytes().map(|b| &b[..]).unwrap_or_default();
            let bools: &[bool] = bytemuck::checked::try_cast_slice(bytes)
                .map_err(|_| DecodeError::Malformed("booleans must be bytes of 0 or 1".into()))?;
            ort_value(TensorRef::from_array_view((shape, bools)))
        }
        DataType::U8 => typed_input::<u8>(tensor, shape),
        DataType::U16 => typed_input::<u16>(tensor, shape),
        DataType::U32 => typed_input::<u32>(tensor, shape),
        DataType::U64 => typed_input::<u64>(tensor, shape),
        DataType::I8 => typed_input::<i8>(tensor, shape),
        DataType::I16 => typed_input::<i16>(tensor, shape),
        DataType::I32 => typed_input::<i32>(tensor, shape),
        DataType::I64 => typed_input::<i64>(tensor, shape),
        DataType::F16 => typed_input::<half::f16>(tensor, shape),
        DataType::BF16 => typed_input::<half::bf16>(tensor, shape),
        DataType::F32 => typed_input::<f32>(tensor, shape),
        DataType::F64 => typed_input::<f64>(tensor, shape),
        DataType::String => {
            onnx_raw::string_tensor(shape, tensor.string_elements().unwrap_or_default())
                .map(SessionInputValue::from)
                .map_err(DecodeError::Malformed)
        }
    }
}

fn typed_input<T>(tensor: &Tensor, shape: Vec<i64>) -> Result<SessionInputValue<'_>, DecodeError>
where
    T: Element + PrimitiveTensorElementType + std::fmt::Debug,
{
    match tensor.view::<T>()? {
        Cow::Borrowed(slice) => ort_value(TensorRef::from_array_view((shape, slice))),
        Cow::Owned(values) => ort_value(OrtTensor::from_array((shape, values))),
    }
}

fn ort_value<'v, V: Into<SessionInputValue<'v>>>(
    value: ort::Result<V>,
) -> Result<SessionInputValue<'v>, DecodeError> {
    value
        .map(Into::into)
        .map_err(|err| DecodeError::Malformed(err.to_string()))
}
