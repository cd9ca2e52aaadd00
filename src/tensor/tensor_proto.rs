//! `tensorflow.TensorProto` to and from [`Tensor`].
//!
//! Packed `tensor_content` becomes a tensor over the received bytes without a copy. The typed
//! `*_val` fields follow TensorFlow's rules: exactly as many values as the shape has elements,
//! or a single value that fills the whole tensor (the scalar broadcast clients rely on). TF also
//! repeats the last of a short list of values; that hides client bugs, so it is refused here
//! with a message saying how many values were expected.

use bytes::Bytes;

use crate::proto::tensorflow::{
    tensor_shape_proto, DataType as TfType, TensorProto, TensorShapeProto,
};
use crate::tensor::{
    checked_byte_len, element_count, shape_from_dims, BoolByte, DataType, DecodeError,
    DecodeLimits, Element, Tensor,
};

/// TF's wire dtype for a tensor dtype.
pub fn tf_dtype(dtype: DataType) -> TfType {
    match dtype {
        DataType::Bool => TfType::DtBool,
        DataType::U8 => TfType::DtUint8,
        DataType::U16 => TfType::DtUint16,
        DataType::U32 => TfType::DtUint32,
        DataType::U64 => TfType::DtUint64,
        DataType::I8 => TfType::DtInt8,
        DataType::I16 => TfType::DtInt16,
        DataType::I32 => TfType::DtInt32,
        DataType::I64 => TfType::DtInt64,
        DataType::F16 => TfType::DtHalf,
        DataType::BF16 => TfType::DtBfloat16,
        DataType::F32 => TfType::DtFloat,
        DataType::F64 => TfType::DtDouble,
        DataType::String => TfType::DtString,
    }
}

/// The tensor dtype for a TF wire dtype, refusing the ones no runtime here executes.
pub fn dtype_from_tf(code: i32) -> Result<DataType, DecodeError> {
    let tf = TfType::try_from(code)
        .map_err(|_| DecodeError::UnsupportedDtype(format!("unknown DataType value {code}")))?;
    DataType::ALL
        .into_iter()
        .find(|&dtype| tf_dtype(dtype) == tf)
        .ok_or_else(|| DecodeError::UnsupportedDtype(tf.as_str_name().to_owned()))
}

/// The `TensorShapeProto` of a shape, `-1` allowed for signature shapes.
pub fn shape_proto(dims: impl IntoIterator<Item = i64>) -> TensorShapeProto {
    TensorShapeProto {
        dim: dims
            .into_iter()
            .map(|size| tensor_shape_proto::Dim {
                size,
                name: String::new(),
            })
            .collect(),
        unknown_rank: false,
    }
}

/// How a response tensor carries its values: TF Serving's `PredictResponseTensorSerializationOption`.
///
/// TF Serving answers in the typed fields (`AS_PROTO_FIELD`) unless the server is built to
/// use `tensor_content` (`AS_PROTO_CONTENT`); clients such as `tf.make_ndarray` read either,
/// but many hand-written clients read only `float_val` and friends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResponseEncoding {
    /// `float_val`, `int64_val`, ...: what TF Serving sends by default. One conversion of
    /// every element into a repeated field, and a larger message for 1-byte and 2-byte types.
    #[default]
    TypedFields,
    /// Packed little-endian `tensor_content`: the runtime's output buffer is handed to the
    /// encoder as is (no per-element conversion). Strings always go in `string_val`.
    TensorContent,
}

/// Encodes a tensor the way `encoding` says.
pub fn encode_as(tensor: &Tensor, encoding: ResponseEncoding) -> TensorProto {
    match encoding {
        ResponseEncoding::TensorContent => encode(tensor),
        ResponseEncoding::TypedFields => encode_fields(tensor),
    }
}

/// Encodes a tensor; dense data goes into `tensor_content` (a reference-count bump here, one
/// copy when the message is serialised).
pub fn encode(tensor: &Tensor) -> TensorProto {
    let mut proto = header(tensor);
    match (tensor.bytes(), tensor.string_elements()) {
        (Some(bytes), _) => proto.tensor_content = bytes.clone(),
        (None, Some(strings)) => proto.string_val = strings.to_vec(),
        (None, None) => {}
    }
    proto
}

