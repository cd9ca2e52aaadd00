//! `inference.GRPCInferenceService`, the KServe v2 / Triton gRPC API.

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::{
    codec, infer, model_config, model_metadata, refuse_load_overrides, repository_index,
    scheduling_params, InferRequest, InferResponse, InputData, InputRequest, OutputRequest, Param,
    Params, ShmRef, EXTENSIONS,
};
use crate::api::health::Health;
use crate::error::Error;
use crate::infer::InferService;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceService;
use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::proto::inference::model_infer_response::InferOutputTensor;
use crate::proto::inference::model_metadata_response::TensorMetadata;
use crate::proto::inference::{self as pb, InferParameter};
use crate::repository::{VersionSelector, VersionState};
use crate::request::RequestContext;
use crate::shm::{Peer, ShmError};
use crate::tensor::shape_from_dims;

/// The KServe gRPC service over one [`InferService`].
#[derive(Clone)]
pub struct KserveGrpc {
    service: Arc<InferService>,
    health: Arc<Health>,
}

impl KserveGrpc {
    pub fn new(service: Arc<InferService>, health: Arc<Health>) -> Self {
        Self { service, health }
    }
}

fn params(map: &std::collections::HashMap<String, InferParameter>) -> Params {
    map.iter()
        .filter_map(|(key, value)| {
            let param = match value.parameter_choice.as_ref()? {
                ParameterChoice::BoolParam(b) => Param::Bool(*b),
                ParameterChoice::Int64Param(i) => Param::Int(*i),
                ParameterChoice::Uint64Param(u) => Param::Uint(*u),
                ParameterChoice::DoubleParam(d) => Param::Double(*d),
                ParameterChoice::StringParam(s) => Param::Str(s.clone()),
            };
            Some((key.clone(), param))
        })
        .collect()
}

