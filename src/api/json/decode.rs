//! Tensors decoded straight from JSON text into the typed buffer the runtime receives.
//!
//! Request envelopes keep tensor data as borrowed raw JSON ([`RawValue`]). Once the dtype
//! (and, for KServe, the shape) is known, a serde visitor walks that text once: each number
//! is converted as it is read and pushed into a `Vec` of the element type, and the nesting is
//! checked as it goes. No `serde_json::Value` tree is built, so memory is the tensor itself
//! plus the nesting depth. serde_json bounds the depth (128 levels), so deep nesting is an
//! error, not a stack overflow.

use serde_json::value::RawValue;

use super::scan;
use super::shape;
use super::values::Values;
use super::walk::{walk, Nesting, State};
use crate::tensor::{
    checked_byte_len, element_count, DataType, DecodeError, DecodeLimits, ScanHelpers, Tensor,
};

/// Decodes KServe `data`: the elements in row-major order, flat or nested in any way, filling
/// the declared `shape`.
pub fn decode_flat(
    json: &RawValue,
    shape: Vec<usize>,
    dtype: DataType,
    limits: &DecodeLimits,
) -> Result<Tensor, DecodeError> {
    let count = checked_count(&shape, dtype, limits)?;
    let capacity = capacity(count, json.get());
    if let Some(values) =
        scan::flat_numbers(json.get(), dtype, count, capacity, &limits.scan_helpers)
    {
        return values.into_tensor(shape);
    }
    // Anything the fast path leaves (strings, literals, a count or a value that does not fit)
    // goes through the general walk, which accepts it or words the error.
    let mut state = State::new(dtype, capacity, Nesting::Free { max_leaves: count });
    walk(json, &mut state, 0)?;
    if state.leaves != count {
        return Err(DecodeError::ElementCountMismatch {
            shape,
            expected: count,
            actual: state.leaves,
        });
    }
    state.values.into_tensor(shape)
}

/// Decodes KServe `data` that no JSON parser has checked (a list lifted out of the body, see
/// `api/kserve/http/lift.rs`) through the number scanner alone, which checks its grammar.
/// Text the scanner does not take is an error here; the caller then decodes the whole body
/// the general way, which words the error.
pub fn decode_flat_unparsed(
    text: &str,
    shape: Vec<usize>,
    dtype: DataType,
    limits: &DecodeLimits,
) -> Result<Tensor, DecodeError> {
    let count = checked_count(&shape, dtype, limits)?;
    let capacity = capacity(count, text);
    match scan::flat_numbers(text, dtype, count, capacity, &limits.scan_helpers) {
        Some(values) => values.into_tensor(shape),
        None => Err(DecodeError::Malformed(format!(
            "data is not {count} numbers of dtype {dtype} in lists"
        ))),
    }
}

/// The element count of `shape`, once its byte size is known to be within the limits.
fn checked_count(
    shape: &[usize],
    dtype: DataType,
    limits: &DecodeLimits,
) -> Result<usize, DecodeError> {
    checked_byte_len(dtype, shape, limits)?;
    element_count(shape)
}

/// What to reserve for `count` elements spelled in `text`: every element takes at least two
/// bytes of text ("0,"), so the text, not the shape a client claims, bounds it.
fn capacity(count: usize, text: &str) -> usize {
    count.min(text.len() / 2 + 1)
}

/// Decodes one JSON value (nested arrays or a scalar) as a whole tensor; the shape is that of
/// the arrays, which must be rectangular.
pub fn decode_value(
    json: &RawValue,
    dtype: DataType,
    limits: &DecodeLimits,
) -> Result<Tensor, DecodeError> {
    match scan_rows(&[json.get()], false, dtype, limits) {
        Some(tensor) => Ok(tensor),
        None => walk_value(json, dtype, limits),
    }
}

