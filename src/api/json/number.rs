//! Reading one JSON number where it stands in the text, as serde_json would read it, for the
//! tensor data scanner (`api/json/scan.rs`).
//!
//! Most numbers take the fast reading: up to 19 significant digits, eight at a time, then
//! Clinger's exact path when the digits and the power of ten are exact in an `f64`. A float32
//! tensor skips the correctly rounded `f64` too when it cannot change the `f32`. Everything
//! else takes the standard library's correctly rounded parser, so every value is the one
//! serde_json reads (and, for float32, that value converted with `as f32`).

use std::ops::Range;

use super::values::{FromLeaf, Leaf};

/// Powers of ten that an `f64` holds exactly.
const EXACT_POWERS: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The number that starts at `start` as serde_json would read it (`U64` for a non-negative
/// integer that fits, `I64` for a negative one, otherwise the nearest `f64`), and where it
/// ends. `None` for a number serde_json refuses (one beyond the `f64` range).
///
/// Clients mostly send numbers of up to 19 significant digits (a float32 printed as a
/// float64 has 17), whose digits fit a `u64` whatever they are: those are read eight digits
/// at a time without overflow checks. Longer ones take [`number_exact`].
#[cfg(test)]
fn number(text: &str, start: usize) -> Option<(Leaf<'static>, usize)> {
    let (number, end) = read(text, start)?;
    Some((number.into_leaf(text, start..end)?, end))
}

/// A number as read: its digits when they took the fast reading, or what the general one
/// made of them.
pub enum Number {
    Digits(Digits),
    Leaf(Leaf<'static>),
}

impl Number {
    #[inline]
    fn into_leaf(self, text: &str, spelling: Range<usize>) -> Option<Leaf<'static>> {
        match self {
            Self::Digits(digits) => digits.leaf(text, spelling),
            Self::Leaf(leaf) => Some(leaf),
        }
    }
}

/// The number that starts at `start`, unconverted, and where it ends (see [`number`]).
// Inlined into each element type's loop: it runs once per element.
#[inline(always)]
pub fn read(text: &str, start: usize) -> Option<(Number, usize)> {
    let bytes = text.as_bytes();
    let mut i = start;
    let negative = bytes.get(i) == Some(&b'-');
    if negative {
        i += 1;
    }
    let mut significand = 0u64;
    let integer_start = i;
    i = digits(bytes, i, &mut significand);
    let mut digit_count = i - integer_start;
    integer_spelled_right(bytes, integer_start, i)?;
    let mut fraction_digits = 0usize;
    if bytes.get(i) == Some(&b'.') {
        let fraction_start = i + 1;
        i = digits(bytes, fraction_start, &mut significand);
        fraction_digits = i - fraction_start;
        if fraction_digits == 0 {
            return None;
        }
        digit_count += fraction_digits;
    }
    if digit_count > MAX_FAST_DIGITS {
        return number_exact(text, start).map(|(leaf, end)| (Number::Leaf(leaf), end));
    }
    let (exponent, end) = exponent(bytes, i)?;
    let digits = Digits {
        negative,
        significand,
        fraction_digits,
        exponent,
    };
    Some((Number::Digits(digits), end))
}

/// JSON's integer part: at least one digit, and no leading zero unless it is the only one.
#[inline]
fn integer_spelled_right(bytes: &[u8], start: usize, end: usize) -> Option<()> {
    let leading_zero = bytes.get(start) == Some(&b'0');
    (end > start && !(leading_zero && end > start + 1)).then_some(())
}

/// Any 19 decimal digits fit a `u64` (10^19 - 1 < 2^64).
const MAX_FAST_DIGITS: usize = 19;

/// Reads the digits from `i` into `significand` (wrapping: the caller discards the value
/// when there were too many) and returns where they end.
#[inline]
fn digits(bytes: &[u8], mut i: usize, significand: &mut u64) -> usize {
    while let Some(eight) = bytes.get(i..i + 8).and_then(eight_digits) {
        *significand = significand.wrapping_mul(100_000_000).wrapping_add(eight);
        i += 8;
    }
    while let Some(&d @ b'0'..=b'9') = bytes.get(i) {
        *significand = significand
            .wrapping_mul(10)
            .wrapping_add(u64::from(d - b'0'));
        i += 1;
    }
    i
}

/// The value of eight ASCII digits, if all eight bytes are digits: the bytes are read as one
/// little-endian word and combined in pairs, then fours, then eights (three multiplications
/// instead of eight).
#[inline]
fn eight_digits(chunk: &[u8]) -> Option<u64> {
    let word = u64::from_le_bytes(chunk.try_into().ok()?);
    // A byte is a digit when subtracting '0' does not borrow and adding 0x46 (so that ':'
    // and above reach 0x80) does not set its top bit.
    let less_zero = word.wrapping_sub(0x3030_3030_3030_3030);
    let above_nine = word.wrapping_add(0x4646_4646_4646_4646);
    if (less_zero | above_nine) & 0x8080_8080_8080_8080 != 0 {
        return None;
    }
    // Each byte now holds one digit, the first in the lowest byte.
    let pairs = less_zero.wrapping_mul(10).wrapping_add(less_zero >> 8);
    const LOW: u64 = 0x0000_00ff_0000_00ff;
    let fours_low = (pairs & LOW).wrapping_mul(100 + (1_000_000 << 32));
    let fours_high = ((pairs >> 16) & LOW).wrapping_mul(1 + (10_000 << 32));
    Some(u64::from((fours_low.wrapping_add(fours_high) >> 32) as u32))
}

/// The exponent part at `i` (`e`, a sign, digits), if any: its value (saturated far beyond
/// any exponent that matters) and where it ends; `None` when the `e` has no digits.
#[inline]
fn exponent(bytes: &[u8], mut i: usize) -> Option<(Option<i64>, usize)> {
    let Some(b'e' | b'E') = bytes.get(i) else {
        return Some((None, i));
    };
    i += 1;
    let negative = bytes.get(i) == Some(&b'-');
    if let Some(b'-' | b'+') = bytes.get(i) {
        i += 1;
    }
    let digits_start = i;
    let mut exponent = 0i64;
    while let Some(&d @ b'0'..=b'9') = bytes.get(i) {
        exponent = (exponent * 10 + i64::from(d - b'0')).min(1 << 32);
        i += 1;
    }
    if i == digits_start {
        return None;
    }
    Some((Some(if negative { -exponent } else { exponent }), i))
}

/// The general reading, which keeps the first digits while they fit a `u64` and marks the
/// rest as overflow, as serde_json does.
#[cold]
#[inline(never)]
fn number_exact(text: &str, start: usize) -> Option<(Leaf<'static>, usize)> {
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
    let integer_start = i;
    while let Some(&d @ b'0'..=b'9') = bytes.get(i) {
        push_digit(&mut significand, d);
        i += 1;
    }
    integer_spelled_right(bytes, integer_start, i)?;
    let mut fraction_digits = 0usize;
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        while let Some(&d @ b'0'..=b'9') = bytes.get(i) {
            push_digit(&mut significand, d);
            fraction_digits += 1;
            i += 1;
        }
        if fraction_digits == 0 {
            return None;
        }
    }
    let (exponent, end) = exponent(bytes, i)?;
    let spelling = text.get(start..end)?;
    if overflow {
        // serde_json reads an integer beyond 64 bits as a float too.
        return correctly_rounded(spelling).map(|leaf| (leaf, end));
    }
    let digits = Digits {
        negative,
        significand,
        fraction_digits,
        exponent,
    };
    digits.leaf(text, start..end).map(|leaf| (leaf, end))
}

