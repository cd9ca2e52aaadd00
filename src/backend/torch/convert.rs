//! Between tensorport's tensors and LibTorch's, and from what `forward` returns to named
//! outputs.

use bytes::Bytes;
use tch::{IValue, Kind};

use crate::backend::{BackendError, TensorSpec};
use crate::tensor::{element_count, DataType, Tensor};

/// LibTorch's element type for `dtype`; LibTorch has no unsigned types wider than 8 bits and
/// no strings.
pub fn kind(dtype: DataType) -> Result<Kind, String> {
    Ok(match dtype {
        DataType::Bool => Kind::Bool,
        DataType::U8 => Kind::Uint8,
        DataType::I8 => Kind::Int8,
        DataType::I16 => Kind::Int16,
        DataType::I32 => Kind::Int,
        DataType::I64 => Kind::Int64,
        DataType::F16 => Kind::Half,
        DataType::BF16 => Kind::BFloat16,
        DataType::F32 => Kind::Float,
        DataType::F64 => Kind::Double,
        DataType::U16 | DataType::U32 | DataType::U64 | DataType::String => {
            return Err(format!("TorchScript models cannot take or return {dtype}"))
        }
    })
}

/// A LibTorch tensor holding a copy of `tensor`.
pub fn to_torch(tensor: &Tensor) -> Result<tch::Tensor, String> {
    let kind = kind(tensor.dtype())?;
    let bytes = tensor
        .bytes()
        .ok_or_else(|| format!("{} data is not dense", tensor.dtype()))?;
    let dims = tensor
        .shape()
        .iter()
        .map(|&dim| i64::try_from(dim).map_err(|_| format!("dimension {dim} is too large")))
        .collect::<Result<Vec<_>, _>>()?;
    // LibTorch copies as many bytes as the shape calls for: check they are all there.
    let wanted = element_count(tensor.shape())
        .ok()
        .and_then(|count| count.checked_mul(kind.elt_size_in_bytes()));
    if wanted != Some(bytes.len()) {
        return Err(format!(
            "{} bytes do not fill shape {:?}",
            bytes.len(),
            tensor.shape()
        ));
    }
    tch::Tensor::f_from_data_size(bytes, &dims, kind).map_err(|err| err.to_string())
}

/// A copy of the LibTorch tensor `value` returned for output `spec`, checked against the
/// declared dtype and shape.
pub fn from_torch(value: &tch::Tensor, spec: &TensorSpec) -> Result<Tensor, BackendError> {
    let fail =
        |message: String| BackendError::runtime(format!("output '{}': {message}", spec.name));
    if !value.defined() {
        return Err(fail("forward() returned an undefined tensor".into()));
    }
    let got = value.f_kind().map_err(|err| fail(err.to_string()))?;
    let want = kind(spec.dtype).map_err(fail)?;
    if got != want {
        return Err(fail(format!(
            "forward() returned {got:?} elements, config.toml declares {}",
            spec.dtype
        )));
    }
    let shape = value
        .size()
        .into_iter()
        .map(|dim| usize::try_from(dim).map_err(|_| fail(format!("negative dimension {dim}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if !spec.accepts_shape(&shape) {
        return Err(fail(format!(
            "forward() returned shape {shape:?}, config.toml declares {}",
            spec.shape_text()
        )));
    }
    let count = element_count(&shape).map_err(|err| fail(err.to_string()))?;
    let len = count
        .checked_mul(got.elt_size_in_bytes())
        .ok_or_else(|| fail("too large".into()))?;
    let mut bytes = vec![0u8; len];
    // Copies through a contiguous CPU view, whatever the layout of `value`.
    value
        .f_copy_data_u8(&mut bytes, count)
        .map_err(|err| fail(err.to_string()))?;
    Tensor::dense(spec.dtype, shape, Bytes::from(bytes)).map_err(|err| fail(err.to_string()))
}

/// Names what `forward` returned after the declared outputs: a tensor is the only output; a
/// tuple or list gives them in declared order; a dict gives them by name.
pub fn named_outputs(
    returned: IValue,
    declared: &[TensorSpec],
) -> Result<Vec<(String, tch::Tensor)>, BackendError> {
    let positional = |values: Vec<IValue>| {
        if values.len() != declared.len() {
            return Err(BackendError::runtime(format!(
                "forward() returned {} values, config.toml declares {} outputs",
                values.len(),
                declared.len()
            )));
        }
        declared
            .iter()
            .zip(values)
            .map(|(spec, value)| Ok((spec.name.clone(), tensor_value(value, &spec.name)?)))
            .collect()
    };
    match returned {
        IValue::Tensor(tensor) => positional(vec![IValue::Tensor(tensor)]),
        IValue::Tuple(values) | IValue::GenericList(values) => positional(values),
        IValue::TensorList(tensors) => {
            positional(tensors.into_iter().map(IValue::Tensor).collect())
        }
        IValue::GenericDict(entries) => entries
            .into_iter()
            .map(|(key, value)| {
                let IValue::String(name) = key else {
                    return Err(BackendError::runtime(
                        "forward() returned a dict whose keys are not strings".into(),
                    ));
                };
                let tensor = tensor_value(value, &name)?;
                Ok((name, tensor))
            })
            .collect(),
        other => Err(BackendError::runtime(format!(
            "forward() returned {}; a tensor, a tuple or list of tensors, or a dict of str to \
             tensor was expected",
            describe(&other)
        ))),
    }
}

fn tensor_value(value: IValue, name: &str) -> Result<tch::Tensor, BackendError> {
    match value {
        IValue::Tensor(tensor) => Ok(tensor),
        other => Err(BackendError::runtime(format!(
            "output '{name}': forward() returned {}, not a tensor",
            describe(&other)
        ))),
    }
}

fn describe(value: &IValue) -> &'static str {
    match value {
        IValue::None => "None",
        IValue::Tensor(_) => "a tensor",
        IValue::Double(_) | IValue::Int(_) | IValue::Bool(_) => "a number",
        IValue::Tuple(_) => "a tuple",
        IValue::IntList(_) | IValue::DoubleList(_) | IValue::BoolList(_) => "a list of numbers",
        IValue::String(_) | IValue::StringList(_) => "strings",
        IValue::TensorList(_) | IValue::GenericList(_) => "a list",
        IValue::GenericDict(_) => "a dict",
        IValue::Object(_) => "an object",
        IValue::Device(_) => "a device",
        _ => "a value of another kind",
    }
}