/// Encodes a tensor into the typed `*_val` field TensorFlow uses for its dtype (TensorFlow's
/// `Tensor::AsProtoField`): `int_val` for the integer types of 32 bits or fewer, `half_val`
/// holding the bit patterns of float16 and bfloat16.
pub fn encode_fields(tensor: &Tensor) -> TensorProto {
    let mut proto = header(tensor);
    if let Some(strings) = tensor.string_elements() {
        proto.string_val = strings.to_vec();
        return proto;
    }
    // The view only fails for a dtype mismatch, which `header` rules out; an empty field
    // would then be the answer, and the dtype and shape still say what was meant.
    fn values<T: Element, V>(tensor: &Tensor, convert: impl Fn(T) -> V) -> Vec<V> {
        tensor
            .view::<T>()
            .map(|view| view.iter().map(|&v| convert(v)).collect())
            .unwrap_or_default()
    }
    match tensor.dtype() {
        DataType::F32 => proto.float_val = values(tensor, |v: f32| v),
        DataType::F64 => proto.double_val = values(tensor, |v: f64| v),
        DataType::I32 => proto.int_val = values(tensor, |v: i32| v),
        DataType::I16 => proto.int_val = values(tensor, |v: i16| i32::from(v)),
        DataType::I8 => proto.int_val = values(tensor, |v: i8| i32::from(v)),
        DataType::U16 => proto.int_val = values(tensor, |v: u16| i32::from(v)),
        DataType::U8 => proto.int_val = values(tensor, |v: u8| i32::from(v)),
        DataType::I64 => proto.int64_val = values(tensor, |v: i64| v),
        DataType::U32 => proto.uint32_val = values(tensor, |v: u32| v),
        DataType::U64 => proto.uint64_val = values(tensor, |v: u64| v),
        DataType::Bool => proto.bool_val = values(tensor, |v: BoolByte| v.0 != 0),
        DataType::F16 => proto.half_val = values(tensor, |v: half::f16| i32::from(v.to_bits())),
        DataType::BF16 => proto.half_val = values(tensor, |v: half::bf16| i32::from(v.to_bits())),
        DataType::String => {}
    }
    proto
}

fn header(tensor: &Tensor) -> TensorProto {
    TensorProto {
        dtype: tf_dtype(tensor.dtype()) as i32,
        tensor_shape: Some(shape_proto(tensor.shape().iter().map(|&d| d as i64))),
        ..Default::default()
    }
}

