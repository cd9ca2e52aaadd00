//! What shadow copies hold, and the bound on it.
//!
//! A copy keeps the request's inputs and the primary's answer alive after the primary is done
//! with them, and makes an answer of its own when it runs: memory no request in flight owns
//! any more. So each copy is charged, once, what it will hold at its peak (its inputs, the
//! primary's outputs, and as much again for its own outputs), both to the request memory
//! budget (`--max-inflight-request-bytes`, through the request's context) and to the copies'
//! own byte bound ([`QueuedBytes`]); a copy that fits either not is dropped, never waited for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::backend::NamedTensor;
use crate::tensor::TensorData;

/// Bytes of copies queued or running, at most: room for a copy of the largest default request
/// (`--max-request-bytes`, 64 MiB: its inputs, the primary's answer and its own, 192 MiB)
/// with some to spare. The request memory budget bounds them too.
pub const SHADOW_QUEUE_BYTES: u64 = 256 << 20;

/// What one element of a string tensor costs besides its bytes: a 32-byte handle, or an
/// offset in a packed buffer; the larger, since either may be what it holds.
const STRING_ELEMENT_BYTES: u64 = 32;

/// Bytes the data of `tensors` holds: dense bytes as they are, strings with their handles.
pub fn tensors_bytes(tensors: &[NamedTensor]) -> u64 {
    tensors
        .iter()
        .map(|(name, tensor)| {
            let data = match tensor.data() {
                TensorData::Dense(bytes) => bytes.len() as u64,
                TensorData::Strings(strings) => (strings.payload_len() as u64)
                    .saturating_add(STRING_ELEMENT_BYTES.saturating_mul(strings.len() as u64)),
            };
            data.saturating_add(name.len() as u64)
        })
        .fold(0u64, u64::saturating_add)
}

/// What a copy holds at its peak: its inputs, the primary's outputs, and its own outputs,
/// which are the primary's again in size (the same signature on the same inputs).
pub fn copy_bytes(inputs: &[NamedTensor], primary: &[NamedTensor]) -> u64 {
    let outputs = tensors_bytes(primary);
    tensors_bytes(inputs).saturating_add(outputs.saturating_mul(2))
}

/// The bytes of the copies queued or running, bounded.
#[derive(Debug, Clone)]
pub struct QueuedBytes {
    used: Arc<AtomicU64>,
    limit: u64,
}

impl QueuedBytes {
    pub fn new(limit: u64) -> Self {
        Self {
            used: Arc::default(),
            limit,
        }
    }

    /// Takes `bytes` for a copy until its [`Ticket`] is dropped, or `None` when they would
    /// take the total past the bound.
    pub fn take(&self, bytes: u64) -> Option<Ticket> {
        let limit = self.limit;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|after| *after <= limit)
            })
            .ok()?;
        Some(Ticket {
            used: self.used.clone(),
            bytes,
        })
    }

    /// Bytes taken now.
    #[cfg(test)]
    fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

/// One copy's share of [`QueuedBytes`], given back when the copy is done or dropped.
#[derive(Debug)]
pub struct Ticket {
    used: Arc<AtomicU64>,
    bytes: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let bytes = self.bytes;
        // Never below zero: every ticket took its bytes first.
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    #[test]
    fn tickets_take_the_bound_and_give_it_back() {
        let queued = QueuedBytes::new(100);
        let first = queued.take(60);
        assert!(first.is_some());
        assert!(queued.take(41).is_none(), "past the bound");
        let second = queued.take(40);
        assert!(second.is_some());
        assert_eq!(queued.used(), 100);
        drop(first);
        assert_eq!(queued.used(), 40);
        assert!(
            queued.take(u64::MAX).is_none(),
            "an overflow is refused, not wrapped"
        );
        drop(second);
        assert_eq!(queued.used(), 0);
    }

    #[test]
    fn a_copy_is_charged_its_inputs_and_two_answers() -> Result<(), crate::tensor::DecodeError> {
        let dense = Tensor::from_vec(vec![4], vec![1.0f32; 4])?;
        let strings = Tensor::strings(vec![2], vec![bytes::Bytes::from_static(b"abc"); 2])?;
        let inputs = vec![("x".to_owned(), dense.clone())];
        let outputs = vec![("y".to_owned(), strings)];
        assert_eq!(tensors_bytes(&inputs), 16 + 1);
        assert_eq!(tensors_bytes(&outputs), 2 * (3 + 32) + 1);
        assert_eq!(copy_bytes(&inputs, &outputs), 17 + 2 * 71);
        Ok(())
    }
}
