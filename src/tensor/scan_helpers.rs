//! Threads that may help one request read a long JSON tensor, shared by every request.
//!
//! Reading a megabyte of JSON numbers takes milliseconds on one core. When other cores are
//! idle, the text is cut into pieces read at once; when other requests are decoding too,
//! extra threads would only take turns on the same cores. So helpers are leased from one
//! count, the CPUs the server may use less one, and a request that finds none free reads
//! alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The helpers free right now; [`ScanHelpers::none`] never has any.
#[derive(Debug, Clone)]
pub struct ScanHelpers {
    free: Option<Arc<AtomicUsize>>,
}

impl Default for ScanHelpers {
    fn default() -> Self {
        Self::none()
    }
}

impl ScanHelpers {
    /// A pool of `helpers` threads' worth of leases.
    pub fn new(helpers: usize) -> Self {
        Self {
            free: (helpers > 0).then(|| Arc::new(AtomicUsize::new(helpers))),
        }
    }

    /// No helpers: every text is read on the caller's thread.
    pub const fn none() -> Self {
        Self { free: None }
    }

    /// As many of `wanted` helpers as are free, held until the lease drops.
    pub fn lease(&self, wanted: usize) -> Lease<'_> {
        let Some(free) = self.free.as_deref() else {
            return Lease {
                free: None,
                count: 0,
            };
        };
        if wanted == 0 {
            return Lease {
                free: None,
                count: 0,
            };
        }
        let mut taken = 0;
        let _ = free.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
            taken = now.min(wanted);
            Some(now - taken)
        });
        Lease {
            free: Some(free),
            count: taken,
        }
    }
}

/// Helpers taken from a [`ScanHelpers`]; given back on drop.
#[derive(Debug)]
pub struct Lease<'a> {
    free: Option<&'a AtomicUsize>,
    count: usize,
}

impl Lease<'_> {
    /// How many helper threads this lease allows.
    pub fn count(&self) -> usize {
        self.count
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(free) = self.free {
            free.fetch_add(self.count, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_share_the_pool_and_give_it_back() {
        let helpers = ScanHelpers::new(3);
        let first = helpers.lease(2);
        assert_eq!(first.count(), 2);
        let second = helpers.lease(2);
        assert_eq!(second.count(), 1);
        assert_eq!(helpers.clone().lease(1).count(), 0);
        drop(first);
        assert_eq!(helpers.lease(5).count(), 2);
        drop(second);
        assert_eq!(helpers.lease(5).count(), 3);
        assert_eq!(helpers.lease(0).count(), 0);
        assert_eq!(ScanHelpers::none().lease(4).count(), 0);
        assert_eq!(ScanHelpers::new(0).lease(4).count(), 0);
    }
}
