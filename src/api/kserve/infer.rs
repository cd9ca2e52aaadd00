//! Running a decoded KServe request, whichever transport carried it: shared-memory inputs
//! resolved to views of their regions, the request run through [`InferService`], outputs
//! written into the regions that asked for them.

use std::sync::Arc;

use super::classification::classify;
use super::codec;
use super::raw_input::raw_input;
use super::request::{InferRequest, InferResponse, InputData, InputRequest, OutputResult, ShmRef};
use crate::backend::OutputTarget;
use crate::error::Error;
use crate::infer::{Decoded, InferService, ModelTarget};
use crate::metrics::CopyStage;
use crate::repository::VersionSelector;
use crate::request::{HeldMemory, RequestContext};
use crate::shm::{Peer, Region, ShmError};
use crate::tensor::{element_count, Tensor};
use crate::wire_error::{InferRequestError, ShmRequestError};

/// Runs a decoded KServe request from `peer` (which decides the shared-memory regions it may
/// name). `context` (absent when no overload layer ran, as in some tests) gives the transport
/// deadline and learns which model version answers.
pub async fn infer(
    service: &InferService,
    request: InferRequest,
    peer: Peer,
    context: Option<&RequestContext>,
) -> Result<InferResponse, Error> {
    let target = ModelTarget {
        model: &request.model,
        version: VersionSelector::from_kserve(&request.version)?,
        // KServe has no signatures: a request runs the model's default one.
        signature: "",
    };
    // Every region this request reads or writes: a fault in one while the request runs
    // poisons it (see `crate::shm`), and the request must then fail.
    let mut used = Vec::new();
    // Shared-memory BYTES inputs are charged here, beside the inline inputs' charges.
    let mut charge = Charge {
        context,
        held: request.memory,
    };
    let timeout = request.timeout;
    let prepared = service
        .prepare_within(target, context, timeout, |_| {
            let mut inputs = Vec::with_capacity(request.inputs.len());
            for mut input in request.inputs {
                // The name is moved out, not copied; `resolve_input` borrows it for errors.
                let name = std::mem::take(&mut input.name);
                let tensor = resolve_input(service, input, &name, peer, &mut used, &mut charge)
                    .map_err(|err| with_input(err, &name))?;
                inputs.push((name, tensor));
            }
            let output_filter = request.outputs.iter().map(|o| o.name.clone()).collect();
            // Outputs bound for shared memory are offered to the runtime to write in place.
            let mut output_targets = Vec::with_capacity(request.outputs.len());
            // A classified output is not the runtime's: its classes are written afterwards.
            for output in &request.outputs {
                output_targets.push(match (&output.shm, output.classification) {
                    (Some(target), None) => {
                        output_window(service, &output.name, target, peer, &mut used)?
                    }
                    _ => None,
                });
            }
            Ok(Decoded {
                inputs,
                output_filter,
                output_targets,
                priority: request.priority,
                timeout: request.timeout,
                sequence: request.sequence,
                // A region (input or output) the client reuses once answered: no copy reads it.
                client_memory: !used.is_empty(),
            })
        })
        .await?;
    let result = service.run(prepared).await;
    // A poisoned region explains a failure better than whatever the runtime made of zeros.
    check_intact(&used)?;
    let result = result?;
    let mut outputs = Vec::with_capacity(result.outputs.len());
    let backend = &result.model.backend;
    for (name, tensor) in result.outputs {
        let wanted = request.outputs.iter().find(|o| o.name == name);
        let tensor = match wanted.and_then(|o| o.classification) {
            Some(count) => {
                let labels = backend.labels(&name);
                // Rows are batch rows when the model has a batch dimension: as its
                // configuration says, else when the output has more than one dimension.
                let batched = backend
                    .max_batch_size()
                    .map_or(tensor.shape().len() > 1, |max| max > 0);
                // The classes' text is built after the run, so it is charged to the request
                // memory budget as it is built, and held with the answer until it is sent.
                let mut hold = |bytes: u64| match charge.context {
                    Some(context) => {
                        context
                            .hold_memory(bytes, &mut charge.held)
                            .map_err(|source| Error::OutputMemory {
                                output: name.clone(),
                                source,
                            })
                    }
                    None => Ok(()),
                };
                classify(&name, &tensor, count, labels.as_deref(), batched, &mut hold)?
            }
            None => tensor,
        };
        let shm = wanted.and_then(|o| o.shm.clone());
        if let Some(target) = &shm {
            write_output(service, &name, &tensor, target, peer)?;
        }
        outputs.push(OutputResult {
            binary: wanted.map_or(request.binary_by_default, |o| o.binary),
            name,
            tensor,
            shm,
        });
    }
    Ok(InferResponse {
        model_name: result.model.name.clone(),
        model_version: result.model.version,
        model_version_name: result.model.version_name.clone(),
        id: request.id,
        outputs,
        memory: charge.held,
    })
}