/// [`decode_value`] of text no parser has checked (a list lifted out of a body) by the number
/// scanner alone: `None` when the scanner does not take it; the caller then decodes the
/// original body the general way, which words any error.
pub fn scan_value_text(text: &str, dtype: DataType, limits: &DecodeLimits) -> Option<Tensor> {
    scan_rows(&[text], false, dtype, limits)
}

/// [`decode_rows`] of rows some of which no parser has checked, by the number scanner alone,
/// as [`scan_value_text`].
pub fn scan_rows_text(rows: &[&str], dtype: DataType, limits: &DecodeLimits) -> Option<Tensor> {
    scan_rows(rows, true, dtype, limits)
}

/// [`decode_value`] through serde's visitor alone.
fn walk_value(
    json: &RawValue,
    dtype: DataType,
    limits: &DecodeLimits,
) -> Result<Tensor, DecodeError> {
    let mut state = State::new(dtype, 0, Nesting::rectangular());
    walk(json, &mut state, 0)?;
    state.finish(limits)
}

/// Decodes `rows` stacked along a new leading dimension (TF Serving's row format): each row
/// must have the shape of the first.
pub fn decode_rows(
    rows: &[&RawValue],
    dtype: DataType,
    limits: &DecodeLimits,
) -> Result<Tensor, DecodeError> {
    let texts: Vec<&str> = rows.iter().map(|row| row.get()).collect();
    match scan_rows(&texts, true, dtype, limits) {
        Some(tensor) => Ok(tensor),
        None => walk_rows(rows, dtype, limits),
    }
}

/// [`decode_rows`] through serde's visitor alone.
fn walk_rows(
    rows: &[&RawValue],
    dtype: DataType,
    limits: &DecodeLimits,
) -> Result<Tensor, DecodeError> {
    let mut state = State::new(dtype, 0, Nesting::rectangular());
    // The rows are the elements of an array at depth 0 that is not in the text.
    state.open(0)?;
    for row in rows {
        walk(row, &mut state, 1)?;
    }
    state.close(0, rows.len())?;
    state.finish(limits)
}

