//! Tensors as nested JSON arrays, shared by the REST protocols.
//!
//! Decoding walks the JSON once to find the shape, refuses ragged arrays, then converts each
//! leaf to the dtype the signature declares. Encoding writes straight into the response buffer
//! (no intermediate `serde_json::Value`). Non-finite floats are written as `NaN`, `Infinity`
//! and `-Infinity`, as TF Serving does.

use base64::Engine;
use bytes::Bytes;
use serde_json::Value;

use crate::tensor::{
    checked_byte_len, element_count, BoolByte, DataType, DecodeError, DecodeLimits, Element, Tensor,
};

/// Decodes `rows` stacked along a new leading dimension (TF Serving's row format).
pub fn decode_rows(
    rows: &[&Value],
    dtype: DataType,
    limits: &DecodeLimits,
) -> Result<Tensor, DecodeError> {
    let inner = match rows.first() {
        Some(first) => infer_shape(first),
        None => Vec::new(),
    };
    let mut shape = Vec::with_capacity(inner.len() + 1);
    shape.push(rows.len());
    shape.extend_from_slice(&inner);
    decode_with_shape(rows.iter().copied(), &inner, shape, dtype, limits)
}

/// Decodes one JSON value (nested arrays or a scalar) as a whole tensor.
pub fn decode_value(
    value: &Value,
    dtype: DataType,
    limits: &DecodeLimits,
) -> Result<Tensor, DecodeError> {
    let shape = infer_shape(value);
    decode_with_shape(std::iter::once(value), &shape, shape.clone(), dtype, limits)
}

/// Decodes KServe `data`: the elements in row-major order, flat or nested in any way, filling
/// the declared `shape`.
pub fn decode_flat(
    value: &Value,
    shape: Vec<usize>,
    dtype: DataType,
    limits: &DecodeLimits,
) -> Result<Tensor, DecodeError> {
    checked_byte_len(dtype, &shape, limits)?;
    let count = element_count(&shape)?;
    let mut leaves = Vec::new();
    flatten(value, &mut leaves);
    if leaves.len() != count {
        return Err(DecodeError::ElementCountMismatch {
            shape,
            expected: count,
            actual: leaves.len(),
        });
    }
    convert_leaves(&leaves, shape, dtype)
}

fn flatten<'v>(value: &'v Value, out: &mut Vec<&'v Value>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| flatten(item, out)),
        leaf => out.push(leaf),
    }
}

/// The shape implied by following the first element of each nested array.
fn infer_shape(mut value: &Value) -> Vec<usize> {
    let mut shape = Vec::new();
    while let Value::Array(items) = value {
        shape.push(items.len());
        match items.first() {
            Some(first) => value = first,
            None => break,
        }
    }
    shape
}

fn decode_with_shape<'v>(
    parts: impl Iterator<Item = &'v Value> + Clone,
    part_shape: &[usize],
    shape: Vec<usize>,
    dtype: DataType,
    limits: &DecodeLimits,
) -> Result<Tensor, DecodeError> {
    checked_byte_len(dtype, &shape, limits)?;
    let count = element_count(&shape)?;
    let mut leaves = Vec::new();
    for part in parts {
        collect_leaves(part, part_shape, &mut leaves)?;
    }
    if leaves.len() != count {
        return Err(ragged(&shape));
    }
    convert_leaves(&leaves, shape, dtype)
}

fn convert_leaves(
    leaves: &[&Value],
    shape: Vec<usize>,
    dtype: DataType,
) -> Result<Tensor, DecodeError> {
    match dtype {
        DataType::String => {
            let strings = leaves
                .iter()
                .map(|v| string_leaf(v))
                .collect::<Result<_, _>>()?;
            Tensor::strings(shape, strings)
        }
        DataType::Bool => typed(leaves, shape, |v| {
            v.as_bool().map(|b| BoolByte(u8::from(b)))
        }),
        DataType::U8 => typed(leaves, shape, |v| {
            v.as_u64().and_then(|n| u8::try_from(n).ok())
        }),
        DataType::U16 => typed(leaves, shape, |v| {
            v.as_u64().and_then(|n| u16::try_from(n).ok())
        }),
        DataType::U32 => typed(leaves, shape, |v| {
            v.as_u64().and_then(|n| u32::try_from(n).ok())
        }),
        DataType::U64 => typed(leaves, shape, Value::as_u64),
        DataType::I8 => typed(leaves, shape, |v| {
            v.as_i64().and_then(|n| i8::try_from(n).ok())
        }),
        DataType::I16 => typed(leaves, shape, |v| {
            v.as_i64().and_then(|n| i16::try_from(n).ok())
        }),
        DataType::I32 => typed(leaves, shape, |v| {
            v.as_i64().and_then(|n| i32::try_from(n).ok())
        }),
        DataType::I64 => typed(leaves, shape, Value::as_i64),
        DataType::F16 => typed(leaves, shape, |v| float(v).map(half::f16::from_f64)),
        DataType::BF16 => typed(leaves, shape, |v| float(v).map(half::bf16::from_f64)),
        DataType::F32 => typed(leaves, shape, |v| float(v).map(|f| f as f32)),
        DataType::F64 => typed(leaves, shape, float),
    }
}

