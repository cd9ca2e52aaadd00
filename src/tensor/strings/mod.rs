//! The elements of a string tensor, and what decoding them costs.
//!
//! A string tensor holds either one `Bytes` handle per element, as the protobuf and JSON
//! decoders make them, or its elements in one buffer with an offset each. The second form is
//! what length-prefixed data (KServe's raw BYTES, the binary extension, a shared-memory window)
//! and ONNX Runtime's outputs already are, so it costs 8 bytes per element instead of a
//! 32-byte handle, and the elements' bytes are never copied: a million empty strings in 4 MB
//! of length prefixes take 8 MB of offsets, not 32 MB of handles.
//!
//! - `prefixed`: the length-prefixed wire form (a 4-byte little-endian length, then the
//!   bytes), read without allocating, and what decoding it makes the server hold.
//! - `elements`: the [`Strings`] type itself, its two forms and their iterator.
//! - `traits`: equality, conversion and iteration as the standard traits spell them.

mod elements;
mod prefixed;
mod traits;

pub use elements::{Iter, Strings};
pub use prefixed::{
    PrefixedLayout, PREFIXED_ELEMENT_BYTES, PREFIXED_LONG_ELEMENT_BYTES, PREFIXED_PAYLOAD_COPIES,
};
