//! Where an entry stands in the queue's line: the order every index of the queue sorts by.

use crate::batcher::priority::Priority;

/// High priority ahead of default, then arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Place {
    /// 0 for high priority, 1 for default.
    rank: u8,
    arrival: u64,
}

impl Place {
    /// No entry stands before it.
    pub(super) const FRONT: Place = Place {
        rank: 0,
        arrival: 0,
    };

    /// The place of the `arrival`-th entry queued, of `priority`.
    pub(super) fn new(priority: Priority, arrival: u64) -> Self {
        let rank = match priority {
            Priority::High => 0,
            Priority::Default => 1,
        };
        Self { rank, arrival }
    }
}
