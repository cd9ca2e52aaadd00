//! The request memory budget: one pool for the memory that requests in flight take across
//! both ports (`--max-inflight-request-bytes`): decoded requests, and answers not yet sent.
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
//!
//! The answer itself is then charged by the transport ([`MemoryBudget::charge_answer`]) until its
//! bytes have been written to the socket: a client that never reads its answers would
//! otherwise pin them, uncounted, for as long as it keeps its connection. That charge is
//! never refused (the answer exists already); it may take the pool past its total, and then
//! every request that needs the budget is refused until the answers are sent or cut off.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;

use super::refusal::Refusal;
use crate::request::{DecodedFootprint, MemoryHold, MemoryPool, MemoryRefused};

/// The default budget: 2 GiB. Room for 16 requests of the largest default body
/// (`--max-request-bytes`, 64 MiB, charged twice) at once, and for any ordinary mix; a single
/// request that would expand past it (13 million strings, say) is refused outright.
pub const DEFAULT_MAX_INFLIGHT_REQUEST_BYTES: u64 = 2 << 30;

/// The budget both ports share.
#[derive(Clone)]
pub struct MemoryBudget {
    /// `None`: no budget.
    pool: Option<Arc<Pool>>,
    /// Bytes ever charged, with a budget or without: how the idle trimmer
    /// (`repository::idle_trim`) tells that requests came and went without a hook on the
    /// request path. One relaxed add per charge.
    charged: Arc<AtomicU64>,
}

struct Pool {
    /// Bytes charged now; may exceed `total` through [`MemoryBudget::hold`]. The exported
    /// gauge is the count itself, so that it costs nothing more to keep.
    used: Gauge,
    total: u64,
}

impl Pool {
    fn used(&self) -> u64 {
        u64::try_from(self.used.get()).unwrap_or(0)
    }

    /// Applies `change` to the count; `None` leaves it as it is.
    fn update(&self, change: impl Fn(u64) -> Option<u64>) -> Result<u64, u64> {
        let as_count = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
        self.used
            .inner()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                change(u64::try_from(used).unwrap_or(0)).map(as_count)
            })
            .map(|before| u64::try_from(before).unwrap_or(0))
            .map_err(|now| u64::try_from(now).unwrap_or(0))
    }
}

impl MemoryBudget {
    /// `bytes == 0` turns the budget off.
    pub fn new(bytes: u64) -> Self {
        Self::counted_in(bytes, Gauge::default())
    }

    /// A budget of `bytes` whose use `gauge` shows.
    pub fn counted_in(bytes: u64, gauge: Gauge) -> Self {
        Self {
            pool: (bytes > 0).then(|| {
                Arc::new(Pool {
                    used: gauge,
                    total: bytes,
                })
            }),
            charged: Arc::default(),
        }
    }

    /// Charges `footprint` (absent for a body not read in full, which is not charged), or
    /// refuses when it is more than is left.
    pub fn charge(&self, footprint: Option<DecodedFootprint>) -> Result<MemoryCharge, Refusal> {
        let Some(DecodedFootprint(bytes)) = footprint else {
            return Ok(MemoryCharge::none());
        };
        self.charged.fetch_add(bytes, Ordering::Relaxed);
        let Some(pool) = &self.pool else {
            return Ok(MemoryCharge::none());
        };
        let taken =
            pool.update(|used| used.checked_add(bytes).filter(|after| *after <= pool.total));
        match taken {
            Ok(_) => Ok(MemoryCharge {
                pool: Some(pool.clone()),
                bytes,
            }),
            Err(used) => Err(Refusal::MemoryExhausted {
                needed: bytes,
                left: pool.total.saturating_sub(used),
                total: pool.total,
            }),
        }
    }