/// A number's parts, its digits (without the point) held exactly.
pub struct Digits {
    negative: bool,
    significand: u64,
    fraction_digits: usize,
    exponent: Option<i64>,
}

impl Digits {
    /// The leaf serde_json reads from these digits, spelled `spelling`.
    #[inline]
    fn leaf(&self, text: &str, spelling: Range<usize>) -> Option<Leaf<'static>> {
        let Self {
            negative,
            significand,
            fraction_digits,
            exponent,
        } = *self;
        let Some(exponent) = exponent.or((fraction_digits > 0).then_some(0)) else {
            return Some(if !negative {
                Leaf::U64(significand)
            } else {
                // serde_json's rule: `-0` and magnitudes beyond i64 become floats.
                let value = (significand as i64).wrapping_neg();
                if value >= 0 {
                    Leaf::F64(-(significand as f64))
                } else {
                    Leaf::I64(value)
                }
            });
        };
        let scale = exponent - fraction_digits as i64;
        // Clinger's fast path: the significand and the power of ten are both exact in an
        // f64, so one multiplication or division rounds correctly.
        if significand <= 1 << 53 && scale.abs() <= 22 {
            let power = EXACT_POWERS.get(scale.unsigned_abs() as usize)?;
            let magnitude = if scale < 0 {
                significand as f64 / power
            } else {
                significand as f64 * power
            };
            return Some(Leaf::F64(if negative { -magnitude } else { magnitude }));
        }
        correctly_rounded(text.get(spelling)?)
    }

    /// The power of ten the significand is scaled by; `None` for an integer.
    #[inline]
    fn scale(&self) -> Option<i64> {
        let exponent = self.exponent.or((self.fraction_digits > 0).then_some(0))?;
        Some(exponent - self.fraction_digits as i64)
    }

    /// What serde_json's reading converted with `as f32` gives, when that can be told
    /// without the correctly rounded `f64`: for an integer, or when Clinger's path is exact,
    /// the same operations give the same `f64`; for 17 to 19 digits (a float32 printed as a
    /// float64) the quotient below is within 3 units in the last place of that `f64`, so
    /// when it is far from every point halfway between two `f32`s both round to the same
    /// `f32`. `None` near a halfway point and for anything else.
    #[inline]
    fn nearest_f32(&self) -> Option<f32> {
        let significand = self.significand as f64;
        let magnitude = match self.scale() {
            None | Some(0) => significand,
            Some(scale) => {
                let power = *EXACT_POWERS.get(scale.unsigned_abs() as usize)?;
                let quotient = if scale < 0 {
                    significand / power
                } else {
                    significand * power
                };
                if self.significand > 1 << 53 && near_f32_halfway(quotient) {
                    return None;
                }
                quotient
            }
        };
        let value = magnitude as f32;
        // Overflow to infinity is the general path's to word.
        value
            .is_finite()
            .then_some(if self.negative { -value } else { value })
    }
}

