//! Inputs sent as raw bytes (gRPC `raw_input_contents`, the HTTP binary extension, a
//! shared-memory window) made into tensors, with what a BYTES input holds once decoded charged
//! to the request memory budget before anything is built for it.
//!
//! Fixed-size inputs are used in place, so the bytes admission charged for the body are all
//! they take. A BYTES input's cost depends on its element count, which only its declared shape
//! says: 32 MiB of zeros is one element or eight million, and each element costs an offset
//! here and a string in the runtime. The data is first checked against the shape without
//! allocating (a malformed input is refused as such, whatever the budget), then the cost is
//! charged, then the offsets are allocated.

use bytes::Bytes;

use super::codec;
use crate::error::Error;
use crate::request::{HeldMemory, RequestContext};
use crate::tensor::{DataType, Tensor};

/// Input `name`'s tensor from `raw`, its decoded cost charged through `context` into `held`.
pub fn raw_input(
    name: &str,
    dtype: DataType,
    shape: Vec<usize>,
    raw: Bytes,
    context: Option<&RequestContext>,
    held: &mut HeldMemory,
) -> Result<Tensor, Error> {
    let cost = codec::raw_decoded_cost(dtype, &shape, &raw).map_err(|e| e.in_input(name))?;
    if let (Some(cost), Some(context)) = (cost, context) {
        context
            .hold_memory(cost, held)
            .map_err(|source| Error::InputMemory {
                input: name.to_owned(),
                source,
            })?;
    }
    Ok(codec::from_raw(dtype, shape, raw).map_err(|e| e.in_input(name))?)
}
