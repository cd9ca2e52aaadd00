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
//! The text is a [`serde_json::value::RawValue`], already checked to be valid JSON, so the
//! scanner does not check the grammar again: a `,` or `]` can only sit where JSON allows it.

use super::json_values::{FromLeaf, Leaf, Values};
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

fn scan<T: FromLeaf>(text: &str, count: usize, capacity: usize) -> Option<Vec<T>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(capacity.min(count));
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        match byte {
            b'-' | b'0'..=b'9' => {
                let (leaf, end) = number(text, i)?;
                if out.len() == count {
                    return None;
                }
                out.push(T::from_leaf(&leaf)?);
                i = end;
                continue;
            }
            b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return None;
                }
            }
            b']' => depth = depth.saturating_sub(1),
            b',' | b' ' | b'\n' | b'\r' | b'\t' => {}
            _ => return None,
        }
        i += 1;
    }
    (out.len() == count).then_some(out)
}

/// Powers of ten that an `f64` holds exactly.
const EXACT_POWERS: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The number that starts at `start` as serde_json would read it (`U64` for a non-negative
/// integer that fits, `I64` for a negative one, otherwise the nearest `f64`), and where it
/// ends. `None` for a number serde_json refuses (one beyond the `f64` range).
#[inline]
fn number(text: &str, start: usize) -> Option<(Leaf<'static>, usize)> {
    let bytes = text.as_bytes();
    let mut i = start;
    let negative = bytes.get(i) == Some(&b'-');
    if negative {
        i += 1;
    }
    // The digits as one integer while it fits a u64, as serde_json keeps them.
    let mut significand = 0u64;
    let mut overflow = false;
    let mut push_digit = |significand: &mut u64, d: u8| match significand
        .checked_mul(10)
        .and_then(|s| s.checked_add(u64::from(d - b'0')))
    {
        Some(next) => *significand = next,
        None => overflow = true,
    };
    while let Some(&d @ b'0'..=b'9') = bytes.get(i) {
        push_digit(&mut significand, d);
        i += 1;
    }
    let mut fraction_digits = 0usize;
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        while let Some(&d @ b'0'..=b'9') = bytes.get(i) {
            push_digit(&mut significand, d);
            fraction_digits += 1;
            i += 1;
        }
    }
    let mut exponent = 0i64;
    let mut has_exponent = false;
    if let Some(b'e' | b'E') = bytes.get(i) {
        has_exponent = true;
        i += 1;
        let exponent_negative = bytes.get(i) == Some(&b'-');
        if let Some(b'-' | b'+') = bytes.get(i) {
            i += 1;
        }
        while let Some(&d @ b'0'..=b'9') = bytes.get(i) {
            // Saturates far beyond any exponent that matters, so it cannot overflow.
            exponent = (exponent * 10 + i64::from(d - b'0')).min(1 << 32);
            i += 1;
        }
        if exponent_negative {
            exponent = -exponent;
        }
    }
    if fraction_digits == 0 && !has_exponent && !overflow {
        let leaf = if !negative {
            Leaf::U64(significand)
        } else {
            // serde_json's rule: `-0` and magnitudes beyond i64 become floats.
            let value = (significand as i64).wrapping_neg();
            if value >= 0 {
                Leaf::F64(-(significand as f64))
            } else {
                Leaf::I64(value)
            }
        };
        return Some((leaf, i));
    }
    let scale = exponent - fraction_digits as i64;
    // Clinger's fast path: the significand and the power of ten are both exact in an f64, so
    // one multiplication or division rounds correctly.
    if !overflow && significand <= 1 << 53 && scale.abs() <= 22 {
        let power = EXACT_POWERS.get(scale.unsigned_abs() as usize)?;
        let magnitude = if scale < 0 {
            significand as f64 / power
        } else {
            significand as f64 * power
        };
        return Some((Leaf::F64(if negative { -magnitude } else { magnitude }), i));
    }
    // Everything else takes the standard library's correctly rounded parser.
    let value: f64 = text.get(start..i)?.parse().ok()?;
    value.is_finite().then_some((Leaf::F64(value), i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f64_of(text: &str) -> Option<f64> {
        match number(text, 0)?.0 {
            Leaf::F64(f) => Some(f),
            Leaf::U64(n) => Some(n as f64),
            Leaf::I64(n) => Some(n as f64),
            _ => None,
        }
    }

    #[test]
    fn numbers_read_as_serde_json_reads_them() {
        for text in [
            "0",
            "-0",
            "1",
            "0.501",
            "-1.25e-3",
            "1E5",
            "123456789012345678",
            "1.7976931348623157e308",
            "5e-324",
            "0.1",
            "3.4028235e38",
            "9007199254740993",
            "18446744073709551616",
            "-9223372036854775809",
            "12345678901234567890123",
            "0.000000000000000000000000001",
            "2.2250738585072011e-308",
            "1e-400",
            "0e999999",
        ] {
            let expected: serde_json::Value =
                serde_json::from_str(text).unwrap_or_else(|err| panic!("{text}: {err}"));
            let expected = expected.as_f64().unwrap_or_else(|| panic!("{text}"));
            let got = f64_of(text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(got.to_bits(), expected.to_bits(), "{text}");
        }
        assert!(
            f64_of("1e400").is_none(),
            "out of range is left to serde_json's error"
        );
    }

    #[test]
    fn integers_keep_their_kind() {
        assert!(matches!(number("7", 0), Some((Leaf::U64(7), 1))));
        assert!(matches!(number("-7]", 0), Some((Leaf::I64(-7), 2))));
        assert!(matches!(number("-0", 0), Some((Leaf::F64(f), 2)) if f.is_sign_negative()));
        assert!(matches!(
            number("18446744073709551615", 0),
            Some((Leaf::U64(u64::MAX), 20))
        ));
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