/// The fast path of [`decode_rows`] (`stacked`) and [`decode_value`]: rows of numbers in
/// rectangular lists of one shape, read by the number scanner once that shape is known.
/// `None` for anything else, including what the general walk would refuse, which then words
/// the error.
fn scan_rows(
    rows: &[&str],
    stacked: bool,
    dtype: DataType,
    limits: &DecodeLimits,
) -> Option<Tensor> {
    let row_shape = shape::rectangular(rows.first()?)?;
    let shape: Vec<usize> = if stacked {
        std::iter::once(rows.len())
            .chain(row_shape.iter().copied())
            .collect()
    } else {
        row_shape.clone()
    };
    let count = checked_count(&shape, dtype, limits).ok()?;
    let per_row = element_count(&row_shape).ok()?;
    // Only the first row's shape is known yet: the text of all rows, not that shape times
    // the number of rows, bounds what is reserved (every element takes at least two bytes).
    let text_len: usize = rows.iter().map(|row| row.len()).sum();
    let mut values = Values::with_capacity(dtype, count.min(text_len / 2 + 1));
    // A whole tensor in one text (TF Serving's columnar format) may be read in pieces on
    // helper threads; the rows of the row format are each too short to be worth it.
    let no_helpers = ScanHelpers::none();
    let helpers = match rows {
        [_] => &limits.scan_helpers,
        _ => &no_helpers,
    };
    for (index, &text) in rows.iter().enumerate() {
        if index > 0 && shape::rectangular(text)? != row_shape {
            return None;
        }
        if !values.append(scan::flat_numbers(text, dtype, per_row, per_row, helpers)?) {
            return None;
        }
    }
    values.into_tensor(shape).ok()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap_or_else(|err| panic!("{err}"))
    }

    fn limits() -> DecodeLimits {
        DecodeLimits::default()
    }

    fn error(result: Result<Tensor, DecodeError>) -> String {
        result.err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn the_scanned_rows_are_what_the_visitor_decodes() {
        let texts = [
            "7",
            "-0",
            "[1, 2, 3]",
            "[[1, 2], [3, 4]]",
            "[[1.5e3, -2], [3, 0.1]]",
            "[[[1]], [[2]]]",
            "[300, 1]",
            "[1.5]",
            "[-1]",
            "[18446744073709551615]",
            "[1e400]",
            "[[1, 2], [3]]",
            "[1, [2]]",
            "[]",
            "[[], []]",
            "[1, \"NaN\"]",
            "[true]",
            "[0.10000000149011612]",
        ];
        let dtypes = [
            DataType::F32,
            DataType::F64,
            DataType::I32,
            DataType::U8,
            DataType::I64,
            DataType::U64,
            DataType::F16,
            DataType::Bool,
        ];
        for dtype in dtypes {
            for first in texts {
                for second in texts {
                    let (a, b) = (raw(first), raw(second));
                    if let Some(fast) = scan_rows(&[a.get(), b.get()], true, dtype, &limits()) {
                        let slow = walk_rows(&[&a, &b], dtype, &limits());
                        assert_eq!(Ok(fast), slow, "{dtype} {first} {second}");
                    }
                }
                let a = raw(first);
                if let Some(fast) = scan_rows(&[a.get()], false, dtype, &limits()) {
                    assert_eq!(
                        Ok(fast),
                        walk_value(&a, dtype, &limits()),
                        "{dtype} {first}"
                    );
                }
            }
        }
        // A wide first row and many narrow ones (a 40 MB tensor by the first row's shape,
        // within the limits) are refused as ragged, having reserved no more than their text.
        let wide = raw(&format!("[{}]", vec!["1"; 1000].join(",")));
        let narrow = raw("[1]");
        let mut rows: Vec<&str> = vec![wide.get()];
        rows.extend(std::iter::repeat_n(narrow.get(), 10_000));
        assert!(scan_rows(&rows, true, DataType::F32, &limits()).is_none());
        // The usual case does take the fast path.
        let row = raw("[0.25, 0.5, 0.75]");
        assert!(scan_rows(&[row.get(), row.get()], true, DataType::F32, &limits()).is_some());
    }

    #[test]
    fn rows_stack_along_a_new_dimension() -> Result<(), DecodeError> {
        let (a, b) = (raw("[1.0, 2.0]"), raw("[3, 4]"));
        let tensor = decode_rows(&[&a, &b], DataType::F32, &limits())?;
        assert_eq!(tensor.shape(), &[2, 2]);
        assert_eq!(&*tensor.view::<f32>()?, &[1.0, 2.0, 3.0, 4.0]);
        Ok(())
    }

    #[test]
    fn ragged_arrays_are_refused() {
        for text in [
            "[[1, 2], [3]]",
            "[[1], [2, 3]]",
            "[[1, 2], 3]",
            "[1, [2]]",
            "[[], [1]]",
        ] {
            let err = error(decode_value(&raw(text), DataType::I64, &limits()));
            assert!(err.contains("ragged"), "{text}: {err}");
        }
        let (a, b) = (raw("[1, 2]"), raw("[1, 2, 3]"));
        assert!(decode_rows(&[&a, &b], DataType::I64, &limits()).is_err());
    }

    #[test]
    fn shapes_follow_the_arrays() -> Result<(), DecodeError> {
        for (text, shape) in [
            ("7", vec![]),
            ("[]", vec![0]),
            ("[[], []]", vec![2, 0]),
            ("[[[1], [2]]]", vec![1, 2, 1]),
        ] {
            let tensor = decode_value(&raw(text), DataType::I32, &limits())?;
            assert_eq!(tensor.shape(), &shape[..], "{text}");
        }
        Ok(())
    }

    #[test]
    fn flat_data_fills_the_declared_shape_whatever_the_nesting() -> Result<(), DecodeError> {
        let tensor = decode_flat(
            &raw("[[1, 2], [3, [4]]]"),
            vec![2, 2],
            DataType::U8,
            &limits(),
        )?;
        assert_eq!(tensor.bytes().map(|b| b.to_vec()), Some(vec![1, 2, 3, 4]));
        let err = error(decode_flat(
            &raw("[1, 2, 3]"),
            vec![2],
            DataType::U8,
            &limits(),
        ));
        assert!(err.contains("2 elements but 3"), "{err}");
        Ok(())
    }

    #[test]
    fn a_huge_declared_shape_reserves_nothing_the_text_cannot_fill() {
        let limits = DecodeLimits {
            max_tensor_bytes: usize::MAX,
            ..DecodeLimits::default()
        };
        let err = error(decode_flat(
            &raw("[1]"),
            vec![1 << 40],
            DataType::U8,
            &limits,
        ));
        assert!(err.contains("elements but 1"), "{err}");
    }

    #[test]
    fn leaves_must_fit_the_dtype() {
        for (text, dtype, found) in [
            (r#"["x"]"#, DataType::F32, "\"x\""),
            ("[1.5]", DataType::I64, "1.5"),
            ("[1]", DataType::Bool, "1"),
            ("[300]", DataType::U8, "300"),
            ("[-1]", DataType::U32, "-1"),
            ("[1]", DataType::String, "1"),
            ("[null]", DataType::F64, "null"),
            (r#"[{"a": 1}]"#, DataType::I8, "an object"),
            (
                r#"[{"b64": "AA==", "x": 1}]"#,
                DataType::String,
                "an object",
            ),
        ] {
            let err = error(decode_value(&raw(text), dtype, &limits()));
            assert!(
                err.contains("expected") && err.ends_with(found),
                "{text} as {dtype}: {err}"
            );
        }
        let err = error(decode_value(
            &raw(r#"[{"b64": "!!"}]"#),
            DataType::String,
            &limits(),
        ));
        assert!(err.contains("base64"), "{err}");
    }

    #[test]
    fn strings_and_b64() -> Result<(), DecodeError> {
        let tensor = decode_value(
            &raw(r#"["hi", {"b64": "/wE="}]"#),
            DataType::String,
            &limits(),
        )?;
        let expected = [Bytes::from_static(b"hi"), Bytes::from_static(&[0xff, 1])];
        assert_eq!(
            tensor.string_elements().map(crate::tensor::Strings::to_vec),
            Some(expected.to_vec())
        );
        Ok(())
    }

    #[test]
    fn non_finite_spellings_are_floats() -> Result<(), DecodeError> {
        let tensor = decode_value(
            &raw(r#"["NaN", "-Infinity", 1e308]"#),
            DataType::F64,
            &limits(),
        )?;
        let values = tensor.view::<f64>()?;
        assert!(values[0].is_nan() && values[1] == f64::NEG_INFINITY && values[2] == 1e308);
        Ok(())
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        // The envelope keeps such text as it is; the walk refuses it at serde_json's depth limit.
        let text = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        let err = error(decode_value(&raw(&text), DataType::I8, &limits()));
        assert!(err.contains("recursion"), "{err}");
        let err = error(decode_flat(&raw(&text), vec![1], DataType::I8, &limits()));
        assert!(err.contains("recursion"), "{err}");
    }

    #[test]
    fn tensors_beyond_the_limit_are_refused() {
        let limits = DecodeLimits {
            max_tensor_bytes: 8,
            ..DecodeLimits::default()
        };
        let err = error(decode_value(&raw("[1, 2, 3]"), DataType::F32, &limits));
        assert!(err.contains("limit"), "{err}");
        let err = error(decode_flat(
            &raw("[1, 2, 3]"),
            vec![3],
            DataType::F32,
            &limits,
        ));
        assert!(err.contains("limit"), "{err}");
    }
}