/// Decodes a client's tensor, checking sizes before allocating anything.
pub fn decode(proto: TensorProto, limits: &DecodeLimits) -> Result<Tensor, DecodeError> {
    let dtype = dtype_from_tf(proto.dtype)?;
    let shape = match &proto.tensor_shape {
        None => Vec::new(),
        Some(shape) if shape.unknown_rank => {
            return Err(DecodeError::Malformed(
                "tensor_shape has unknown_rank set; a request tensor needs a full shape".into(),
            ))
        }
        Some(shape) => shape_from_dims(&shape.dim.iter().map(|d| d.size).collect::<Vec<_>>())?,
    };
    checked_byte_len(dtype, &shape, limits)?;

    if dtype == DataType::String {
        if !proto.tensor_content.is_empty() {
            return Err(DecodeError::Malformed(
                "DT_STRING tensors carry their values in string_val, not tensor_content".into(),
            ));
        }
        let count = element_count(&shape)?;
        let values = fill(proto.string_val, count, &shape, limits, "string_val")?;
        return Tensor::strings(shape, values);
    }
    if !proto.tensor_content.is_empty() {
        if dtype == DataType::Bool && proto.tensor_content.iter().any(|&b| b > 1) {
            return Err(DecodeError::Malformed(
                "DT_BOOL tensor_content must hold bytes of 0 or 1".into(),
            ));
        }
        return Tensor::dense(dtype, shape, proto.tensor_content);
    }
    match dtype {
        DataType::F32 => typed(proto.float_val, &shape, limits, "float_val", Some),
        DataType::F64 => typed(proto.double_val, &shape, limits, "double_val", Some),
        DataType::I32 => typed(proto.int_val, &shape, limits, "int_val", Some),
        DataType::I16 => typed(proto.int_val, &shape, limits, "int_val", |v| {
            i16::try_from(v).ok()
        }),
        DataType::I8 => typed(proto.int_val, &shape, limits, "int_val", |v| {
            i8::try_from(v).ok()
        }),
        DataType::U8 => typed(proto.int_val, &shape, limits, "int_val", |v| {
            u8::try_from(v).ok()
        }),
        DataType::U16 => typed(proto.int_val, &shape, limits, "int_val", |v| {
            u16::try_from(v).ok()
        }),
        DataType::I64 => typed(proto.int64_val, &shape, limits, "int64_val", Some),
        DataType::U32 => typed(proto.uint32_val, &shape, limits, "uint32_val", Some),
        DataType::U64 => typed(proto.uint64_val, &shape, limits, "uint64_val", Some),
        DataType::Bool => typed(proto.bool_val, &shape, limits, "bool_val", |v| {
            Some(BoolByte(u8::from(v)))
        }),
        DataType::F16 => typed(proto.half_val, &shape, limits, "half_val", |bits| {
            u16::try_from(bits).ok().map(half::f16::from_bits)
        }),
        DataType::BF16 => typed(proto.half_val, &shape, limits, "half_val", |bits| {
            u16::try_from(bits).ok().map(half::bf16::from_bits)
        }),
        DataType::String => Err(DecodeError::StringNeedsElements),
    }
}

/// Converts a typed value field, applying the count rule and a per-value range check.
fn typed<S: Copy + std::fmt::Display, T: Element>(
    values: Vec<S>,
    shape: &[usize],
    limits: &DecodeLimits,
    field: &'static str,
    convert: impl Fn(S) -> Option<T>,
) -> Result<Tensor, DecodeError> {
    let count = element_count(shape)?;
    let converted = values
        .iter()
        .map(|&v| {
            convert(v).ok_or_else(|| {
                DecodeError::Malformed(format!(
                    "{field} value {v} is out of range for {}",
                    T::DTYPE
                ))
            })
        })
        .collect::<Result<Vec<T>, _>>()?;
    let filled = fill(converted, count, shape, limits, field)?;
    Tensor::from_vec(shape.to_vec(), filled)
}

/// Exactly `count` values, or one value repeated `count` times.
fn fill<T: Clone>(
    mut values: Vec<T>,
    count: usize,
    shape: &[usize],
    limits: &DecodeLimits,
    field: &'static str,
) -> Result<Vec<T>, DecodeError> {
    if values.len() == count {
        return Ok(values);
    }
    match values.pop() {
        Some(only) if values.is_empty() => {
            // The broadcast is the one place a small request can ask for a large buffer.
            let bytes = count.saturating_mul(std::mem::size_of::<T>());
            if bytes > limits.max_tensor_bytes {
                return Err(DecodeError::TooLarge {
                    shape: shape.to_vec(),
                    bytes,
                    limit: limits.max_tensor_bytes,
                });
            }
            Ok(vec![only; count])
        }
        _ => Err(DecodeError::Malformed(format!(
            "shape {shape:?} has {count} elements but {field} holds {} values (give {count} values, or one to fill the tensor)",
            values.len() + usize::from(!values.is_empty() || count == 0)
        ))),
    }
}

