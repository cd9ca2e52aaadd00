//! The request path's side of payload logging: a draw decides first whether a request is
//! logged (nothing is copied when it is not), its inputs are captured once validated, and
//! after a successful run the record is offered to the model's writer, which never waits.

use std::sync::Arc;
use std::time::SystemTime;

use crate::backend::{NamedTensor, Signature};
use crate::batcher::ValidRequest;
use crate::payload_log::{owned_tensors, PayloadRecord, PayloadWriter, ShadowLog};

/// A sampled request's inputs, held until its answer.
pub struct Capture {
    writer: Arc<PayloadWriter>,
    signature: String,
    inputs: Vec<NamedTensor>,
    client_memory: bool,
    arrived: SystemTime,
}

/// The inputs of `request` when `writer` samples it; a view of the client's shared memory is
/// copied now, since the client may reuse the region once answered.
pub fn capture(
    writer: Option<Arc<PayloadWriter>>,
    signatures: &[Signature],
    request: &ValidRequest,
    client_memory: bool,
) -> Option<Capture> {
    let writer = writer.filter(|writer| writer.sampled())?;
    let signature = signatures
        .get(request.signature())
        .map(|sig| sig.name.clone())
        .unwrap_or_default();
    Some(Capture {
        writer,
        signature,
        inputs: owned_tensors(request.inputs(), client_memory),
        client_memory,
        arrived: SystemTime::now(),
    })
}

/// Offers the record of an answered request to its model's writer; with `[logging] shadow =
/// true`, also what its shadow copy (if it gets one) needs to log its answer beside it.
pub fn offer(
    capture: Option<Capture>,
    model: &Arc<str>,
    version: u64,
    outputs: &[NamedTensor],
) -> Option<ShadowLog> {
    let capture = capture?;
    let id = capture.writer.next_id();
    let shadow = capture.writer.config().shadow.then(|| ShadowLog {
        writer: capture.writer.clone(),
        id,
        signature: capture.signature.clone(),
    });
    let record = PayloadRecord {
        model: model.clone(),
        version: i64::try_from(version).unwrap_or(i64::MAX),
        signature: capture.signature,
        id,
        timestamp: capture.arrived,
        sample: capture.writer.config().sample,
        origin: "",
        inputs: capture.inputs,
        outputs: owned_tensors(outputs, capture.client_memory),
    };
    capture.writer.offer(record);
    shadow
}
