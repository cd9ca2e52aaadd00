//! KServe v2 tensor encodings shared by HTTP and gRPC: datatype names, raw little-endian
//! bytes (BYTES as 4-byte length-prefixed elements), and gRPC's typed `contents`.

use bytes::{BufMut, Bytes, BytesMut};

use crate::proto::inference::InferTensorContents;
use crate::tensor::{
    element_count, BoolByte, DataType, DecodeError, Element, PrefixedLayout, Strings, Tensor,
};

/// The KServe / Triton name of a datatype.
pub fn datatype_name(dtype: DataType) -> &'static str {
    dtype.kserve_name()
}

/// The datatype a KServe name stands for.
pub fn parse_datatype(name: &str) -> Result<DataType, DecodeError> {
    DataType::ALL
        .into_iter()
        .find(|&dtype| datatype_name(dtype) == name)
        .ok_or_else(|| DecodeError::UnsupportedDtype(format!("datatype \"{name}\"")))
}

/// A tensor over raw bytes: fixed-size types use them in place; BYTES elements stay in them
/// too, with an offset each (see [`Strings::length_prefixed`]). The byte count must match the
/// shape exactly; for BYTES, decoding stops at the first element past the shape's count.
pub fn from_raw(dtype: DataType, shape: Vec<usize>, raw: Bytes) -> Result<Tensor, DecodeError> {
    if dtype != DataType::String {
        if dtype == DataType::Bool && raw.iter().any(|&b| b > 1) {
            return Err(DecodeError::Malformed(
                "BOOL data must be bytes of 0 or 1".into(),
            ));
        }
        return Tensor::dense(dtype, shape, raw);
    }
    let count = element_count(&shape)?;
    let strings = Strings::length_prefixed(raw, count)?;
    Tensor::from_strings(shape, strings)
}

/// What a BYTES tensor decoded from `raw` will make the server hold until its answer is
/// ready, checked against the shape without allocating; `None` for fixed-size types, which
/// are used in place and charged as the request's bytes.
pub fn raw_decoded_cost(
    dtype: DataType,
    shape: &[usize],
    raw: &[u8],
) -> Result<Option<u64>, DecodeError> {
    if dtype != DataType::String {
        return Ok(None);
    }
    let layout = PrefixedLayout::scan(raw, element_count(shape)?)?;
    Ok(Some(layout.decoded_cost()))
}

/// Size of a tensor's raw encoding.
pub fn raw_len(tensor: &Tensor) -> usize {
    match (tensor.bytes(), tensor.string_elements()) {
        (Some(bytes), _) => bytes.len(),
        (None, Some(strings)) => 4 * strings.len() + strings.payload_len(),
        (None, None) => 0,
    }
}

/// The raw encoding: the tensor's own buffer for fixed-size types (no copy), the
/// length-prefixed concatenation for BYTES.
pub fn to_raw(tensor: &Tensor) -> Bytes {
    match (tensor.bytes(), tensor.string_elements()) {
        (Some(bytes), _) => bytes.clone(),
        (None, Some(strings)) => {
            if let Some(raw) = strings.as_length_prefixed() {
                return raw;
            }
            let mut out = BytesMut::with_capacity(raw_len(tensor));
            for element in strings {
                // Elements come from the runtime or from a request that was itself limited in
                // size, so each fits in u32.
                out.put_u32_le(element.len() as u32);
                out.put_slice(element);
            }
            out.freeze()
        }
        (None, None) => Bytes::new(),
    }
}

/// A tensor from gRPC's typed `contents`, which must hold exactly one value per element.
pub fn from_contents(
    dtype: DataType,
    shape: Vec<usize>,
    contents: InferTensorContents,
) -> Result<Tensor, DecodeError> {
    fn typed<S: Copy + std::fmt::Display, T: Element>(
        values: Vec<S>,
        shape: Vec<usize>,
        field: &str,
        convert: impl Fn(S) -> Option<T>,
    ) -> Result<Tensor, DecodeError> {
        let count = element_count(&shape)?;
        if values.len() != count {
            return Err(DecodeError::Malformed(format!(
                "shape {shape:?} has {count} elements but {field} holds {} values",
                values.len()
            )));
        }
        let converted = values
            .into_iter()
            .map(|v| {
                convert(v).ok_or_else(|| {
                    DecodeError::Malformed(format!(
                        "{field} value {v} is out of range for {}",
                        T::DTYPE
                    ))
                })
            })
            .collect::<Result<Vec<T>, _>>()?;
        Tensor::from_vec(shape, converted)
    }
    let c = contents;
    match dtype {
        DataType::Bool => typed(c.bool_contents, shape, "bool_contents", |v| {
            Some(BoolByte(u8::from(v)))
        }),
        DataType::I8 => typed(c.int_contents, shape, "int_contents", |v| {
            i8::try_from(v).ok()
        }),
        DataType::I16 => typed(c.int_contents, shape, "int_contents", |v| {
            i16::try_from(v).ok()
        }),
        DataType::I32 => typed(c.int_contents, shape, "int_contents", Some),
        DataType::I64 => typed(c.int64_contents, shape, "int64_contents", Some),
        DataType::U8 => typed(c.uint_contents, shape, "uint_contents", |v| {
            u8::try_from(v).ok()
        }),
        DataType::U16 => typed(c.uint_contents, shape, "uint_contents", |v| {
            u16::try_from(v).ok()
        }),
        DataType::U32 => typed(c.uint_contents, shape, "uint_contents", Some),
        DataType::U64 => typed(c.uint64_contents, shape, "uint64_contents", Some),
        DataType::F32 => typed(c.fp32_contents, shape, "fp32_contents", Some),
        DataType::F64 => typed(c.fp64_contents, shape, "fp64_contents", Some),
        DataType::F16 | DataType::BF16 => Err(DecodeError::Malformed(format!(
            "{} has no typed contents field; send it in raw_input_contents",
            datatype_name(dtype)
        ))),
        DataType::String => {
            let count = element_count(&shape)?;
            if c.bytes_contents.len() != count {
                return Err(DecodeError::Malformed(format!(
                    "shape {shape:?} has {count} elements but bytes_contents holds {} values",
                    c.bytes_contents.len()
                )));
            }
            Tensor::strings(shape, c.bytes_contents)
        }
    }
}

