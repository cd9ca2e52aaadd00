//! The typed buffer a JSON tensor decodes into, and the conversion of each JSON leaf to the
//! element type (the same rules for KServe and TF Serving).

use bytes::Bytes;

use crate::tensor::{BoolByte, DataType, DecodeError, Element, Tensor};

/// One scalar as the JSON text spelled it.
#[derive(Debug, Clone)]
pub enum Leaf<'a> {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str(&'a str),
    /// The decoded contents of `{"b64": "..."}`.
    Binary(Bytes),
    /// Any other object.
    Object,
}

impl Leaf<'_> {
    #[inline]
    fn unsigned(&self) -> Option<u64> {
        match *self {
            Self::U64(n) => Some(n),
            _ => None,
        }
    }

    #[inline]
    fn signed(&self) -> Option<i64> {
        match *self {
            Self::U64(n) => i64::try_from(n).ok(),
            Self::I64(n) => Some(n),
            _ => None,
        }
    }

    #[inline]
    fn float(&self) -> Option<f64> {
        match *self {
            Self::F64(f) => Some(f),
            Self::U64(n) => Some(n as f64),
            Self::I64(n) => Some(n as f64),
            Self::Str(s) => non_finite(s),
            _ => None,
        }
    }

    /// How the leaf reads in an error message.
    fn describe(&self) -> String {
        match self {
            Self::Null => "null".to_owned(),
            Self::Bool(b) => b.to_string(),
            Self::U64(n) => n.to_string(),
            Self::I64(n) => n.to_string(),
            Self::F64(f) => serde_json::Number::from_f64(*f)
                .map(|n| n.to_string())
                .unwrap_or_else(|| f.to_string()),
            Self::Str(s) => format!("\"{}\"", s.chars().take(32).collect::<String>()),
            Self::Binary(_) | Self::Object => "an object".to_owned(),
        }
    }
}