/// Where a shared-memory input's decoded cost is charged, and the request's charges so far.
struct Charge<'c> {
    context: Option<&'c RequestContext>,
    held: HeldMemory,
}

/// Fails if a fault poisoned any region the request used.
fn check_intact(used: &[Arc<Region>]) -> Result<(), Error> {
    for region in used {
        if let Err(err) = region.check_intact() {
            tracing::warn!(
                region = %region.name,
                "a shared-memory region faulted while a request used it (its object was truncated or ran out of pages); the request fails and the region must be registered again"
            );
            return Err(err.into());
        }
    }
    Ok(())
}

/// Names the input an error belongs to.
fn with_input(err: Error, name: &str) -> Error {
    match err {
        Error::Decode(decode) => Error::Decode(decode.in_input(name)),
        Error::InferRequest(err) => Error::InferRequest(err.in_input(name)),
        Error::ShmRequest(err) => Error::ShmRequest(ShmRequestError::InInput {
            input: name.to_owned(),
            source: Box::new(err),
        }),
        other => other,
    }
}

/// The tensor of one input: inline data as decoded, or a view into its shared-memory region
/// (no copy: the runtime reads the client's memory).
fn resolve_input(
    service: &InferService,
    input: InputRequest,
    name: &str,
    peer: Peer,
    used: &mut Vec<Arc<Region>>,
    charge: &mut Charge<'_>,
) -> Result<Tensor, Error> {
    let target = match input.data {
        InputData::Inline(tensor) => {
            if tensor.shape() != input.shape.as_slice() {
                return Err(InferRequestError::ShapeMismatch {
                    declared: input.shape,
                    actual: tensor.shape().to_vec(),
                }
                .into());
            }
            return Ok(tensor);
        }
        InputData::SharedMemory(target) => target,
    };
    if let Some(size) = input.dtype.size() {
        let expected = element_count(&input.shape)?
            .checked_mul(size)
            .ok_or_else(|| ShmRequestError::ShapeTooLarge(input.shape.clone()))?;
        if target.byte_size != expected as u64 {
            return Err(ShmRequestError::ByteSizeMismatch {
                byte_size: target.byte_size,
                shape: input.shape,
                datatype: codec::datatype_name(input.dtype),
                needed: expected,
            }
            .into());
        }
    }
    let region = request_region(service, &target.region, peer)?;
    let bytes = region.view(target.offset, target.byte_size)?;
    used.push(region);
    // The window is the client's memory, not ours, but the runtime copies a BYTES input's
    // elements into strings of its own: that is charged like an inline input's.
    raw_input(
        name,
        input.dtype,
        input.shape,
        bytes,
        charge.context,
        &mut charge.held,
    )
}

/// The region a request names, among those `peer` may see. An unknown name makes the request
/// itself invalid (400 / INVALID_ARGUMENT); the shared-memory status and unregister calls
/// answer NOT_FOUND instead.
fn request_region(service: &InferService, name: &str, peer: Peer) -> Result<Arc<Region>, Error> {
    service.shm().get(name, peer).map_err(|err| match err {
        ShmError::NotFound(_) => ShmRequestError::UnknownRegion(err.to_string()).into(),
        other => Error::Shm(other),
    })
}

/// The writable window a shared-memory output names, checked against the region now.
fn output_window(
    service: &InferService,
    name: &str,
    target: &ShmRef,
    peer: Peer,
    used: &mut Vec<Arc<Region>>,
) -> Result<OutputTarget, Error> {
    let region = request_region(service, &target.region, peer)?;
    let window = region
        .window(target.offset, target.byte_size)
        .map_err(|err| ShmRequestError::OutputWindow {
            output: name.to_owned(),
            reason: err.to_string(),
        })?;
    used.push(region);
    Ok(Some(Arc::new(window)))
}

/// Puts an output into the region the client named for it: nothing to do when the runtime
/// already wrote it there, one copy otherwise.
fn write_output(
    service: &InferService,
    name: &str,
    tensor: &Tensor,
    target: &ShmRef,
    peer: Peer,
) -> Result<(), Error> {
    let needed = codec::raw_len(tensor) as u64;
    if needed > target.byte_size {
        return Err(ShmRequestError::OutputTooSmall {
            output: name.to_owned(),
            needed,
            byte_size: target.byte_size,
        }
        .into());
    }
    let region = request_region(service, &target.region, peer)?;
    if tensor
        .bytes()
        .is_some_and(|bytes| region.holds(target.offset, bytes))
    {
        return Ok(());
    }
    let raw = codec::to_raw(tensor);
    region.write(target.offset, &raw)?;
    // The copy itself may have faulted (the object shrank, or tmpfs ran out of pages).
    region.check_intact()?;
    service
        .metrics()
        .record_copy(CopyStage::SharedMemoryOutput, raw.len());
    Ok(())
}