/// Gathers leaves in row-major order, checking that every array has the expected length.
fn collect_leaves<'v>(
    value: &'v Value,
    shape: &[usize],
    out: &mut Vec<&'v Value>,
) -> Result<(), DecodeError> {
    match (value, shape.split_first()) {
        (Value::Array(items), Some((&len, rest))) if items.len() == len => {
            for item in items {
                collect_leaves(item, rest, out)?;
            }
            Ok(())
        }
        (Value::Array(_), _) | (_, Some(_)) => Err(ragged(shape)),
        (leaf, None) => {
            out.push(leaf);
            Ok(())
        }
    }
}

fn ragged(shape: &[usize]) -> DecodeError {
    DecodeError::Malformed(format!(
        "the JSON arrays are ragged or nested unevenly: every list must have the same length at each depth (expected shape {shape:?})"
    ))
}

fn typed<T: Element>(
    leaves: &[&Value],
    shape: Vec<usize>,
    convert: impl Fn(&Value) -> Option<T>,
) -> Result<Tensor, DecodeError> {
    let values = leaves
        .iter()
        .map(|leaf| convert(leaf).ok_or_else(|| wrong_type(leaf, T::DTYPE)))
        .collect::<Result<Vec<T>, _>>()?;
    Tensor::from_vec(shape, values)
}

fn float(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        // TF Serving accepts the non-finite spellings as strings too.
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" | "inf" => Some(f64::INFINITY),
            "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

fn string_leaf(value: &Value) -> Result<Bytes, DecodeError> {
    match value {
        Value::String(s) => Ok(Bytes::copy_from_slice(s.as_bytes())),
        Value::Object(map) if map.len() == 1 && map.contains_key("b64") => match &map["b64"] {
            Value::String(encoded) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map(Bytes::from)
                .map_err(|err| DecodeError::Malformed(format!("invalid base64 in \"b64\": {err}"))),
            _ => Err(DecodeError::Malformed("\"b64\" must be a string".into())),
        },
        other => Err(wrong_type(other, DataType::String)),
    }
}

fn wrong_type(value: &Value, dtype: DataType) -> DecodeError {
    let found = match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("\"{}\"", s.chars().take(32).collect::<String>()),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    };
    let expected = match dtype {
        DataType::Bool => "true or false",
        DataType::String => "a string or {\"b64\": ...}",
        DataType::F16 | DataType::BF16 | DataType::F32 | DataType::F64 => "a number",
        _ => "an integer in range",
    };
    DecodeError::Malformed(format!(
        "expected {expected} for dtype {dtype}, got {found}"
    ))
}

/// Writes every element of a tensor as one flat array (KServe's `data`).
pub fn write_flat(out: &mut Vec<u8>, tensor: &Tensor) -> Result<(), DecodeError> {
    let elements = Elements::of(tensor)?;
    let mut next = 0;
    write_nested(out, &[tensor.element_count()], &elements, &mut next, false);
    Ok(())
}

/// Writes a tensor, or one row of it (`row` indexes the first dimension), as nested arrays.
pub fn write_tensor(
    out: &mut Vec<u8>,
    tensor: &Tensor,
    row: Option<usize>,
    binary_strings: bool,
) -> Result<(), DecodeError> {
    let elements = Elements::of(tensor)?;
    let (dims, start) = match row {
        Some(row) => {
            let dims = tensor.shape().get(1..).unwrap_or_default();
            (dims, row * dims.iter().product::<usize>())
        }
        None => (tensor.shape(), 0),
    };
    let mut next = start;
    write_nested(out, dims, &elements, &mut next, binary_strings);
    Ok(())
}

