//! The KServe v2 infer request and response as both transports decode and encode them: what
//! differs per transport is only how tensors and parameters are spelled.

use std::sync::Arc;
use std::time::Duration;

use super::params::{param_u64, Param, Params};
use crate::batcher::Priority;
use crate::error::Error;
use crate::infer::Sequence;
use crate::request::HeldMemory;
use crate::tensor::{DataType, Tensor};
use crate::wire_error::ParamError;

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
            Some(other) => return Err(ParamError::RegionNotString(format!("{other:?}")).into()),
        };
        let byte_size = param_u64(params, "shared_memory_byte_size")?
            .ok_or_else(|| ParamError::NoByteSize(region.clone()))?;
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
    /// The classification extension: return this many best classes instead of the scores.
    pub classification: Option<usize>,
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
    /// The sequence extension's parameters, when they put the request in a sequence.
    pub sequence: Option<Sequence>,
    /// What the decoded inputs hold beyond the body, charged to the request memory budget;
    /// passed on to the answer, and given back once it is encoded.
    pub memory: HeldMemory,
}

pub struct OutputResult {
    pub name: String,
    pub tensor: Tensor,
    pub binary: bool,
    /// Set when the data was written into this region instead of being returned.
    pub shm: Option<ShmRef>,
}

pub struct InferResponse {
    /// The answering version's name, shared with it: the JSON answer writes it from here,
    /// and only the protobuf message needs a `String` of its own.
    pub model_name: Arc<str>,
    pub model_version: u64,
    /// The version's name where its settings give one (`v0.1.0`), reported in place of the
    /// number.
    pub model_version_name: Option<Arc<str>>,
    pub id: String,
    pub outputs: Vec<OutputResult>,
    /// The request's charge for its decoded inputs, held until this is encoded.
    pub memory: HeldMemory,
}
