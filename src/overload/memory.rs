//! The request memory budget: one pool for the memory decoded requests take across every
//! request in flight on both ports (`--max-inflight-request-bytes`).
//!
//! `--max-request-bytes` bounds what a client sends, not what it expands to: 38 MB of empty
//! protobuf strings decode into 20 million handles, a JSON array into a tree of values. The
//! transport estimates each body's decoded footprint from its bytes before anything decodes
//! it ([`DecodedFootprint`]); admission charges that here and refuses at once (429 /
//! RESOURCE_EXHAUSTED) a request that would go past what is left, never waiting, like the
//! concurrency limit beside it. The charge is held by a [`MemoryCharge`] until the request's
//! answer is ready, by which time its decoded form has been dropped.
//!
//! What only a decoded shape tells (a raw BYTES input's element count, an input in shared
//! memory) is charged to the same budget by the adapter that reads it, through the request's
//! context ([`crate::request::MemoryPool`]), before the tensor is built; same rule.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::refusal::Refusal;
use crate::request::{DecodedFootprint, MemoryHold, MemoryPool, MemoryRefused};

/// The default budget: 2 GiB. Room for 16 requests of the largest default body
/// (`--max-request-bytes`, 64 MiB, charged twice) at once, and for any ordinary mix; a single
/// request that would expand past it (13 million strings, say) is refused outright.
pub const DEFAULT_MAX_INFLIGHT_REQUEST_BYTES: u64 = 2 << 30;

/// The budget is counted in KiB, so that it fits a semaphore's permits.
const UNIT: u64 = 1024;

/// The budget both ports share.
#[derive(Clone)]
pub struct MemoryBudget {
    /// One permit per KiB; `None`: no budget.
    units: Option<Arc<Semaphore>>,
    total: u64,
}

impl MemoryBudget {
    /// `bytes == 0` turns the budget off.
    pub fn new(bytes: u64) -> Self {
        let units = (bytes / UNIT).min(Semaphore::MAX_PERMITS as u64);
        Self {
            units: (bytes > 0).then(|| Arc::new(Semaphore::new(units as usize))),
            total: units.saturating_mul(UNIT),
        }
    }

    /// Charges `footprint` (absent for a body not read in full, which is not charged), or
    /// refuses when it is more than is left.
    pub fn charge(&self, footprint: Option<DecodedFootprint>) -> Result<MemoryCharge, Refusal> {
        let (Some(units), Some(DecodedFootprint(bytes))) = (&self.units, footprint) else {
            return Ok(MemoryCharge { _permit: None });
        };
        let refusal = || Refusal::MemoryExhausted {
            needed: bytes,
            left: (units.available_permits() as u64).saturating_mul(UNIT),
            total: self.total,
        };
        let needed = u32::try_from(bytes.div_ceil(UNIT)).map_err(|_| refusal())?;
        match units.clone().try_acquire_many_owned(needed) {
            Ok(permit) => Ok(MemoryCharge {
                _permit: Some(permit),
            }),
            Err(_) => Err(refusal()),
        }
    }

    /// Bytes not charged to any request now (the whole budget when there is none).
    #[cfg(test)]
    fn left(&self) -> u64 {
        self.units.as_ref().map_or(u64::MAX, |units| {
            (units.available_permits() as u64).saturating_mul(UNIT)
        })
    }
}

/// What an adapter charges once a request's decoded form is known (see
/// [`crate::request::MemoryPool`]): the same budget, the same rule.
impl MemoryPool for MemoryBudget {
    fn hold(&self, bytes: u64) -> Result<MemoryHold, MemoryRefused> {
        match self.charge(Some(DecodedFootprint(bytes))) {
            Ok(charge) => Ok(MemoryHold::new(charge)),
            Err(Refusal::MemoryExhausted {
                needed,
                left,
                total,
            }) => Err(MemoryRefused {
                needed,
                left,
                total,
            }),
            // `charge` refuses for memory only.
            Err(_) => Err(MemoryRefused {
                needed: bytes,
                left: 0,
                total: self.total,
            }),
        }
    }
}

impl std::fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("total", &self.total)
            .finish_non_exhaustive()
    }
}

/// A request's share of the [`MemoryBudget`], given back when dropped.
#[derive(Debug)]
pub struct MemoryCharge {
    _permit: Option<OwnedSemaphorePermit>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_that_would_go_past_what_is_left_is_refused_and_the_charge_comes_back() {
        let budget = MemoryBudget::new(10 * UNIT);
        let first = budget.charge(Some(DecodedFootprint(6 * UNIT)));
        assert!(first.is_ok());
        let refused = budget.charge(Some(DecodedFootprint(5 * UNIT)));
        assert!(matches!(
            refused,
            Err(Refusal::MemoryExhausted { needed, left, total })
                if needed == 5 * UNIT && left == 4 * UNIT && total == 10 * UNIT
        ));
        drop(first);
        assert_eq!(budget.left(), 10 * UNIT);
        assert!(budget.charge(Some(DecodedFootprint(10 * UNIT))).is_ok());
    }

    #[test]
    fn a_footprint_past_any_budget_is_refused_not_wrapped() {
        let budget = MemoryBudget::new(10 * UNIT);
        assert!(budget.charge(Some(DecodedFootprint(u64::MAX))).is_err());
        assert_eq!(budget.left(), 10 * UNIT);
    }

    #[test]
    fn holds_for_decoded_data_draw_on_the_same_budget() {
        let budget = MemoryBudget::new(10 * UNIT);
        let admitted = budget.charge(Some(DecodedFootprint(4 * UNIT)));
        let held = budget.hold(5 * UNIT);
        assert!(admitted.is_ok() && held.is_ok());
        assert_eq!(
            budget.hold(2 * UNIT).err(),
            Some(MemoryRefused {
                needed: 2 * UNIT,
                left: UNIT,
                total: 10 * UNIT
            })
        );
        drop(held);
        assert_eq!(budget.left(), 6 * UNIT);
    }

    #[test]
    fn unread_bodies_and_a_zero_budget_are_not_charged() {
        assert!(MemoryBudget::new(10 * UNIT).charge(None).is_ok());
        assert!(MemoryBudget::new(0)
            .charge(Some(DecodedFootprint(u64::MAX)))
            .is_ok());
    }
}