    /// Charges `bytes` of an answer being sent: they are held already, so the charge is
    /// taken whatever is left.
    pub fn charge_answer(&self, bytes: u64) -> MemoryCharge {
        self.charged.fetch_add(bytes, Ordering::Relaxed);
        let Some(pool) = self.pool.as_ref().filter(|_| bytes > 0) else {
            return MemoryCharge::none();
        };
        // Saturating: a count that wrapped would let everything in.
        let _ = pool.update(|used| Some(used.saturating_add(bytes)));
        MemoryCharge {
            pool: Some(pool.clone()),
            bytes,
        }
    }

    /// Bytes charged now (0 without a budget).
    pub fn used(&self) -> u64 {
        self.pool.as_ref().map_or(0, |pool| pool.used())
    }

    /// Bytes charged since the budget was made, including those already given back and
    /// those charged without a budget (wrapping, which takes 16 EiB).
    pub fn charged_since_start(&self) -> u64 {
        self.charged.load(Ordering::Relaxed)
    }

    /// Bytes not charged now (`u64::MAX` without a budget).
    #[cfg(test)]
    fn left(&self) -> u64 {
        self.pool
            .as_ref()
            .map_or(u64::MAX, |pool| pool.total.saturating_sub(pool.used()))
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
                total: self.pool.as_ref().map_or(0, |pool| pool.total),
            }),
        }
    }
}

impl std::fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("total", &self.pool.as_ref().map(|pool| pool.total))
            .finish_non_exhaustive()
    }
}

/// A share of the [`MemoryBudget`], given back when dropped.
#[derive(Debug, Default)]
pub struct MemoryCharge {
    pool: Option<Arc<Pool>>,
    bytes: u64,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("total", &self.total).finish()
    }
}

impl MemoryCharge {
    /// A charge of nothing.
    pub fn none() -> Self {
        Self::default()
    }

    /// The bytes this charge holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Takes `other` into this charge: both are given back together.
    pub fn absorb(&mut self, mut other: MemoryCharge) {
        if other.bytes == 0 {
            return;
        }
        if self.pool.is_none() {
            *self = other;
            return;
        }
        // Both come from the one budget of the server.
        self.bytes = self.bytes.saturating_add(std::mem::take(&mut other.bytes));
    }
}

impl Drop for MemoryCharge {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            if self.bytes > 0 {
                let _ = pool.update(|used| Some(used.saturating_sub(self.bytes)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNIT: u64 = 1024;

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
        assert_eq!(MemoryBudget::new(0).charge_answer(u64::MAX).bytes(), 0);
    }

    #[test]
    fn answers_held_past_the_total_refuse_requests_until_they_are_given_back() {
        let budget = MemoryBudget::new(10 * UNIT);
        let mut answers = budget.charge_answer(8 * UNIT);
        answers.absorb(budget.charge_answer(4 * UNIT));
        assert_eq!(budget.used(), 12 * UNIT);
        assert!(matches!(
            budget.charge(Some(DecodedFootprint(1))),
            Err(Refusal::MemoryExhausted { left: 0, .. })
        ));
        drop(answers);
        assert_eq!(budget.used(), 0);
        assert!(budget.charge(Some(DecodedFootprint(10 * UNIT))).is_ok());
    }

    #[test]
    fn every_charge_counts_as_activity_with_or_without_a_budget() {
        let budget = MemoryBudget::new(10 * UNIT);
        drop(budget.charge(Some(DecodedFootprint(4 * UNIT))));
        // Refused, but its body was read: the memory was touched all the same.
        assert!(budget.charge(Some(DecodedFootprint(20 * UNIT))).is_err());
        drop(budget.charge_answer(UNIT));
        assert!(budget.charge(None).is_ok());
        assert_eq!(budget.charged_since_start(), 25 * UNIT);
        assert_eq!(budget.used(), 0);

        let unlimited = MemoryBudget::new(0);
        drop(unlimited.charge(Some(DecodedFootprint(3 * UNIT))));
        drop(unlimited.charge_answer(UNIT));
        assert_eq!(unlimited.charged_since_start(), 4 * UNIT);
    }
}
