//! The KServe v2 / Triton protocol: HTTP under `/v2` and `inference.GRPCInferenceService`.
//!
//! Both transports decode into [`InferRequest`] and share [`infer`], which resolves
//! shared-memory inputs, runs the request through [`InferService`] and writes shared-memory
//! outputs. What differs per transport is only how tensors and parameters are spelled.

pub mod codec;
pub mod grpc;
pub mod http;
pub mod infer_body;
mod model_info;

pub use model_info::{
    config_json, model_config, model_metadata, repository_index, IndexEntry, ModelMetadata,
    TensorMetadata,
};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::OutputTarget;
use crate::batcher::Priority;
use crate::error::Error;
use crate::infer::{Decoded, InferService, ModelTarget};
use crate::metrics::CopyStage;
use crate::repository::VersionSelector;
use crate::request::RequestContext;
use crate::shm::{Peer, Region, ShmError};
use crate::tensor::{element_count, DataType, Tensor};

/// Extensions this server implements, as `GET /v2` and `ServerMetadata` report them.
pub const EXTENSIONS: &[&str] = &[
    "model_repository",
    "model_configuration",
    "system_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
];

/// A request parameter value, whichever transport carried it.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(String),
}

pub type Params = BTreeMap<String, Param>;

/// Triton lets a load request carry the model itself: a `config` parameter (its configuration
/// as JSON) and `file:<path>` parameters (file contents). Models load only from the model
/// directory here, so such a request is refused rather than answered as if they had applied.
fn refuse_load_overrides<'k>(
    model: &str,
    keys: impl IntoIterator<Item = &'k String>,
) -> Result<(), Error> {
    // First, since the message repeats the name.
    crate::repository::check_model_name(model)?;
    let mut overrides: Vec<&str> = keys
        .into_iter()
        .map(String::as_str)
        .filter(|key| *key == "config" || key.starts_with("file:"))
        .collect();
    if overrides.is_empty() {
        return Ok(());
    }
    overrides.sort_unstable();
    Err(Error::invalid(format!(
        "model '{model}': load parameters {} are not supported: models load only from the \
         model directory, so 'config' and 'file:' overrides cannot be applied",
        overrides.join(", ")
    )))
}

fn param_u64(params: &Params, key: &str) -> Result<Option<u64>, Error> {
    match params.get(key) {
        None => Ok(None),
        Some(Param::Uint(v)) => Ok(Some(*v)),
        Some(Param::Int(v)) => u64::try_from(*v)
            .map(Some)
            .map_err(|_| Error::invalid(format!("parameter {key} must not be negative, got {v}"))),
        Some(other) => Err(Error::invalid(format!(
            "parameter {key} must be an integer, got {other:?}"
        ))),
    }
}

/// Parameter `key` as a boolean (absent: false).
pub fn param_bool(params: &Params, key: &str) -> Result<bool, Error> {
    match params.get(key) {
        None => Ok(false),
        Some(Param::Bool(v)) => Ok(*v),
        Some(other) => Err(Error::invalid(format!(
            "parameter {key} must be a boolean, got {other:?}"
        ))),
    }
}

/// Where in a registered region a tensor lives.
#[derive(Debug, Clone, PartialEq)]
pub struct ShmRef {
    pub region: String,
    pub offset: u64,
    pub byte_size: u64,
}

impl ShmRef {
    /// The `shared_memory_*` parameters of a tensor, if it names a region.
    pub fn from_params(params: &Params) -> Result<Option<Self>, Error> {
        let region = match params.get("shared_memory_region") {
            None => return Ok(None),
            Some(Param::Str(region)) => region.clone(),
            Some(other) => {
                return Err(Error::invalid(format!(
                    "parameter shared_memory_region must be a string, got {other:?}"
                )))
            }
        };
        let byte_size = param_u64(params, "shared_memory_byte_size")?.ok_or_else(|| {
            Error::invalid(format!(
                "shared-memory tensor in region '{region}' needs parameter shared_memory_byte_size"
            ))
        })?;
        let offset = param_u64(params, "shared_memory_offset")?.unwrap_or(0);
        Ok(Some(Self {
            region,
            offset,
            byte_size,
        }))
    }
}

/// Where an input's data is.
#[derive(Debug)]
pub enum InputData {
    /// Decoded from the request itself (JSON, binary extension, raw or typed gRPC contents).
    Inline(Tensor),
    SharedMemory(ShmRef),
}

#[derive(Debug)]
pub struct InputRequest {
    pub name: String,
    pub dtype: DataType,
    pub shape: Vec<usize>,
    pub data: InputData,
}

#[derive(Debug, Clone)]
pub struct OutputRequest {
    pub name: String,
    /// Return the data in the binary extension (HTTP only).
    pub binary: bool,
    pub shm: Option<ShmRef>,
}

