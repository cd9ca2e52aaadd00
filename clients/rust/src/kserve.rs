//! KServe v2 over gRPC (`inference.GRPCInferenceService`), with system shared memory.

use std::collections::HashMap;

use tonic::transport::Channel;

use crate::error::{ClientError, Result};
use crate::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use crate::proto::inference::{
    infer_parameter::ParameterChoice, model_infer_request::InferInputTensor,
    model_infer_request::InferRequestedOutputTensor, InferParameter, ModelInferRequest,
    ModelInferResponse, ModelMetadataRequest, ServerReadyRequest,
    SystemSharedMemoryRegisterRequest, SystemSharedMemoryStatusRequest,
    SystemSharedMemoryUnregisterRequest,
};
use crate::shm::ShmRegion;
use crate::tensor::{DataType, NamedTensor, Tensor};

/// An input or output of a model, as its metadata describes it (-1: a dynamic dimension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMetadata {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

/// An input the caller wrote into a region: where, and what it is.
#[derive(Debug, Clone)]
pub struct ShmInput<'a> {
    pub name: &'a str,
    pub datatype: DataType,
    pub shape: Vec<i64>,
    pub offset: usize,
    pub byte_size: usize,
}

/// Where in the region the server is to write an output.
#[derive(Debug, Clone)]
pub struct ShmOutput<'a> {
    pub name: &'a str,
    pub offset: usize,
    pub byte_size: usize,
}

/// What the server wrote for an output: its type and shape (the bytes are in the region).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputInfo {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
}

/// A KServe v2 gRPC client.
#[derive(Debug, Clone)]
pub struct KserveClient {
    inner: GrpcInferenceServiceClient<Channel>,
}

fn version_text(version: Option<u64>) -> String {
    version.map(|v| v.to_string()).unwrap_or_default()
}

fn shm_parameters(
    region: &str,
    offset: usize,
    byte_size: usize,
) -> HashMap<String, InferParameter> {
    let int = |v: usize| InferParameter {
        parameter_choice: Some(ParameterChoice::Int64Param(
            i64::try_from(v).unwrap_or(i64::MAX),
        )),
    };
    HashMap::from([
        (
            "shared_memory_region".to_owned(),
            InferParameter {
                parameter_choice: Some(ParameterChoice::StringParam(region.to_owned())),
            },
        ),
        ("shared_memory_offset".to_owned(), int(offset)),
        ("shared_memory_byte_size".to_owned(), int(byte_size)),
    ])
}

impl KserveClient {
    /// Connects to `endpoint`, such as `http://127.0.0.1:8500`.
    pub async fn connect(endpoint: impl Into<String>) -> Result<Self> {
        let channel = Channel::from_shared(endpoint.into())
            .map_err(|err| ClientError::Response(format!("bad endpoint: {err}")))?
            .connect()
            .await?;
        Ok(Self::new(channel))
    }

    /// A client on an existing channel (share one channel among clients).
    pub fn new(channel: Channel) -> Self {
        Self {
            // The server's --max-request-bytes is the limit that matters, not the client's.
            inner: GrpcInferenceServiceClient::new(channel)
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
        }
    }

    pub async fn server_ready(&mut self) -> Result<bool> {
        Ok(self
            .inner
            .server_ready(ServerReadyRequest {})
            .await?
            .into_inner()
            .ready)
    }

    pub async fn model_metadata(
        &mut self,
        model: &str,
        version: Option<u64>,
    ) -> Result<ModelMetadata> {
        let response = self
            .inner
            .model_metadata(ModelMetadataRequest {
                name: model.to_owned(),
                version: version_text(version),
            })
            .await?
            .into_inner();
        let specs =
            |list: Vec<crate::proto::inference::model_metadata_response::TensorMetadata>| {
                list.into_iter()
                    .map(|t| TensorMetadata {
                        name: t.name,
                        datatype: t.datatype,
                        shape: t.shape,
                    })
                    .collect()
            };
        Ok(ModelMetadata {
            name: response.name,
            versions: response.versions,
            platform: response.platform,
            inputs: specs(response.inputs),
            outputs: specs(response.outputs),
        })
    }

