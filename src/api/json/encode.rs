//! Tensors written as nested JSON arrays, shared by the REST protocols (decoding is
//! `decode.rs`'s).
//!
//! Encoding writes straight into the response buffer (no intermediate `serde_json::Value`).
//! Non-finite floats are written as `NaN`, `Infinity` and `-Infinity`, as TF Serving does.

use base64::Engine;

use crate::tensor::{DataType, DecodeError, Strings, Tensor};

/// Writes every element of a tensor as one flat array (KServe's `data`).
pub fn write_flat(out: &mut Vec<u8>, tensor: &Tensor) -> Result<(), DecodeError> {
    let elements = Elements::of(tensor)?;
    out.reserve(elements.text_estimate(0, tensor.element_count()));
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
    out.reserve(elements.text_estimate(start, dims.iter().product()));
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
            elements.write_run(out, *next, 1, binary_strings);
            *next += 1;
        }
        // The innermost dimension is written as one run over a typed slice.
        Some((&len, [])) => {
            out.push(b'[');
            elements.write_run(out, *next, len, binary_strings);
            *next += len;
            out.push(b']');
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
    Str(&'t Strings),
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

    /// Bytes of JSON text that `count` elements from `start` are likely to need, so the
    /// output grows once rather than by repeated doubling.
    fn text_estimate(&self, start: usize, count: usize) -> usize {
        let per_element = match self {
            Self::Bool(_) => 6,
            Self::U8(_) | Self::I8(_) => 4,
            Self::U16(_) | Self::I16(_) | Self::F16(_) | Self::BF16(_) => 8,
            Self::U32(_) | Self::I32(_) | Self::F32(_) => 14,
            Self::U64(_) | Self::I64(_) | Self::F64(_) => 24,
            Self::Str(v) => {
                let bytes: usize = v
                    .range(start, start.saturating_add(count))
                    .map(<[u8]>::len)
                    .sum();
                return bytes.saturating_mul(4) / 3 + count.saturating_mul(12);
            }
        };
        count.saturating_mul(per_element)
    }

    /// Writes `len` elements from `start`, separated by commas.
    fn write_run(&self, out: &mut Vec<u8>, start: usize, len: usize, binary_strings: bool) {
        let range = start..start.saturating_add(len);
        match self {
            Self::Bool(v) => run(out, v.get(range), |out, &b| {
                out.extend_from_slice(if b != 0 { b"true" } else { b"false" })
            }),
            Self::U8(v) => run(out, v.get(range), |out, &n| write_int(out, n)),
            Self::U16(v) => run(out, v.get(range), |out, &n| write_int(out, n)),
            Self::U32(v) => run(out, v.get(range), |out, &n| write_int(out, n)),
            Self::U64(v) => run(out, v.get(range), |out, &n| write_int(out, n)),
            Self::I8(v) => run(out, v.get(range), |out, &n| write_int(out, n)),
            Self::I16(v) => run(out, v.get(range), |out, &n| write_int(out, n)),
            Self::I32(v) => run(out, v.get(range), |out, &n| write_int(out, n)),
            Self::I64(v) => run(out, v.get(range), |out, &n| write_int(out, n)),
            Self::F16(v) => run(out, v.get(range), |out, h| write_f32(out, h.to_f32())),
            Self::BF16(v) => run(out, v.get(range), |out, h| write_f32(out, h.to_f32())),
            Self::F32(v) => run(out, v.get(range), |out, &f| write_f32(out, f)),
            Self::F64(v) => run(out, v.get(range), |out, &f| write_f64(out, f)),
            Self::Str(v) => {
                let mut elements = v.range(range.start, range.end);
                if let Some(first) = elements.next() {
                    write_string(out, first, binary_strings);
                }
                for element in elements {
                    out.push(b',');
                    write_string(out, element, binary_strings);
                }
            }
        }
    }
}

/// Writes `items` separated by commas; nothing when the range was outside the tensor, which
/// its shape rules out.
#[inline]
fn run<T>(out: &mut Vec<u8>, items: Option<&[T]>, write: impl Fn(&mut Vec<u8>, &T)) {
    let Some((first, rest)) = items.unwrap_or_default().split_first() else {
        return;
    };
    write(out, first);
    for item in rest {
        out.push(b',');
        write(out, item);
    }
}

fn write_int<I: itoa::Integer>(out: &mut Vec<u8>, value: I) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

// zmij writes the same shortest round-trip digits as ryu, in about half the time.
#[inline]
fn write_f32(out: &mut Vec<u8>, value: f32) {
    if value.is_finite() {
        out.extend_from_slice(zmij::Buffer::new().format_finite(value).as_bytes());
    } else {
        write_non_finite(out, value.is_nan(), value.is_sign_negative());
    }
}

#[inline]
fn write_f64(out: &mut Vec<u8>, value: f64) {
    if value.is_finite() {
        out.extend_from_slice(zmij::Buffer::new().format_finite(value).as_bytes());
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
    use bytes::Bytes;

    use super::*;

    #[test]
    fn strings_that_are_not_utf8_come_back_as_base64() -> Result<(), DecodeError> {
        let strings = vec![Bytes::from_static(b"hi"), Bytes::from_static(&[0xff, 1])];
        let tensor = Tensor::strings(vec![2], strings)?;
        let mut out = Vec::new();
        write_tensor(&mut out, &tensor, None, false)?;
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
    fn scalars_are_written_bare() -> Result<(), DecodeError> {
        let tensor = Tensor::from_vec(vec![], vec![7i32])?;
        let mut out = Vec::new();
        write_tensor(&mut out, &tensor, None, false)?;
        assert_eq!(out, b"7");
        Ok(())
    }
}
