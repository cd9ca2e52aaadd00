//! Rust element types and the byte-level conversions between them and packed tensor data.

use std::borrow::Cow;

use bytes::Bytes;

use super::DataType;

/// A fixed-size element type with a plain little-endian layout.
pub trait Element: bytemuck::Pod + Send + Sync + 'static {
    const DTYPE: DataType;
}

macro_rules! element {
    ($($ty:ty => $dtype:ident),* $(,)?) => {
        $(impl Element for $ty { const DTYPE: DataType = DataType::$dtype; })*
    };
}

element!(
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    half::f16 => F16, half::bf16 => BF16, f32 => F32, f64 => F64,
);

/// `bool` is not `Pod` (only 0 and 1 are valid), so booleans travel as bytes of 0/1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct BoolByte(pub u8);

impl Element for BoolByte {
    const DTYPE: DataType = DataType::Bool;
}

/// Owns a vector of elements and exposes it as bytes, so `Bytes` can hold it without a copy.
struct PodVec<T>(Vec<T>);

impl<T: bytemuck::Pod> AsRef<[u8]> for PodVec<T> {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// Moves `values` into a `Bytes` without copying the elements.
pub fn into_bytes<T: Element>(values: Vec<T>) -> Bytes {
    Bytes::from_owner(PodVec(values))
}

/// Reinterprets `bytes` as `T`s, copying only when the buffer is misaligned for `T`.
pub fn cast_or_copy<T: Element>(bytes: &[u8]) -> Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(slice) => Cow::Borrowed(slice),
        // Misaligned (a protobuf field can start at any offset): one copy into aligned memory.
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}
