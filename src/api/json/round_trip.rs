//! Property tests of the JSON tensor codec: whatever is written decodes back to the same
//! tensor, for every dtype, in KServe's flat `data` and both TF Serving layouts; and no input
//! text, however broken, makes a decoder panic.
//!
//! The cases come from a fixed-seed generator, so a failure names a case that reproduces.

use bytes::Bytes;
use serde_json::value::RawValue;

use super::decode::{decode_flat, decode_rows, decode_value};
use super::encode::{write_flat, write_tensor};
use crate::tensor::{DataType, DecodeLimits, Element, Tensor};

/// xorshift64*: small, deterministic, good enough to spread test cases.
struct Cases(u64);

impl Cases {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }

    /// A shape of rank 1 to 3 with no empty dimension (an empty array hides the dimensions
    /// inside it, so `[0, 3]` and `[0]` are the same JSON).
    fn shape(&mut self) -> Vec<usize> {
        let rank = 1 + self.below(3);
        (0..rank).map(|_| 1 + self.below(4)).collect()
    }

    fn values<T: Element>(&mut self, count: usize, make: impl Fn(u64) -> T) -> Tensor {
        let values: Vec<T> = (0..count).map(|_| make(self.next())).collect();
        Tensor::from_vec(vec![count], values).unwrap_or_else(|err| panic!("{err}"))
    }

    fn tensor(&mut self, dtype: DataType, shape: Vec<usize>) -> Tensor {
        let count = shape.iter().product();
        let flat = match dtype {
            DataType::Bool => self.values(count, |r| crate::tensor::BoolByte((r & 1) as u8)),
            DataType::U8 => self.values(count, |r| r as u8),
            DataType::U16 => self.values(count, |r| r as u16),
            DataType::U32 => self.values(count, |r| r as u32),
            DataType::U64 => self.values(count, |r| r),
            DataType::I8 => self.values(count, |r| r as i8),
            DataType::I16 => self.values(count, |r| r as i16),
            DataType::I32 => self.values(count, |r| r as i32),
            DataType::I64 => self.values(count, |r| r as i64),
            DataType::F16 => self.values(count, |r| finite(half::f16::from_bits(r as u16))),
            DataType::BF16 => self.values(count, |r| finite(half::bf16::from_bits(r as u16))),
            DataType::F32 => self.values(count, |r| finite(f32::from_bits(r as u32))),
            DataType::F64 => self.values(count, |r| finite(f64::from_bits(r))),
            DataType::String => {
                let strings = (0..count)
                    .map(|_| {
                        let len = self.below(6);
                        Bytes::from((0..len).map(|_| self.next() as u8).collect::<Vec<u8>>())
                    })
                    .collect();
                return Tensor::strings(shape, strings).unwrap_or_else(|err| panic!("{err}"));
            }
        };
        let bytes = flat.bytes().cloned().unwrap_or_default();
        Tensor::dense(dtype, shape, bytes).unwrap_or_else(|err| panic!("{err}"))
    }
}

/// NaN never equals itself, so the generator maps it to a finite value; infinities stay.
fn finite<T: PartialEq + Copy + Default>(value: T) -> T {
    #[allow(clippy::eq_op)] // the test for NaN
    let is_number = value == value;
    if is_number {
        value
    } else {
        T::default()
    }
}

fn raw(text: Vec<u8>) -> Box<RawValue> {
    let text = String::from_utf8(text).unwrap_or_else(|err| panic!("{err}"));
    RawValue::from_string(text).unwrap_or_else(|err| panic!("{err}"))
}

