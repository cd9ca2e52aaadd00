//! The response cache, as Triton's: answers of models that enable `response_cache`, kept in
//! one byte-bounded store for the server (`--cache-config local,size=BYTES`) and found again
//! by every byte of the request.
//!
//! - [`key`]: a request's identity (model, load, signature, inputs, requested outputs), and
//!   the inputs copied once into it, so that what runs is what was keyed.
//! - [`store`]: the least-recently-used store, bounded in bytes, verifying whole keys.
//! - [`CacheScope`]: one loaded version's share of the store; dropping the version's last
//!   holder drops its entries, so a reload never answers from the old load.

pub mod key;
pub mod store;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use key::{KeyParts, RequestKey};
pub use store::{Answer, ResponseStore, StoreUsage};

/// The server's cache: its store and the numbering of loads that use it.
pub struct ResponseCache {
    store: Arc<ResponseStore>,
    next_scope: AtomicU64,
}

impl ResponseCache {
    /// A cache of at most `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self {
            store: Arc::new(ResponseStore::new(capacity)),
            next_scope: AtomicU64::new(1),
        }
    }

    /// A share of the store for one newly loaded version.
    pub fn scope(&self) -> CacheScope {
        CacheScope {
            id: self.next_scope.fetch_add(1, Ordering::Relaxed),
            store: self.store.clone(),
        }
    }

    pub fn store(&self) -> &ResponseStore {
        &self.store
    }
}

/// One loaded version's entries in the store. Held by the version; when the version retires
/// and its last request finishes, the drop frees its entries at once.
pub struct CacheScope {
    id: u64,
    store: Arc<ResponseStore>,
}

impl CacheScope {
    /// This load's number, part of every key it stores.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn store(&self) -> &ResponseStore {
        &self.store
    }
}

impl std::fmt::Debug for CacheScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheScope").field("id", &self.id).finish()
    }
}

impl Drop for CacheScope {
    fn drop(&mut self) {
        self.store.drop_scope(self.id);
    }
}