/// TF Serving accepts the non-finite spellings as strings too. Kept out of line so that
/// [`Leaf::float`] stays small enough to inline into the number loops.
#[cold]
fn non_finite(spelling: &str) -> Option<f64> {
    match spelling {
        "NaN" => Some(f64::NAN),
        "Infinity" | "inf" => Some(f64::INFINITY),
        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// The elements decoded so far, in the element type of the tensor.
pub enum Values {
    Bool(Vec<BoolByte>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F16(Vec<half::f16>),
    BF16(Vec<half::bf16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Str(Vec<Bytes>),
}

impl Values {
    pub fn with_capacity(dtype: DataType, capacity: usize) -> Self {
        match dtype {
            DataType::Bool => Self::Bool(Vec::with_capacity(capacity)),
            DataType::U8 => Self::U8(Vec::with_capacity(capacity)),
            DataType::U16 => Self::U16(Vec::with_capacity(capacity)),
            DataType::U32 => Self::U32(Vec::with_capacity(capacity)),
            DataType::U64 => Self::U64(Vec::with_capacity(capacity)),
            DataType::I8 => Self::I8(Vec::with_capacity(capacity)),
            DataType::I16 => Self::I16(Vec::with_capacity(capacity)),
            DataType::I32 => Self::I32(Vec::with_capacity(capacity)),
            DataType::I64 => Self::I64(Vec::with_capacity(capacity)),
            DataType::F16 => Self::F16(Vec::with_capacity(capacity)),
            DataType::BF16 => Self::BF16(Vec::with_capacity(capacity)),
            DataType::F32 => Self::F32(Vec::with_capacity(capacity)),
            DataType::F64 => Self::F64(Vec::with_capacity(capacity)),
            DataType::String => Self::Str(Vec::with_capacity(capacity)),
        }
    }

    pub fn dtype(&self) -> DataType {
        match self {
            Self::Bool(_) => DataType::Bool,
            Self::U8(_) => DataType::U8,
            Self::U16(_) => DataType::U16,
            Self::U32(_) => DataType::U32,
            Self::U64(_) => DataType::U64,
            Self::I8(_) => DataType::I8,
            Self::I16(_) => DataType::I16,
            Self::I32(_) => DataType::I32,
            Self::I64(_) => DataType::I64,
            Self::F16(_) => DataType::F16,
            Self::BF16(_) => DataType::BF16,
            Self::F32(_) => DataType::F32,
            Self::F64(_) => DataType::F64,
            Self::Str(_) => DataType::String,
        }
    }

    /// Converts `leaf` to the element type and appends it, or says what was expected.
    pub fn push(&mut self, leaf: Leaf<'_>) -> Result<(), DecodeError> {
        fn put<T: FromLeaf>(out: &mut Vec<T>, leaf: &Leaf<'_>) -> bool {
            T::from_leaf(leaf).map(|v| out.push(v)).is_some()
        }
        let pushed = match self {
            Self::Bool(out) => put(out, &leaf),
            Self::U8(out) => put(out, &leaf),
            Self::U16(out) => put(out, &leaf),
            Self::U32(out) => put(out, &leaf),
            Self::U64(out) => put(out, &leaf),
            Self::I8(out) => put(out, &leaf),
            Self::I16(out) => put(out, &leaf),
            Self::I32(out) => put(out, &leaf),
            Self::I64(out) => put(out, &leaf),
            Self::F16(out) => put(out, &leaf),
            Self::BF16(out) => put(out, &leaf),
            Self::F32(out) => put(out, &leaf),
            Self::F64(out) => put(out, &leaf),
            Self::Str(out) => put(out, &leaf),
        };
        if pushed {
            Ok(())
        } else {
            Err(wrong_type(&leaf, self.dtype()))
        }
    }

    /// Appends `more`, which must hold the same element type; `false` when it does not.
    pub fn append(&mut self, more: Values) -> bool {
        match (self, more) {
            (Self::Bool(a), Self::Bool(b)) => a.extend(b),
            (Self::U8(a), Self::U8(b)) => a.extend(b),
            (Self::U16(a), Self::U16(b)) => a.extend(b),
            (Self::U32(a), Self::U32(b)) => a.extend(b),
            (Self::U64(a), Self::U64(b)) => a.extend(b),
            (Self::I8(a), Self::I8(b)) => a.extend(b),
            (Self::I16(a), Self::I16(b)) => a.extend(b),
            (Self::I32(a), Self::I32(b)) => a.extend(b),
            (Self::I64(a), Self::I64(b)) => a.extend(b),
            (Self::F16(a), Self::F16(b)) => a.extend(b),
            (Self::BF16(a), Self::BF16(b)) => a.extend(b),
            (Self::F32(a), Self::F32(b)) => a.extend(b),
            (Self::F64(a), Self::F64(b)) => a.extend(b),
            (Self::Str(a), Self::Str(b)) => a.extend(b),
            _ => return false,
        }
        true
    }

    pub fn into_tensor(self, shape: Vec<usize>) -> Result<Tensor, DecodeError> {
        fn dense<T: Element>(shape: Vec<usize>, values: Vec<T>) -> Result<Tensor, DecodeError> {
            Tensor::from_vec(shape, values)
        }
        match self {
            Self::Bool(v) => dense(shape, v),
            Self::U8(v) => dense(shape, v),
            Self::U16(v) => dense(shape, v),
            Self::U32(v) => dense(shape, v),
            Self::U64(v) => dense(shape, v),
            Self::I8(v) => dense(shape, v),
            Self::I16(v) => dense(shape, v),
            Self::I32(v) => dense(shape, v),
            Self::I64(v) => dense(shape, v),
            Self::F16(v) => dense(shape, v),
            Self::BF16(v) => dense(shape, v),
            Self::F32(v) => dense(shape, v),
            Self::F64(v) => dense(shape, v),
            Self::Str(v) => Tensor::strings(shape, v),
        }
    }
}

/// An element type and the JSON leaves it accepts (the same rules for every decoder).
pub trait FromLeaf: Sized {
    fn from_leaf(leaf: &Leaf<'_>) -> Option<Self>;
}

/// Integers take integer leaves in range; `U64` and `I64` are what serde_json reads them as.
macro_rules! from_unsigned {
    ($($t:ty),*) => {$(
        impl FromLeaf for $t {
            #[inline]
            fn from_leaf(leaf: &Leaf<'_>) -> Option<Self> {
                leaf.unsigned().and_then(|n| n.try_into().ok())
            }
        }
    )*};
}

macro_rules! from_signed {
    ($($t:ty),*) => {$(
        impl FromLeaf for $t {
            #[inline]
            fn from_leaf(leaf: &Leaf<'_>) -> Option<Self> {
                leaf.signed().and_then(|n| n.try_into().ok())
            }
        }
    )*};
}

from_unsigned!(u8, u16, u32, u64);
from_signed!(i8, i16, i32, i64);

impl FromLeaf for BoolByte {
    fn from_leaf(leaf: &Leaf<'_>) -> Option<Self> {
        match leaf {
            Leaf::Bool(b) => Some(BoolByte(u8::from(*b))),
            _ => None,
        }
    }
}

impl FromLeaf for half::f16 {
    #[inline]
    fn from_leaf(leaf: &Leaf<'_>) -> Option<Self> {
        leaf.float().map(half::f16::from_f64)
    }
}

impl FromLeaf for half::bf16 {
    #[inline]
    fn from_leaf(leaf: &Leaf<'_>) -> Option<Self> {
        leaf.float().map(half::bf16::from_f64)
    }
}

impl FromLeaf for f32 {
    #[inline]
    fn from_leaf(leaf: &Leaf<'_>) -> Option<Self> {
        leaf.float().map(|f| f as f32)
    }
}

impl FromLeaf for f64 {
    #[inline]
    fn from_leaf(leaf: &Leaf<'_>) -> Option<Self> {
        leaf.float()
    }
}

impl FromLeaf for Bytes {
    fn from_leaf(leaf: &Leaf<'_>) -> Option<Self> {
        match leaf {
            Leaf::Str(s) => Some(Bytes::copy_from_slice(s.as_bytes())),
            Leaf::Binary(bytes) => Some(bytes.clone()),
            _ => None,
        }
    }
}

fn wrong_type(leaf: &Leaf<'_>, dtype: DataType) -> DecodeError {
    let expected = match dtype {
        DataType::Bool => "true or false",
        DataType::String => "a string or {\"b64\": ...}",
        DataType::F16 | DataType::BF16 | DataType::F32 | DataType::F64 => "a number",
        _ => "an integer in range",
    };
    DecodeError::Malformed(format!(
        "expected {expected} for dtype {dtype}, got {}",
        leaf.describe()
    ))
}