/// The shape of a tensor as KServe's signed dimensions.
pub fn shape_i64(tensor: &Tensor) -> Vec<i64> {
    tensor.shape().iter().map(|&d| d as i64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatype_names_round_trip() {
        for dtype in DataType::ALL {
            assert_eq!(parse_datatype(datatype_name(dtype)).ok(), Some(dtype));
        }
        assert!(parse_datatype("FP8").is_err());
    }

    #[test]
    fn bytes_round_trip_through_length_prefixes() -> Result<(), DecodeError> {
        let strings = vec![
            Bytes::from_static(b"ab"),
            Bytes::new(),
            Bytes::from_static(&[0, 255]),
        ];
        let tensor = Tensor::strings(vec![3], strings)?;
        let raw = to_raw(&tensor);
        assert_eq!(raw.len(), raw_len(&tensor));
        assert_eq!(from_raw(DataType::String, vec![3], raw)?, tensor);
        Ok(())
    }

    #[test]
    fn malformed_bytes_are_refused() {
        let truncated = Bytes::from_static(&[5, 0, 0, 0, b'a']);
        assert!(from_raw(DataType::String, vec![1], truncated).is_err());
        let short_prefix = Bytes::from_static(&[1, 0]);
        assert!(from_raw(DataType::String, vec![1], short_prefix).is_err());
        let huge_count = Bytes::from_static(&[0, 0, 0, 0]);
        assert!(from_raw(DataType::String, vec![1_000_000_000], huge_count).is_err());
        let extra = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(from_raw(DataType::String, vec![1], extra).is_err());
    }

    #[test]
    fn bytes_decoding_stops_at_the_first_element_past_the_shape() {
        // One declared element, a million more, then a prefix claiming 4 GiB: a decoder that
        // read on would report the bad prefix (and would have made a million elements first).
        let mut raw = vec![0u8; 4 * 1_000_001];
        raw.extend_from_slice(&u32::MAX.to_le_bytes());
        let expected = DecodeError::BytesPastShape {
            count: 1,
            extra: 4_000_004,
        };
        assert_eq!(
            raw_decoded_cost(DataType::String, &[1], &raw),
            Err(expected.clone())
        );
        assert_eq!(
            from_raw(DataType::String, vec![1], Bytes::from(raw)),
            Err(expected)
        );
    }

    #[test]
    fn only_bytes_have_a_decoded_cost() -> Result<(), DecodeError> {
        let raw = [0u8; 16];
        assert_eq!(raw_decoded_cost(DataType::F32, &[4], &raw)?, None);
        let cost = raw_decoded_cost(DataType::String, &[2, 2], &raw)?;
        assert_eq!(
            cost,
            Some(4 * crate::tensor::strings::PREFIXED_ELEMENT_BYTES)
        );
        Ok(())
    }

    #[test]
    fn raw_fixed_types_are_used_in_place() -> Result<(), DecodeError> {
        let raw = Bytes::from(vec![0u8; 8]);
        let tensor = from_raw(DataType::F32, vec![2], raw.clone())?;
        assert_eq!(tensor.bytes().map(|b| b.as_ptr()), Some(raw.as_ptr()));
        assert!(from_raw(DataType::F32, vec![3], raw).is_err());
        assert!(from_raw(DataType::Bool, vec![1], Bytes::from_static(&[2])).is_err());
        Ok(())
    }

    #[test]
    fn typed_contents_need_one_value_per_element() -> Result<(), DecodeError> {
        let contents = InferTensorContents {
            fp32_contents: vec![1.0, 2.0],
            ..Default::default()
        };
        let tensor = from_contents(DataType::F32, vec![2], contents.clone())?;
        assert_eq!(&*tensor.view::<f32>()?, &[1.0, 2.0]);
        assert!(from_contents(DataType::F32, vec![3], contents).is_err());
        let ints = InferTensorContents {
            int_contents: vec![300],
            ..Default::default()
        };
        assert!(from_contents(DataType::I8, vec![1], ints).is_err());
        Ok(())
    }
}
