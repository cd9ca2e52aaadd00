//! The fast path for tensor data that is nothing but numbers in arrays, which is what clients
//! send almost always.
//!
//! serde's visitor costs a call and a dispatch per element; this scanner reads the bytes in one
//! loop, parses each number where it stands and pushes it into a `Vec` of the element type.
//! It gives up (returns `None`) on anything it does not handle, a string, a literal, an
//! object, a number that does not fit the dtype, too many or too few elements, deep nesting,
//! and the caller then runs the general decoder, which accepts the same text or words the
//! error. So the fast path never changes an answer; it only makes the common one cheaper.
//!
//! The scanner checks the JSON grammar of what it reads (where `[`, `,` and `]` may stand,
//! and each number's spelling), so it can read text no JSON parser has seen: the KServe
//! decoder lifts large `data` arrays out of a body before parsing the rest
//! (`api/kserve/infer_lift.rs`) and gives them straight to this scanner. Text it refuses is
//! never half-accepted: the caller runs the general decoder, which words the error.

use super::json_number::{read, FromNumber};
use super::json_values::Values;
use crate::tensor::DataType;

/// Nesting deeper than this is left to the general decoder, which enforces serde_json's depth
/// limit and words its error.
const MAX_DEPTH: usize = 64;

/// The elements of `text` (numbers in arrays nested in any way) in the element type of
/// `dtype`, if there are exactly `count` of them and each converts; `None` otherwise.
pub fn flat_numbers(text: &str, dtype: DataType, count: usize, capacity: usize) -> Option<Values> {
    Some(match dtype {
        DataType::U8 => Values::U8(scan(text, count, capacity)?),
        DataType::U16 => Values::U16(scan(text, count, capacity)?),
        DataType::U32 => Values::U32(scan(text, count, capacity)?),
        DataType::U64 => Values::U64(scan(text, count, capacity)?),
        DataType::I8 => Values::I8(scan(text, count, capacity)?),
        DataType::I16 => Values::I16(scan(text, count, capacity)?),
        DataType::I32 => Values::I32(scan(text, count, capacity)?),
        DataType::I64 => Values::I64(scan(text, count, capacity)?),
        DataType::F16 => Values::F16(scan(text, count, capacity)?),
        DataType::BF16 => Values::BF16(scan(text, count, capacity)?),
        DataType::F32 => Values::F32(scan(text, count, capacity)?),
        DataType::F64 => Values::F64(scan(text, count, capacity)?),
        // Booleans and strings are rare and small enough for the general decoder.
        DataType::Bool | DataType::String => return None,
    })
}

fn scan<T: FromNumber>(text: &str, count: usize, capacity: usize) -> Option<Vec<T>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(capacity.min(count));
    let mut depth = 0usize;
    // Whether the grammar wants a value next: at the start, after `[` and after `,`.
    let mut want_value = true;
    // Whether the last token was `[`, so that `]` may close an empty list.
    let mut opened = false;
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        match byte {
            b'-' | b'0'..=b'9' if want_value => {
                let (number, end) = read(text, i)?;
                if out.len() == count {
                    return None;
                }
                out.push(T::from_number(number, text, i..end)?);
                (want_value, opened) = (false, false);
                i = end;
                continue;
            }
            b'[' if want_value => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return None;
                }
                opened = true;
            }
            b']' if depth > 0 && (opened || !want_value) => {
                depth -= 1;
                (want_value, opened) = (false, false);
            }
            b',' if depth > 0 && !want_value => want_value = true,
            b' ' | b'\n' | b'\r' | b'\t' => {}
            _ => return None,
        }
        i += 1;
    }
    (out.len() == count && depth == 0 && !want_value).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_is_not_json_is_refused_not_read() {
        for text in [
            "", "[", "]", "[1,]", "[,1]", "[1 2]", "[1,,2]", "[[1]2]", "[1][2]", "1 2", "[01]",
            "[-]", "[1.]", "[.5]", "[1e]", "[1e+]", "[+1]", "[1-2]", "[1.5.3]", "[[1],]", "[]]",
            "[[]", "-", "[1]]", "[0x1]",
        ] {
            assert!(
                flat_numbers(text, DataType::F64, 1, 1).is_none()
                    && flat_numbers(text, DataType::F64, 2, 2).is_none()
                    && flat_numbers(text, DataType::F64, 0, 0).is_none(),
                "{text:?}"
            );
            assert!(
                serde_json::from_str::<serde_json::Value>(text).is_err() || !text.starts_with('['),
                "{text:?} is JSON"
            );
        }
        for (text, count) in [("[]", 0), ("[[], []]", 0), (" [ 1 , [ 2 ] ] ", 2), ("7", 1)] {
            assert!(
                flat_numbers(text, DataType::F64, count, count).is_some(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn anything_unusual_is_left_to_the_general_decoder() {
        assert!(flat_numbers("[1, \"NaN\"]", DataType::F32, 2, 2).is_none());
        assert!(flat_numbers("[1, 2, 3]", DataType::F32, 2, 2).is_none());
        assert!(flat_numbers("[1, 2]", DataType::F32, 3, 3).is_none());
        assert!(flat_numbers("[1.5]", DataType::I32, 1, 1).is_none());
        assert!(flat_numbers("[300]", DataType::U8, 1, 1).is_none());
        assert!(flat_numbers("[null]", DataType::F64, 1, 1).is_none());
        let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert!(flat_numbers(&deep, DataType::I8, 1, 1).is_none());
        assert!(matches!(
            flat_numbers("[[1, -2], [3e0 ,\n4.5]]", DataType::F32, 4, 4),
            Some(Values::F32(v)) if v == [1.0, -2.0, 3.0, 4.5]
        ));
    }
}
