//! A shadow copy's record, written beside the logged request it copies: the same `id`, the
//! target's version, and `shadow` as its origin, so that a reader pairs the two answers.

use std::sync::Arc;
use std::time::SystemTime;

use crate::backend::NamedTensor;

use super::record::{PayloadRecord, SHADOW_ORIGIN};
use super::writer::PayloadWriter;

/// What a logged request hands its shadow copy, when `[logging] shadow = true`.
pub struct ShadowLog {
    pub writer: Arc<PayloadWriter>,
    /// The primary record's `id`.
    pub id: u64,
    pub signature: String,
}

impl ShadowLog {
    /// Offers the copy's record; like every record, it is dropped rather than waited for.
    /// The inputs are the copy's own (never a client's shared memory: such requests get no
    /// copy), so they are shared, not copied.
    pub fn write(
        self,
        model: &Arc<str>,
        version: u64,
        inputs: Vec<NamedTensor>,
        outputs: Vec<NamedTensor>,
    ) {
        let record = PayloadRecord {
            model: model.clone(),
            version: i64::try_from(version).unwrap_or(i64::MAX),
            signature: self.signature,
            id: self.id,
            timestamp: SystemTime::now(),
            sample: self.writer.config().sample,
            origin: SHADOW_ORIGIN,
            inputs,
            outputs,
        };
        self.writer.offer(record);
    }
}
