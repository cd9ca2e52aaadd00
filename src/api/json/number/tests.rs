//! Unit tests of the number reader, against serde_json's reading of the same text.

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

/// A fixed sequence of pseudo-random numbers, the same on every run.
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

fn same_leaf(a: &Leaf<'_>, b: &Leaf<'_>) -> bool {
    match (a, b) {
        (Leaf::U64(x), Leaf::U64(y)) => x == y,
        (Leaf::I64(x), Leaf::I64(y)) => x == y,
        (Leaf::F64(x), Leaf::F64(y)) => x.to_bits() == y.to_bits(),
        _ => false,
    }
}

#[test]
fn the_eight_digit_reading_agrees_with_the_general_one_and_with_serde_json() {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
    let mut texts: Vec<String> = Vec::new();
    for _ in 0..20_000 {
        let bits = next();
        // float32 values as a float64 prints them (what Python clients send), float64
        // values, integers of every length, and numbers with exponents and leading zeros.
        let f = f32::from_bits(bits as u32);
        if f.is_finite() {
            texts.push(serde_json::to_string(&f64::from(f)).unwrap_or_default());
        }
        let d = f64::from_bits(bits);
        if d.is_finite() {
            texts.push(serde_json::to_string(&d).unwrap_or_default());
        }
        let digits = (bits % 24) as usize + 1;
        // JSON integers have no leading zero.
        let integer: String = (0..digits)
            .map(|at| {
                let digit = if at == 0 { 1 + next() % 9 } else { next() % 10 };
                char::from(b'0' + digit as u8)
            })
            .collect();
        texts.push(integer.clone());
        texts.push(format!("-{integer}"));
        texts.push(format!("0.{integer}e-{}", bits % 30));
        texts.push(format!("{integer}.{integer}E+{}", bits % 12));
    }
    for text in texts {
        let fast = number(&text, 0).map(|(leaf, end)| (format!("{leaf:?}"), end));
        let exact = number_exact(&text, 0).map(|(leaf, end)| (format!("{leaf:?}"), end));
        assert_eq!(fast, exact, "{text}");
        let Some((leaf, end)) = number(&text, 0) else {
            continue;
        };
        assert_eq!(end, text.len(), "{text}");
        let expected: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|err| panic!("{text}: {err}"));
        let expected = if let Some(n) = expected.as_u64() {
            Leaf::U64(n)
        } else if let Some(n) = expected.as_i64() {
            Leaf::I64(n)
        } else {
            Leaf::F64(expected.as_f64().unwrap_or_else(|| panic!("{text}")))
        };
        assert!(same_leaf(&leaf, &expected), "{text}: {leaf:?} {expected:?}");
    }
}

#[test]
fn eight_digits_are_read_only_when_all_eight_are_digits() {
    assert_eq!(eight_digits(b"12345678"), Some(12_345_678));
    assert_eq!(eight_digits(b"00000009"), Some(9));
    assert_eq!(eight_digits(b"99999999"), Some(99_999_999));
    for bad in [
        b"1234567.",
        b"/2345678",
        b"1234:678",
        b"1234567e",
        b"-1234567",
    ] {
        assert_eq!(eight_digits(bad), None, "{bad:?}");
    }
}

/// What the scanner's float32 reading of `text` gives.
fn f32_of(text: &str) -> Option<f32> {
    let (number, end) = read(text, 0)?;
    f32::from_number(number, text, 0..end)
}

#[test]
fn float32_reads_as_serde_json_then_as_f32_even_at_halfway_points() {
    let mut next = xorshift(0x51_7cc1_b727_220au64);
    let mut texts = Vec::new();
    for _ in 0..50_000 {
        let bits = next();
        let f = f32::from_bits(bits as u32);
        if !f.is_finite() {
            continue;
        }
        // As Python clients send float32 values, and as a float64 would print.
        texts.push(serde_json::to_string(&f64::from(f)).unwrap_or_default());
        texts.push(serde_json::to_string(&f64::from_bits(bits)).unwrap_or_default());
        // The exact point halfway to the next float32, and the float64s on either side:
        // the double rounding that `as f32` after the f64 does must be reproduced.
        let halfway = (f64::from(f) + f64::from(f.next_up())) / 2.0;
        for h in [halfway, halfway.next_up(), halfway.next_down()] {
            texts.push(format!("{h:e}"));
            texts.push(serde_json::to_string(&h).unwrap_or_default());
        }
        texts.push(format!("{}", bits % 100_000_000_000_000_000));
    }
    for text in texts {
        let Ok(expected) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let Some(expected) = expected.as_f64().map(|v| v as f32) else {
            continue;
        };
        match f32_of(&text) {
            Some(got) => assert_eq!(got.to_bits(), expected.to_bits(), "{text}"),
            // Only what overflows float32 is left to the general path's error.
            None => assert!(expected.is_infinite(), "{text}"),
        }
    }
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