/// Bytes for string tensors built from text (tests and warmup inputs).
pub fn string_values(values: &[&str]) -> Vec<Bytes> {
    values
        .iter()
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proto(dtype: TfType, dims: &[i64]) -> TensorProto {
        TensorProto {
            dtype: dtype as i32,
            tensor_shape: Some(shape_proto(dims.iter().copied())),
            ..Default::default()
        }
    }

    #[test]
    fn tensor_content_is_used_in_place() -> Result<(), DecodeError> {
        let content = Bytes::from(vec![0u8; 24]);
        let mut p = proto(TfType::DtFloat, &[2, 3]);
        p.tensor_content = content.clone();
        let tensor = decode(p, &DecodeLimits::default())?;
        assert_eq!(tensor.bytes().map(|b| b.as_ptr()), Some(content.as_ptr()));
        Ok(())
    }

    #[test]
    fn a_single_value_fills_the_shape() -> Result<(), DecodeError> {
        let mut p = proto(TfType::DtFloat, &[2, 3]);
        p.float_val = vec![1.5];
        let tensor = decode(p, &DecodeLimits::default())?;
        assert_eq!(&*tensor.view::<f32>()?, &[1.5; 6]);
        Ok(())
    }

    #[test]
    fn a_short_list_is_refused() {
        let mut p = proto(TfType::DtFloat, &[2, 2]);
        p.float_val = vec![1.0, 2.0, 3.0];
        let err = decode(p, &DecodeLimits::default())
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("4 elements") && e.contains("3 values")));
    }

    #[test]
    fn broadcast_respects_the_limit() {
        let mut p = proto(TfType::DtFloat, &[1_000_000_000, 1_000_000_000]);
        p.float_val = vec![1.0];
        assert!(matches!(
            decode(p, &DecodeLimits::default()),
            Err(DecodeError::TooLarge { .. }) | Err(DecodeError::ShapeOverflow { .. })
        ));
    }

    #[test]
    fn narrow_ints_are_range_checked() {
        let mut p = proto(TfType::DtInt8, &[1]);
        p.int_val = vec![300];
        assert!(decode(p, &DecodeLimits::default()).is_err());
    }

    #[test]
    fn round_trips_every_dtype() -> Result<(), DecodeError> {
        for dtype in DataType::ALL {
            let tensor = match dtype.size() {
                Some(size) => Tensor::dense(dtype, vec![2], Bytes::from(vec![1u8; 2 * size]))?,
                None => Tensor::strings(vec![2], string_values(&["a", "b"]))?,
            };
            let back = decode(encode(&tensor), &DecodeLimits::default())?;
            assert_eq!(back, tensor, "{dtype}");
        }
        Ok(())
    }

    #[test]
    fn typed_fields_round_trip_every_dtype() -> Result<(), DecodeError> {
        for dtype in DataType::ALL {
            let tensor = match dtype.size() {
                Some(size) => Tensor::dense(dtype, vec![2], Bytes::from(vec![1u8; 2 * size]))?,
                None => Tensor::strings(vec![2], string_values(&["a", "b"]))?,
            };
            let proto = encode_fields(&tensor);
            assert!(proto.tensor_content.is_empty(), "{dtype}");
            let back = decode(proto, &DecodeLimits::default())?;
            assert_eq!(back, tensor, "{dtype}");
        }
        Ok(())
    }

    #[test]
    fn typed_fields_use_tensorflows_field_for_each_dtype() -> Result<(), DecodeError> {
        let floats = encode_fields(&Tensor::from_vec(vec![2], vec![1.5f32, -2.0])?);
        assert_eq!(floats.float_val, [1.5, -2.0]);
        let bytes = encode_fields(&Tensor::from_vec(vec![2], vec![200u8, 7])?);
        assert_eq!(bytes.int_val, [200, 7]);
        let longs = encode_fields(&Tensor::from_vec(vec![1], vec![-5i64])?);
        assert_eq!(longs.int64_val, [-5]);
        let halves = encode_fields(&Tensor::from_vec(vec![1], vec![half::f16::ONE])?);
        assert_eq!(halves.half_val, [i32::from(half::f16::ONE.to_bits())]);
        let content = encode_as(
            &Tensor::from_vec(vec![1], vec![1.0f32])?,
            ResponseEncoding::TensorContent,
        );
        assert!(content.float_val.is_empty() && content.tensor_content.len() == 4);
        Ok(())
    }

    #[test]
    fn unsupported_dtypes_are_named() {
        let p = proto(TfType::DtComplex64, &[1]);
        let err = decode(p, &DecodeLimits::default())
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("DT_COMPLEX64")));
    }
}
