//! The KServe v2 / Triton protocol: HTTP under `/v2` and `inference.GRPCInferenceService`.
//!
//! Both transports decode into [`InferRequest`] and share [`infer()`], which resolves
//! shared-memory inputs, runs the request through [`InferService`] and writes shared-memory
//! outputs. What differs per transport is only how tensors and parameters are spelled.

pub mod codec;
pub mod grpc;
pub mod http;
mod infer;
pub mod infer_body;
mod infer_grpc;
mod infer_http;
mod infer_json;
pub mod infer_lift;
mod message_footprint;
mod metadata;
mod model_info;
mod raw_input;
mod repository;
mod shared_memory;
mod statistics;
mod stream;

pub use infer::infer;
pub use infer_http::infer_request;

pub use model_info::{
    config_json, model_config, model_metadata, repository_index, IndexEntry, ModelMetadata,
    TensorMetadata,
};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::batcher::Priority;
use crate::error::Error;
use crate::request::HeldMemory;
use crate::tensor::{DataType, Tensor};
use crate::wire_error::ParamError;

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
    Err(ParamError::LoadOverrides {
        model: model.to_owned(),
        overrides: overrides.join(", "),
    }
    .into())
}

fn param_u64(params: &Params, key: &str) -> Result<Option<u64>, Error> {
    match params.get(key) {
        None => Ok(None),
        Some(Param::Uint(v)) => Ok(Some(*v)),
        Some(Param::Int(v)) => u64::try_from(*v).map(Some).map_err(|_| {
            ParamError::Negative {
                key: key.to_owned(),
                value: *v,
            }
            .into()
        }),
        Some(other) => Err(ParamError::NotInteger {
            key: key.to_owned(),
            got: format!("{other:?}"),
        }
        .into()),
    }
}

/// Parameter `key` as a boolean (absent: false).
pub fn param_bool(params: &Params, key: &str) -> Result<bool, Error> {
    match params.get(key) {
        None => Ok(false),
        Some(Param::Bool(v)) => Ok(*v),
        Some(other) => Err(ParamError::NotBoolean {
            key: key.to_owned(),
            got: format!("{other:?}"),
        }
        .into()),
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
    /// What the decoded inputs hold beyond the body, charged to the request memory budget;
    /// passed on to the answer, and given back once it is encoded.
    pub memory: HeldMemory,
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
    /// The answering version's name, shared with it: the JSON answer writes it from here,
    /// and only the protobuf message needs a `String` of its own.
    pub model_name: Arc<str>,
    pub model_version: u64,
    pub id: String,
    pub outputs: Vec<OutputResult>,
    /// The request's charge for its decoded inputs, held until this is encoded.
    pub memory: HeldMemory,
}