#[derive(Debug)]
pub struct InferRequest {
    pub model: String,
    /// Empty for the newest available version.
    pub version: String,
    pub id: String,
    pub inputs: Vec<InputRequest>,
    /// Empty: every output of the signature.
    pub outputs: Vec<OutputRequest>,
    /// Whether outputs not named in `outputs` use the binary extension (HTTP only).
    pub binary_by_default: bool,
    /// The `priority` request parameter.
    pub priority: Priority,
    /// The `timeout` request parameter (microseconds, as Triton's clients send it).
    pub timeout: Option<Duration>,
}

/// The request-level parameters this server acts on: `priority` and `timeout`.
pub fn scheduling_params(params: &Params) -> Result<(Priority, Option<Duration>), Error> {
    let priority = param_u64(params, "priority")?.map_or(Priority::Default, Priority::from_level);
    let timeout = param_u64(params, "timeout")?
        .filter(|&us| us > 0)
        .map(Duration::from_micros);
    Ok((priority, timeout))
}

pub struct OutputResult {
    pub name: String,
    pub tensor: Tensor,
    pub binary: bool,
    /// Set when the data was written into this region instead of being returned.
    pub shm: Option<ShmRef>,
}

pub struct InferResponse {
    pub model_name: String,
    pub model_version: String,
    pub id: String,
    pub outputs: Vec<OutputResult>,
}

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
    let timeout = request.timeout;
    let prepared = service
        .prepare_within(target, context, timeout, |_| {
            let mut inputs = Vec::with_capacity(request.inputs.len());
            for input in request.inputs {
                let name = input.name.clone();
                let tensor = resolve_input(service, input, peer, &mut used)
                    .map_err(|err| with_input(err, &name))?;
                inputs.push((name, tensor));
            }
            let output_filter = request.outputs.iter().map(|o| o.name.clone()).collect();
            // Outputs bound for shared memory are offered to the runtime to write in place.
            let mut output_targets = Vec::with_capacity(request.outputs.len());
            for output in &request.outputs {
                output_targets.push(match &output.shm {
                    Some(target) => output_window(service, &output.name, target, peer, &mut used)?,
                    None => None,
                });
            }
            Ok(Decoded {
                inputs,
                output_filter,
                output_targets,
                priority: request.priority,
                timeout: request.timeout,
            })
        })
        .await?;
    let result = service.run(prepared).await;
    // A poisoned region explains a failure better than whatever the runtime made of zeros.
    check_intact(&used)?;
    let result = result?;
    let mut outputs = Vec::with_capacity(result.outputs.len());
    for (name, tensor) in result.outputs {
        let wanted = request.outputs.iter().find(|o| o.name == name);
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
        model_version: result.model.version.to_string(),
        id: request.id,
        outputs,
    })
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
        Error::InvalidArgument(message) => {
            Error::InvalidArgument(format!("input '{name}': {message}"))
        }
        other => other,
    }
}

/// The tensor of one input: inline data as decoded, or a view into its shared-memory region
/// (no copy: the runtime reads the client's memory).
fn resolve_input(
    service: &InferService,
    input: InputRequest,
    peer: Peer,
    used: &mut Vec<Arc<Region>>,
) -> Result<Tensor, Error> {
    let target = match input.data {
        InputData::Inline(tensor) => {
            if tensor.shape() != input.shape.as_slice() {
                return Err(Error::invalid(format!(
                    "shape {:?} does not match the data's shape {:?}",
                    input.shape,
                    tensor.shape()
                )));
            }
            return Ok(tensor);
        }
        InputData::SharedMemory(target) => target,
    };
    if let Some(size) = input.dtype.size() {
        let expected = element_count(&input.shape)?
            .checked_mul(size)
            .ok_or_else(|| Error::invalid(format!("shape {:?} is too large", input.shape)))?;
        if target.byte_size != expected as u64 {
            return Err(Error::invalid(format!(
                "shared_memory_byte_size is {} but shape {:?} of {} needs {expected} bytes",
                target.byte_size,
                input.shape,
                codec::datatype_name(input.dtype)
            )));
        }
    }
    let region = request_region(service, &target.region, peer)?;
    let bytes = region.view(target.offset, target.byte_size)?;
    used.push(region);
    Ok(codec::from_raw(input.dtype, input.shape, bytes)?)
}

/// The region a request names, among those `peer` may see. An unknown name makes the request
/// itself invalid (400 / INVALID_ARGUMENT); the shared-memory status and unregister calls
/// answer NOT_FOUND instead.
fn request_region(service: &InferService, name: &str, peer: Peer) -> Result<Arc<Region>, Error> {
    service.shm().get(name, peer).map_err(|err| match err {
        ShmError::NotFound(_) => Error::invalid(err.to_string()),
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
        .map_err(|err| Error::invalid(format!("output '{name}': {err}")))?;
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
        return Err(Error::invalid(format!(
            "output '{name}' needs {needed} bytes but its shared_memory_byte_size is {}",
            target.byte_size
        )));
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
