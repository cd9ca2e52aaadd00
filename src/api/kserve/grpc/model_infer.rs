//! KServe v2 gRPC inference: `ModelInfer` (and each message of `ModelStreamInfer`) decoded
//! into an [`InferRequest`], run, and encoded back.

use bytes::Bytes;

use super::params::params;
use crate::api::kserve::classification::class_count;
use crate::api::kserve::codec;
use crate::api::kserve::infer::infer;
use crate::api::kserve::params::{scheduling_params, sequence_params};
use crate::api::kserve::raw_input::raw_input;
use crate::api::kserve::request::{
    InferRequest, InferResponse, InputData, InputRequest, OutputRequest, ShmRef,
};
use crate::error::Error;
use crate::infer::InferService;
use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::proto::inference::model_infer_response::InferOutputTensor;
use crate::proto::inference::{self as pb, InferParameter};
use crate::request::{HeldMemory, RequestContext};
use crate::shm::Peer;
use crate::tensor::shape_from_dims;
use crate::wire_error::InferRequestError;

/// Decodes `ModelInfer`: raw contents (one entry per input not in shared memory, in order)
/// are used in place; typed contents are converted.
fn decode_request(
    request: pb::ModelInferRequest,
    context: Option<&RequestContext>,
) -> Result<InferRequest, Error> {
    let mut memory = HeldMemory::default();
    let mut raw = request.raw_input_contents.into_iter();
    let raw_count = raw.len();
    let mut used_raw = 0usize;
    let mut inputs = Vec::with_capacity(request.inputs.len());
    for input in request.inputs {
        let name = input.name;
        let dtype = codec::parse_datatype(&input.datatype).map_err(|e| e.in_input(&name))?;
        let shape = shape_from_dims(&input.shape).map_err(|e| e.in_input(&name))?;
        let shm = ShmRef::from_params(&params(&input.parameters))?;
        let data = match (shm, input.contents, raw_count > 0) {
            (Some(shm), None, _) => InputData::SharedMemory(shm),
            (Some(_), Some(_), _) => {
                return Err(InferRequestError::ContentsAndSharedMemory(name).into())
            }
            (None, Some(_), true) => {
                return Err(InferRequestError::TypedAndRawContents(name).into())
            }
            (None, None, true) => {
                let bytes: Bytes = raw
                    .next()
                    .ok_or(InferRequestError::TooFewRawContents(raw_count))?;
                used_raw += 1;
                InputData::Inline(raw_input(
                    &name,
                    dtype,
                    shape.clone(),
                    bytes,
                    context,
                    &mut memory,
                )?)
            }
            (None, Some(contents), false) => InputData::Inline(
                codec::from_contents(dtype, shape.clone(), contents)
                    .map_err(|e| e.in_input(&name))?,
            ),
            (None, None, false) => return Err(InferRequestError::NoContents(name).into()),
        };
        inputs.push(InputRequest {
            name,
            dtype,
            shape,
            data,
        });
    }
    if used_raw != raw_count {
        return Err(InferRequestError::UnusedRawContents {
            entries: raw_count,
            used: used_raw,
        }
        .into());
    }
    let request_params = params(&request.parameters);
    let (priority, timeout) = scheduling_params(&request_params)?;
    let sequence = sequence_params(&request_params)?;
    let outputs = request
        .outputs
        .into_iter()
        .map(|output| {
            let output_params = params(&output.parameters);
            Ok(OutputRequest {
                shm: ShmRef::from_params(&output_params)?,
                classification: class_count(&output.name, &output_params)?,
                name: output.name,
                binary: false,
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(InferRequest {
        model: request.model_name,
        version: request.model_version,
        id: request.id,
        inputs,
        outputs,
        binary_by_default: false,
        priority,
        timeout,
        sequence,
        memory,
    })
}

/// Outputs always travel in `raw_output_contents`; a shared-memory output gets an empty entry,
/// so positions still line up with `outputs`, as Triton's clients expect.
fn encode_response(response: InferResponse) -> pb::ModelInferResponse {
    let mut outputs = Vec::with_capacity(response.outputs.len());
    let mut raw = Vec::with_capacity(response.outputs.len());
    for output in response.outputs {
        let mut parameters = std::collections::HashMap::new();
        if let Some(shm) = &output.shm {
            let string = |s: &str| InferParameter {
                parameter_choice: Some(ParameterChoice::StringParam(s.to_owned())),
            };
            let int = |v: u64| InferParameter {
                parameter_choice: Some(ParameterChoice::Int64Param(v as i64)),
            };
            parameters.insert("shared_memory_region".to_owned(), string(&shm.region));
            parameters.insert("shared_memory_byte_size".to_owned(), int(shm.byte_size));
            if shm.offset > 0 {
                parameters.insert("shared_memory_offset".to_owned(), int(shm.offset));
            }
            raw.push(Bytes::new());
        } else {
            raw.push(codec::to_raw(&output.tensor));
        }
        outputs.push(InferOutputTensor {
            name: output.name,
            datatype: codec::datatype_name(output.tensor.dtype()).to_owned(),
            shape: codec::shape_i64(&output.tensor),
            parameters,
            contents: None,
        });
    }
    pb::ModelInferResponse {
        model_name: response.model_name.to_string(),
        model_version: match &response.model_version_name {
            Some(name) => name.to_string(),
            None => response.model_version.to_string(),
        },
        id: response.id,
        parameters: Default::default(),
        outputs,
        raw_output_contents: raw,
    }
}

pub(super) async fn model_infer(
    service: &InferService,
    request: pb::ModelInferRequest,
    peer: Peer,
    context: Option<&RequestContext>,
) -> Result<pb::ModelInferResponse, Error> {
    if let Some(context) = context {
        context.name_model(&request.model_name);
    }
    let decoded = decode_request(request, context)?;
    Ok(encode_response(
        infer(service, decoded, peer, context).await?,
    ))
}
