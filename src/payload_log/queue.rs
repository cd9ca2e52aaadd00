//! The records waiting for a writer's thread: a vector behind a mutex that requests push to
//! and the thread empties whole every few milliseconds.
//!
//! Requests never wake the thread. A channel wakes its receiver for each record, and each
//! wake is a futex call and a context switch: at 8,000 records a second that took a sixth of
//! the one core a server ran on. Emptying the queue on a short timer costs neither, and the
//! records still reach the file within the writer's flush interval.

use std::sync::{Mutex, PoisonError};

use super::record::PayloadRecord;

/// Records waiting for the thread, at most.
pub const QUEUE_RECORDS: usize = 4096;
/// Bytes of tensors waiting for the thread, at most.
pub const QUEUE_BYTES: usize = 64 << 20;

/// A record and the bytes it was charged.
pub type Queued = (PayloadRecord, usize);

#[derive(Default)]
pub struct RecordQueue {
    pending: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    records: Vec<Queued>,
    bytes: usize,
    closed: bool,
}

impl RecordQueue {
    /// Queues `record`, charged `bytes`, unless the queue is full or closed: why not, then.
    pub fn push(&self, record: PayloadRecord, bytes: usize) -> Result<(), &'static str> {
        let mut pending = self.locked();
        if pending.closed {
            return Err("the writer stopped");
        }
        if pending.records.len() >= QUEUE_RECORDS {
            return Err("the queue is full");
        }
        // One record larger than the whole budget still goes through an empty queue.
        if pending.bytes.saturating_add(bytes) > QUEUE_BYTES && !pending.records.is_empty() {
            return Err("the queue holds too many bytes");
        }
        pending.bytes += bytes;
        pending.records.push((record, bytes));
        Ok(())
    }

    /// Moves every queued record into `batch` (emptied first); whether the queue was closed
    /// by then, in which case nothing more will come.
    pub fn take(&self, batch: &mut Vec<Queued>) -> bool {
        batch.clear();
        let mut pending = self.locked();
        std::mem::swap(&mut pending.records, batch);
        pending.bytes = 0;
        pending.closed
    }

    /// Refuses records from now on; those queued are still taken.
    pub fn close(&self) {
        self.locked().closed = true;
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, Pending> {
        // Every change to `Pending` completes before anything that could panic.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    fn record() -> PayloadRecord {
        PayloadRecord {
            model: "m".into(),
            version: 1,
            signature: String::new(),
            id: 1,
            timestamp: SystemTime::now(),
            sample: 1.0,
            origin: "",
            inputs: vec![],
            outputs: vec![],
        }
    }

    #[test]
    fn records_are_refused_past_the_count_or_the_bytes_and_after_closing() {
        let queue = RecordQueue::default();
        assert!(
            queue.push(record(), QUEUE_BYTES + 1).is_ok(),
            "an empty queue takes one"
        );
        assert_eq!(
            queue.push(record(), 1),
            Err("the queue holds too many bytes")
        );
        let mut batch = Vec::new();
        assert!(!queue.take(&mut batch));
        assert_eq!(batch.len(), 1);
        for _ in 0..QUEUE_RECORDS {
            assert!(queue.push(record(), 1).is_ok());
        }
        assert_eq!(queue.push(record(), 1), Err("the queue is full"));
        queue.close();
        assert_eq!(queue.push(record(), 1), Err("the writer stopped"));
        assert!(queue.take(&mut batch), "closed");
        assert_eq!(batch.len(), QUEUE_RECORDS);
    }
}