    /// Inference with the tensors on the wire (`raw_input_contents`); every output comes back.
    pub async fn infer(
        &mut self,
        model: &str,
        version: Option<u64>,
        inputs: &[(&str, &Tensor)],
    ) -> Result<Vec<NamedTensor>> {
        let request = ModelInferRequest {
            model_name: model.to_owned(),
            model_version: version_text(version),
            inputs: inputs
                .iter()
                .map(|(name, t)| InferInputTensor {
                    name: (*name).to_owned(),
                    datatype: t.datatype().name().to_owned(),
                    shape: t.shape().to_vec(),
                    ..Default::default()
                })
                .collect(),
            // Cloning `Bytes` shares the buffer; nothing is copied here.
            raw_input_contents: inputs.iter().map(|(_, t)| t.raw().clone()).collect(),
            ..Default::default()
        };
        let response = self.inner.model_infer(request).await?.into_inner();
        decode_outputs(response)
    }

    /// Registers `region` with the server under its own name.
    pub async fn register_region(&mut self, region: &ShmRegion) -> Result<()> {
        self.inner
            .system_shared_memory_register(SystemSharedMemoryRegisterRequest {
                name: region.name().to_owned(),
                key: region.key(),
                offset: 0,
                byte_size: region.byte_size() as u64,
            })
            .await?;
        Ok(())
    }

    pub async fn unregister_region(&mut self, name: &str) -> Result<()> {
        self.inner
            .system_shared_memory_unregister(SystemSharedMemoryUnregisterRequest {
                name: name.to_owned(),
            })
            .await?;
        Ok(())
    }

    /// The names of the regions registered with the server (every client's).
    pub async fn registered_regions(&mut self) -> Result<Vec<String>> {
        let response = self
            .inner
            .system_shared_memory_status(SystemSharedMemoryStatusRequest {
                name: String::new(),
            })
            .await?
            .into_inner();
        let mut names: Vec<String> = response.regions.into_keys().collect();
        names.sort();
        Ok(names)
    }

    /// Inference with inputs and outputs in `region`, which must be registered. Write the
    /// inputs first ([`ShmRegion::write`]); afterwards read the outputs in place with
    /// [`ShmRegion::read`] at the offsets given here. The `&mut` borrow keeps every slice of
    /// the region dead while the server writes into it.
    pub async fn infer_in_region(
        &mut self,
        model: &str,
        version: Option<u64>,
        region: &mut ShmRegion,
        inputs: &[ShmInput<'_>],
        outputs: &[ShmOutput<'_>],
    ) -> Result<Vec<OutputInfo>> {
        let request = ModelInferRequest {
            model_name: model.to_owned(),
            model_version: version_text(version),
            inputs: inputs
                .iter()
                .map(|i| InferInputTensor {
                    name: i.name.to_owned(),
                    datatype: i.datatype.name().to_owned(),
                    shape: i.shape.clone(),
                    parameters: shm_parameters(region.name(), i.offset, i.byte_size),
                    ..Default::default()
                })
                .collect(),
            outputs: outputs
                .iter()
                .map(|o| InferRequestedOutputTensor {
                    name: o.name.to_owned(),
                    parameters: shm_parameters(region.name(), o.offset, o.byte_size),
                })
                .collect(),
            ..Default::default()
        };
        let response = self.inner.model_infer(request).await?.into_inner();
        response
            .outputs
            .into_iter()
            .map(|o| {
                let datatype = DataType::from_name(&o.datatype).ok_or_else(|| {
                    ClientError::Response(format!("unknown datatype {}", o.datatype))
                })?;
                Ok(OutputInfo {
                    name: o.name,
                    datatype,
                    shape: o.shape,
                })
            })
            .collect()
    }
}

fn decode_outputs(response: ModelInferResponse) -> Result<Vec<NamedTensor>> {
    if response.raw_output_contents.len() != response.outputs.len() {
        return Err(ClientError::Response(format!(
            "{} outputs but {} raw contents",
            response.outputs.len(),
            response.raw_output_contents.len()
        )));
    }
    response
        .outputs
        .into_iter()
        .zip(response.raw_output_contents)
        .map(|(output, raw)| {
            let datatype = DataType::from_name(&output.datatype).ok_or_else(|| {
                ClientError::Response(format!("unknown datatype {}", output.datatype))
            })?;
            Ok((output.name, Tensor::from_raw(datatype, output.shape, raw)?))
        })
        .collect()
}