/// Decodes `ModelInfer`: raw contents (one entry per input not in shared memory, in order)
/// are used in place; typed contents are converted.
fn decode_request(request: pb::ModelInferRequest) -> Result<InferRequest, Error> {
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
                return Err(Error::invalid(format!(
                    "input '{name}' gives both contents and a shared-memory region"
                )))
            }
            (None, Some(_), true) => {
                return Err(Error::invalid(format!(
                    "input '{name}' gives typed contents while the request uses raw_input_contents"
                )))
            }
            (None, None, true) => {
                let bytes: Bytes = raw.next().ok_or_else(|| {
                    Error::invalid(format!(
                        "raw_input_contents has {raw_count} entries, fewer than the inputs not in shared memory"
                    ))
                })?;
                used_raw += 1;
                InputData::Inline(codec::from_raw(dtype, shape.clone(), bytes).map_err(|e| e.in_input(&name))?)
            }
            (None, Some(contents), false) => InputData::Inline(
                codec::from_contents(dtype, shape.clone(), contents).map_err(|e| e.in_input(&name))?,
            ),
            (None, None, false) => {
                return Err(Error::invalid(format!(
                    "input '{name}' has no data: give contents, raw_input_contents or a shared-memory region"
                )))
            }
        };
        inputs.push(InputRequest {
            name,
            dtype,
            shape,
            data,
        });
    }
    if used_raw != raw_count {
        return Err(Error::invalid(format!(
            "raw_input_contents has {raw_count} entries but {used_raw} inputs take raw data"
        )));
    }
    let (priority, timeout) = scheduling_params(&params(&request.parameters))?;
    let outputs = request
        .outputs
        .into_iter()
        .map(|output| {
            Ok(OutputRequest {
                shm: ShmRef::from_params(&params(&output.parameters))?,
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
        model_name: response.model_name,
        model_version: response.model_version,
        id: response.id,
        parameters: Default::default(),
        outputs,
        raw_output_contents: raw,
    }
}

async fn model_infer(
    service: &InferService,
    request: pb::ModelInferRequest,
    peer: Peer,
    context: Option<&RequestContext>,
) -> Result<pb::ModelInferResponse, Error> {
    let decoded = decode_request(request)?;
    Ok(encode_response(
        infer(service, decoded, peer, context).await?,
    ))
}

/// Statistics of one model (`name`, optionally one version) or of every model.
pub fn statistics(
    service: &InferService,
    name: Option<&str>,
    version: &str,
) -> Result<pb::ModelStatisticsResponse, Error> {
    let selector = VersionSelector::from_kserve(version)?;
    let snapshot = service.repository().snapshot();
    if let (Some(name), VersionSelector::Label(label)) = (name, &selector) {
        // An unknown label is a bad request, as everywhere else, not an empty answer.
        snapshot
            .model(name)?
            .resolve(&VersionSelector::Label(label.clone()))?;
    }
    let records: Vec<_> = match name {
        Some(name) if !name.is_empty() => vec![snapshot.model(name)?],
        _ => snapshot.models().collect(),
    };
    let mut model_stats = Vec::new();
    for record in records {
        for (v, state) in &record.versions {
            let VersionState::Available(model) = state else {
                continue;
            };
            if !record.selects(&selector, *v) {
                continue;
            }
            let s = &model.stats;
            let compute = s.compute();
            let duration = |d: &crate::stats::Duration64| {
                let (count, ns) = d.get();
                Some(pb::StatisticDuration { count, ns })
            };
            use std::sync::atomic::Ordering::Relaxed;
            model_stats.push(pb::ModelStatistics {
                name: record.name.clone(),
                version: v.to_string(),
                last_inference: s.last_inference_ms.load(Relaxed),
                inference_count: s.inference_count.load(Relaxed),
                execution_count: s.execution_count.load(Relaxed),
                inference_stats: Some(pb::InferStatistics {
                    success: duration(&s.success),
                    fail: duration(&s.fail),
                    queue: duration(&s.queue),
                    compute_input: Some(pb::StatisticDuration {
                        count: compute.count,
                        ns: compute.input_ns,
                    }),
                    compute_infer: Some(pb::StatisticDuration {
                        count: compute.count,
                        ns: compute.infer_ns,
                    }),
                    compute_output: Some(pb::StatisticDuration {
                        count: compute.count,
                        ns: compute.output_ns,
                    }),
                    cache_hit: Some(pb::StatisticDuration::default()),
                    cache_miss: Some(pb::StatisticDuration::default()),
                }),
                batch_stats: s
                    .batches()
                    .into_iter()
                    .map(|(batch_size, times)| {
                        let phase = |ns| {
                            Some(pb::StatisticDuration {
                                count: times.count,
                                ns,
                            })
                        };
                        pb::InferBatchStatistics {
                            batch_size,
                            compute_input: phase(times.input_ns),
                            compute_infer: phase(times.infer_ns),
                            compute_output: phase(times.output_ns),
                        }
                    })
                    .collect(),
                ..Default::default()
            });
        }
    }
    if let (Some(name), VersionSelector::Specific(version), true) =
        (name, selector, model_stats.is_empty())
    {
        return Err(Error::VersionNotFound {
            model: name.to_owned(),
            version,
        });
    }
    Ok(pb::ModelStatisticsResponse { model_stats })
}

fn peer<T>(request: &Request<T>) -> Peer {
    request
        .remote_addr()
        .map_or(Peer::Unknown, |addr| Peer::Ip(addr.ip()))
}

type InferStream = Pin<Box<dyn Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send>>;

#[tonic::async_trait]
impl GrpcInferenceService for KserveGrpc {
    async fn server_live(
        &self,
        _: Request<pb::ServerLiveRequest>,
    ) -> Result<Response<pb::ServerLiveResponse>, Status> {
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        Ok(Response::new(pb::ServerReadyResponse {
            ready: self.health.ready(),
        }))
    }

    async fn model_ready(
        &self,
        request: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        let request = request.into_inner();
        let ready = VersionSelector::from_kserve(&request.version)
            .map_err(Error::from)
            .and_then(|selector| self.service.resolve(&request.name, selector))
            .is_ok();
        Ok(Response::new(pb::ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        Ok(Response::new(pb::ServerMetadataResponse {
            name: "tensorport".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            extensions: EXTENSIONS.iter().map(|e| (*e).to_owned()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        let context = request.extensions().get::<Arc<RequestContext>>().cloned();
        let request = request.into_inner();
        let meta = model_metadata(
            &self.service,
            &request.name,
            &request.version,
            context.as_deref(),
        )
        .await?;
        let tensors = |list: Vec<super::TensorMetadata>| {
            list.into_iter()
                .map(|t| TensorMetadata {
                    name: t.name,
                    datatype: t.datatype.to_owned(),
                    shape: t.shape,
                })
                .collect()
        };
        Ok(Response::new(pb::ModelMetadataResponse {
            name: meta.name,
            versions: meta.versions,
            platform: meta.platform.to_owned(),
            inputs: tensors(meta.inputs),
            outputs: tensors(meta.outputs),
        }))
    }

    async fn model_infer(
        &self,
        request: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        let context = request.extensions().get::<Arc<RequestContext>>().cloned();
        let peer = peer(&request);
        Ok(Response::new(
            model_infer(
                &self.service,
                request.into_inner(),
                peer,
                context.as_deref(),
            )
            .await?,
        ))
    }

    type ModelStreamInferStream = InferStream;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<pb::ModelInferRequest>>,
    ) -> Result<Response<Self::ModelStreamInferStream>, Status> {
        let service = self.service.clone();
        // The stream's messages share the stream's context: its deadline bounds each of them.
        let context = request.extensions().get::<Arc<RequestContext>>().cloned();
        let peer = peer(&request);
        let responses = request.into_inner().then(move |message| {
            let service = service.clone();
            let context = context.clone();
            async move {
                let request = message?;
                Ok(
                    match model_infer(&service, request, peer, context.as_deref()).await {
                        Ok(response) => pb::ModelStreamInferResponse {
                            error_message: String::new(),
                            infer_response: Some(response),
                        },
                        Err(err) => pb::ModelStreamInferResponse {
                            error_message: err.to_string(),
                            infer_response: None,
                        },
                    },
                )
            }
        });
        Ok(Response::new(Box::pin(responses)))
    }

    async fn model_config(
        &self,
        request: Request<pb::ModelConfigRequest>,
    ) -> Result<Response<pb::ModelConfigResponse>, Status> {
        let context = request.extensions().get::<Arc<RequestContext>>().cloned();
        let request = request.into_inner();
        let config = model_config(
            &self.service,
            &request.name,
            &request.version,
            context.as_deref(),
        )
        .await?;
        Ok(Response::new(pb::ModelConfigResponse {
            config: Some(config),
        }))
    }

    async fn model_statistics(
        &self,
        request: Request<pb::ModelStatisticsRequest>,
    ) -> Result<Response<pb::ModelStatisticsResponse>, Status> {
        let request = request.into_inner();
        Ok(Response::new(statistics(
            &self.service,
            Some(&request.name),
            &request.version,
        )?))
    }

    async fn repository_index(
        &self,
        request: Request<pb::RepositoryIndexRequest>,
    ) -> Result<Response<pb::RepositoryIndexResponse>, Status> {
        let models = repository_index(&self.service, request.into_inner().ready)
            .into_iter()
            .map(|e| pb::repository_index_response::ModelIndex {
                name: e.name,
                version: e.version,
                state: e.state.to_owned(),
                reason: e.reason,
            })
            .collect();
        Ok(Response::new(pb::RepositoryIndexResponse { models }))
    }

    async fn repository_model_load(
        &self,
        request: Request<pb::RepositoryModelLoadRequest>,
    ) -> Result<Response<pb::RepositoryModelLoadResponse>, Status> {
        let request = request.into_inner();
        refuse_load_overrides(&request.model_name, request.parameters.keys())?;
        self.service
            .repository()
            .load_model(&request.model_name)
            .await?;
        Ok(Response::new(pb::RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        request: Request<pb::RepositoryModelUnloadRequest>,
    ) -> Result<Response<pb::RepositoryModelUnloadResponse>, Status> {
        let name = request.into_inner().model_name;
        self.service.repository().unload_model(&name).await?;
        Ok(Response::new(pb::RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<pb::SystemSharedMemoryStatusRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryStatusResponse>, Status> {
        let peer = peer(&request);
        let name = request.into_inner().name;
        let regions = self
            .service
            .shm()
            .status((!name.is_empty()).then_some(name.as_str()), peer)
            .map_err(Error::from)?
            .into_iter()
            .map(|r| {
                let status = pb::system_shared_memory_status_response::RegionStatus {
                    name: r.name.clone(),
                    key: r.key,
                    offset: r.offset,
                    byte_size: r.byte_size,
                };
                (r.name, status)
            })
            .collect();
        Ok(Response::new(pb::SystemSharedMemoryStatusResponse {
            regions,
        }))
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<pb::SystemSharedMemoryRegisterRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryRegisterResponse>, Status> {
        let peer = peer(&request);
        let r = request.into_inner();
        self.service
            .shm()
            .register(&r.name, &r.key, r.offset, r.byte_size, peer)
            .map_err(Error::from)?;
        Ok(Response::new(pb::SystemSharedMemoryRegisterResponse {}))
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<pb::SystemSharedMemoryUnregisterRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryUnregisterResponse>, Status> {
        let peer = peer(&request);
        let name = request.into_inner().name;
        // An empty name means every region, as Triton's clients send it.
        self.service
            .shm()
            .unregister((!name.is_empty()).then_some(name.as_str()), peer)
            .map_err(Error::from)?;
        Ok(Response::new(pb::SystemSharedMemoryUnregisterResponse {}))
    }

    async fn cuda_shared_memory_status(
        &self,
        request: Request<pb::CudaSharedMemoryStatusRequest>,
    ) -> Result<Response<pb::CudaSharedMemoryStatusResponse>, Status> {
        let name = request.into_inner().name;
        if !name.is_empty() {
            return Err(Error::from(ShmError::NotFound(name)).into());
        }
        Ok(Response::new(pb::CudaSharedMemoryStatusResponse::default()))
    }

    async fn cuda_shared_memory_register(
        &self,
        _: Request<pb::CudaSharedMemoryRegisterRequest>,
    ) -> Result<Response<pb::CudaSharedMemoryRegisterResponse>, Status> {
        Err(Error::from(ShmError::CudaUnsupported).into())
    }

    async fn cuda_shared_memory_unregister(
        &self,
        _: Request<pb::CudaSharedMemoryUnregisterRequest>,
    ) -> Result<Response<pb::CudaSharedMemoryUnregisterResponse>, Status> {
        Ok(Response::new(pb::CudaSharedMemoryUnregisterResponse {}))
    }

    async fn trace_setting(
        &self,
        _: Request<pb::TraceSettingRequest>,
    ) -> Result<Response<pb::TraceSettingResponse>, Status> {
        Err(Status::unimplemented(
            "tracing settings are not supported; set RUST_LOG instead",
        ))
    }

    async fn log_settings(
        &self,
        _: Request<pb::LogSettingsRequest>,
    ) -> Result<Response<pb::LogSettingsResponse>, Status> {
        Err(Status::unimplemented(
            "log settings are not supported; set RUST_LOG instead",
        ))
    }
}