fn write_nested(
    out: &mut Vec<u8>,
    dims: &[usize],
    elements: &Elements<'_>,
    next: &mut usize,
    binary_strings: bool,
) {
    match dims.split_first() {
        None => {
            elements.write(out, *next, binary_strings);
            *next += 1;
        }
        Some((&len, rest)) => {
            out.push(b'[');
            for i in 0..len {
                if i > 0 {
                    out.push(b',');
                }
                write_nested(out, rest, elements, next, binary_strings);
            }
            out.push(b']');
        }
    }
}

/// Typed access to a tensor's elements for the writer.
enum Elements<'t> {
    Bool(&'t [u8]),
    U8(&'t [u8]),
    U16(std::borrow::Cow<'t, [u16]>),
    U32(std::borrow::Cow<'t, [u32]>),
    U64(std::borrow::Cow<'t, [u64]>),
    I8(std::borrow::Cow<'t, [i8]>),
    I16(std::borrow::Cow<'t, [i16]>),
    I32(std::borrow::Cow<'t, [i32]>),
    I64(std::borrow::Cow<'t, [i64]>),
    F16(std::borrow::Cow<'t, [half::f16]>),
    BF16(std::borrow::Cow<'t, [half::bf16]>),
    F32(std::borrow::Cow<'t, [f32]>),
    F64(std::borrow::Cow<'t, [f64]>),
    Str(&'t [Bytes]),
}

impl<'t> Elements<'t> {
    fn of(tensor: &'t Tensor) -> Result<Self, DecodeError> {
        let raw = || tensor.bytes().map(|b| &b[..]).unwrap_or_default();
        Ok(match tensor.dtype() {
            DataType::Bool => Self::Bool(raw()),
            DataType::U8 => Self::U8(raw()),
            DataType::U16 => Self::U16(tensor.view()?),
            DataType::U32 => Self::U32(tensor.view()?),
            DataType::U64 => Self::U64(tensor.view()?),
            DataType::I8 => Self::I8(tensor.view()?),
            DataType::I16 => Self::I16(tensor.view()?),
            DataType::I32 => Self::I32(tensor.view()?),
            DataType::I64 => Self::I64(tensor.view()?),
            DataType::F16 => Self::F16(tensor.view()?),
            DataType::BF16 => Self::BF16(tensor.view()?),
            DataType::F32 => Self::F32(tensor.view()?),
            DataType::F64 => Self::F64(tensor.view()?),
            DataType::String => Self::Str(tensor.string_elements().unwrap_or_default()),
        })
    }

    fn write(&self, out: &mut Vec<u8>, i: usize, binary_strings: bool) {
        match self {
            Self::Bool(v) => out.extend_from_slice(if v.get(i).is_some_and(|&b| b != 0) {
                b"true"
            } else {
                b"false"
            }),
            Self::U8(v) => write_int(out, v.get(i).copied().unwrap_or_default()),
            Self::U16(v) => write_int(out, v.get(i).copied().unwrap_or_default()),
            Self::U32(v) => write_int(out, v.get(i).copied().unwrap_or_default()),
            Self::U64(v) => write_int(out, v.get(i).copied().unwrap_or_default()),
            Self::I8(v) => write_int(out, v.get(i).copied().unwrap_or_default()),
            Self::I16(v) => write_int(out, v.get(i).copied().unwrap_or_default()),
            Self::I32(v) => write_int(out, v.get(i).copied().unwrap_or_default()),
            Self::I64(v) => write_int(out, v.get(i).copied().unwrap_or_default()),
            Self::F16(v) => write_f32(out, v.get(i).map(|h| h.to_f32()).unwrap_or_default()),
            Self::BF16(v) => write_f32(out, v.get(i).map(|h| h.to_f32()).unwrap_or_default()),
            Self::F32(v) => write_f32(out, v.get(i).copied().unwrap_or_default()),
            Self::F64(v) => write_f64(out, v.get(i).copied().unwrap_or_default()),
            Self::Str(v) => write_string(
                out,
                v.get(i).map(|b| &b[..]).unwrap_or_default(),
                binary_strings,
            ),
        }
    }
}

fn write_int<I: itoa::Integer>(out: &mut Vec<u8>, value: I) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn write_f32(out: &mut Vec<u8>, value: f32) {
    if value.is_finite() {
        out.extend_from_slice(ryu::Buffer::new().format_finite(value).as_bytes());
    } else {
        write_non_finite(out, value.is_nan(), value.is_sign_negative());
    }
}

fn write_f64(out: &mut Vec<u8>, value: f64) {
    if value.is_finite() {
        out.extend_from_slice(ryu::Buffer::new().format_finite(value).as_bytes());
    } else {
        write_non_finite(out, value.is_nan(), value.is_sign_negative());
    }
}

fn write_non_finite(out: &mut Vec<u8>, nan: bool, negative: bool) {
    out.extend_from_slice(match (nan, negative) {
        (true, _) => b"NaN".as_slice(),
        (false, false) => b"Infinity",
        (false, true) => b"-Infinity",
    });
}

/// A JSON string, or `{"b64": ...}` when asked for or when the bytes are not UTF-8.
fn write_string(out: &mut Vec<u8>, bytes: &[u8], binary: bool) {
    match std::str::from_utf8(bytes) {
        Ok(text) if !binary => write_json_str(out, text),
        _ => {
            out.extend_from_slice(b"{\"b64\":\"");
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(bytes)
                    .as_bytes(),
            );
            out.extend_from_slice(b"\"}");
        }
    }
}

/// Writes `text` as a JSON string literal.
pub fn write_json_str(out: &mut Vec<u8>, text: &str) {
    // Serialising a &str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits() -> DecodeLimits {
        DecodeLimits::default()
    }

    #[test]
    fn rows_stack_along_a_new_dimension() -> Result<(), DecodeError> {
        let a = json!([1.0, 2.0]);
        let b = json!([3.0, 4.0]);
        let tensor = decode_rows(&[&a, &b], DataType::F32, &limits())?;
        assert_eq!(tensor.shape(), &[2, 2]);
        assert_eq!(&*tensor.view::<f32>()?, &[1.0, 2.0, 3.0, 4.0]);
        Ok(())
    }

    #[test]
    fn ragged_arrays_are_refused() {
        let value = json!([[1, 2], [3]]);
        let err = decode_value(&value, DataType::I64, &limits())
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("ragged")));
        let a = json!([1, 2]);
        let b = json!([1, 2, 3]);
        assert!(decode_rows(&[&a, &b], DataType::I64, &limits()).is_err());
        let mixed = json!([[1, 2], 3]);
        assert!(decode_value(&mixed, DataType::I64, &limits()).is_err());
    }

    #[test]
    fn leaves_must_fit_the_dtype() {
        for (value, dtype) in [
            (json!(["x"]), DataType::F32),
            (json!([1.5]), DataType::I64),
            (json!([1]), DataType::Bool),
            (json!([300]), DataType::U8),
            (json!([-1]), DataType::U32),
            (json!([1]), DataType::String),
            (json!([{"b64": "!!"}]), DataType::String),
        ] {
            assert!(
                decode_value(&value, dtype, &limits()).is_err(),
                "{value} as {dtype}"
            );
        }
    }

    #[test]
    fn strings_and_b64() -> Result<(), DecodeError> {
        let value = json!(["hi", {"b64": "/wE="}]);
        let tensor = decode_value(&value, DataType::String, &limits())?;
        let expected = [Bytes::from_static(b"hi"), Bytes::from_static(&[0xff, 1])];
        assert_eq!(tensor.string_elements(), Some(&expected[..]));
        let mut out = Vec::new();
        write_tensor(&mut out, &tensor, None, false)?;
        // Bytes that are not UTF-8 come back as base64.
        assert_eq!(String::from_utf8_lossy(&out), r#"["hi",{"b64":"/wE="}]"#);
        Ok(())
    }

    #[test]
    fn writes_rows_and_non_finite_floats() -> Result<(), DecodeError> {
        let tensor = Tensor::from_vec(vec![2, 2], vec![1.5f32, f32::NAN, f32::INFINITY, -2.0])?;
        let mut out = Vec::new();
        write_tensor(&mut out, &tensor, Some(1), false)?;
        assert_eq!(String::from_utf8_lossy(&out), "[Infinity,-2.0]");
        out.clear();
        write_tensor(&mut out, &tensor, None, false)?;
        assert_eq!(String::from_utf8_lossy(&out), "[[1.5,NaN],[Infinity,-2.0]]");
        Ok(())
    }

    #[test]
    fn scalars_round_trip() -> Result<(), DecodeError> {
        let tensor = decode_value(&json!(7), DataType::I32, &limits())?;
        assert_eq!(tensor.shape(), &[] as &[usize]);
        let mut out = Vec::new();
        write_tensor(&mut out, &tensor, None, false)?;
        assert_eq!(out, b"7");
        Ok(())
    }
}