/// Whether `approx` is too close to a point halfway between two `f32`s for the exact value,
/// within 3 units in the last place of it, to be known to round as it does. The margin,
/// 2^-48 of the value, is 32 such units.
#[inline]
fn near_f32_halfway(approx: f64) -> bool {
    let nearest = approx as f32;
    let at = f64::from(nearest);
    // f32s and their halfway points are exact in an f64.
    let above = (at + f64::from(nearest.next_up())) / 2.0;
    let below = (at + f64::from(nearest.next_down())) / 2.0;
    let margin = approx / (1u64 << 48) as f64;
    !(above - approx > margin && approx - below > margin)
}

/// An element type the scanner fills from the numbers it reads.
pub trait FromNumber: FromLeaf {
    #[inline]
    fn from_number(number: Number, text: &str, spelling: Range<usize>) -> Option<Self> {
        Self::from_leaf(&number.into_leaf(text, spelling)?)
    }
}

impl FromNumber for u8 {}
impl FromNumber for u16 {}
impl FromNumber for u32 {}
impl FromNumber for u64 {}
impl FromNumber for i8 {}
impl FromNumber for i16 {}
impl FromNumber for i32 {}
impl FromNumber for i64 {}
impl FromNumber for half::f16 {}
impl FromNumber for half::bf16 {}
impl FromNumber for f64 {}

impl FromNumber for f32 {
    #[inline]
    fn from_number(number: Number, text: &str, spelling: Range<usize>) -> Option<Self> {
        if let Number::Digits(digits) = &number {
            if let Some(value) = digits.nearest_f32() {
                return Some(value);
            }
        }
        Self::from_leaf(&number.into_leaf(text, spelling)?)
    }
}

/// Everything else takes the standard library's correctly rounded parser.
#[inline(never)]
fn correctly_rounded(spelling: &str) -> Option<Leaf<'static>> {
    let value: f64 = spelling.parse().ok()?;
    value.is_finite().then_some(Leaf::F64(value))
}

#[cfg(test)]
mod tests;