#[test]
fn every_dtype_round_trips_in_every_layout() {
    let limits = DecodeLimits::default();
    let mut cases = Cases(0x9e37_79b9_7f4a_7c15);
    for case in 0..400 {
        let dtype = DataType::ALL[case % DataType::ALL.len()];
        let shape = cases.shape();
        let tensor = cases.tensor(dtype, shape.clone());
        let context = format!("case {case}: {dtype} {shape:?}");

        let mut text = Vec::new();
        write_flat(&mut text, &tensor).unwrap_or_else(|err| panic!("{context}: {err}"));
        let kserve = decode_flat(&raw(text), shape.clone(), dtype, &limits);
        assert_eq!(kserve.as_ref().ok(), Some(&tensor), "KServe {context}");

        let mut text = Vec::new();
        write_tensor(&mut text, &tensor, None, false).unwrap_or_else(|e| panic!("{e}"));
        let columns = decode_value(&raw(text), dtype, &limits);
        assert_eq!(columns.as_ref().ok(), Some(&tensor), "columns {context}");

        let rows: Vec<Box<RawValue>> = (0..shape[0])
            .map(|row| {
                let mut text = Vec::new();
                write_tensor(&mut text, &tensor, Some(row), case % 2 == 0)
                    .unwrap_or_else(|e| panic!("{e}"));
                raw(text)
            })
            .collect();
        let refs: Vec<&RawValue> = rows.iter().map(AsRef::as_ref).collect();
        let stacked = decode_rows(&refs, dtype, &limits);
        assert_eq!(stacked.as_ref().ok(), Some(&tensor), "rows {context}");
    }
}

#[test]
fn broken_text_is_an_error_never_a_panic() {
    let limits = DecodeLimits::default();
    let mut cases = Cases(0x0123_4567_89ab_cdef);
    let seeds: [&[u8]; 5] = [
        br#"[[1.5, -2, 3e7], [NaN, "Infinity", null]]"#,
        br#"[{"b64": "AAE="}, "x", [true, false]]"#,
        br#"{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}"#,
        br#"{"instances": [{"a": [1], "b": "s"}, {"a": [2], "b": {"b64": "/w=="}}]}"#,
        b"[[[[[[[[[[1]]]]]]]]]]",
    ];
    for case in 0..3000 {
        let mut text = seeds[case % seeds.len()].to_vec();
        for _ in 0..1 + cases.below(4) {
            let at = cases.below(text.len() as u64 + 1);
            match cases.below(3) {
                0 if at < text.len() => {
                    text.remove(at);
                }
                1 => text.insert(at, cases.next() as u8),
                _ => text.truncate(at),
            }
        }
        let _ = crate::api::kserve::http::decode_infer_body(&text, Bytes::new(), &limits);
        let mut rewritten = Vec::new();
        let parsed: Result<&RawValue, _> = super::body::parse_borrowed(&text, &mut rewritten);
        let Ok(value) = parsed else { continue };
        for dtype in DataType::ALL {
            let _ = decode_value(value, dtype, &limits);
            let _ = decode_rows(&[value, value], dtype, &limits);
            let _ = decode_flat(value, vec![2, 3], dtype, &limits);
        }
    }
}

#[test]
fn whole_kserve_bodies_round_trip_for_every_dtype() {
    use crate::api::kserve::{codec, InputData};
    let limits = DecodeLimits::default();
    let mut cases = Cases(0x5851_f42d_4c95_7f2d);
    for dtype in DataType::ALL {
        let shape = cases.shape();
        let tensor = cases.tensor(dtype, shape.clone());
        let mut body = format!(
            r#"{{"id": "r", "inputs": [{{"name": "x", "datatype": "{}", "shape": {shape:?}, "data": "#,
            codec::datatype_name(dtype)
        )
        .into_bytes();
        write_flat(&mut body, &tensor).unwrap_or_else(|err| panic!("{err}"));
        body.extend_from_slice(b"}]}");
        let request = crate::api::kserve::http::decode_infer_body(&body, Bytes::new(), &limits)
            .unwrap_or_else(|err| panic!("{dtype}: {err}"));
        match request.inputs.first().map(|input| &input.data) {
            Some(InputData::Inline(decoded)) => assert_eq!(decoded, &tensor, "{dtype}"),
            _ => panic!("{dtype}: no inline input"),
        }
    }
}
