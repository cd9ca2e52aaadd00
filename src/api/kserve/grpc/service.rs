//! `inference.GRPCInferenceService`, the KServe v2 / Triton gRPC API: the dispatcher, each RPC
//! answered here or handed to the operation beneath it (`model_infer.rs`, `stream.rs`).

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tonic::{Request, Response, Status, Streaming};

use super::log_settings::log_settings;
use super::model_infer::model_infer;
use super::stream::{answers, MODEL_STREAM_INFER};
use super::trace_setting::trace_setting;
use crate::api::health::Health;
use crate::api::kserve::model_info::{model_config, model_metadata, repository_index, EXTENSIONS};
use crate::api::kserve::params::refuse_load_overrides;
use crate::api::kserve::statistics::statistics;
use crate::error::Error;
use crate::infer::InferService;
use crate::log_settings::LogSettings;
use crate::overload::Streams;
use crate::proto::inference as pb;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceService;
use crate::proto::inference::model_metadata_response::TensorMetadata;
use crate::repository::VersionSelector;
use crate::request::RequestContext;
use crate::shm::{Peer, ShmError};
use crate::trace::TraceSettings;

/// The KServe gRPC service over one [`InferService`].
#[derive(Clone)]
pub struct KserveGrpc {
    service: Arc<InferService>,
    health: Arc<Health>,
    /// Admits each message of a `ModelStreamInfer` stream as the port's stack admits a call.
    streams: Streams,
    log_settings: Arc<LogSettings>,
    trace_settings: Arc<TraceSettings>,
}

impl KserveGrpc {
    pub fn new(
        service: Arc<InferService>,
        health: Arc<Health>,
        streams: Streams,
        log_settings: Arc<LogSettings>,
        trace_settings: Arc<TraceSettings>,
    ) -> Self {
        Self {
            service,
            health,
            streams,
            log_settings,
            trace_settings,
        }
    }
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
        name_model(&request, &request.get_ref().name);
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
        let tensors = |list: Vec<crate::api::kserve::model_info::TensorMetadata>| {
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
        // The stream was admitted as a call as it opened; each message is admitted again, on
        // its own, as it arrives (see `overload::stream`).
        let gate = self.streams.open(&request, MODEL_STREAM_INFER);
        let peer = peer(&request);
        let messages = request.into_inner();
        Ok(Response::new(Box::pin(answers(
            self.service.clone(),
            gate,
            peer,
            messages,
        ))))
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
        name_model(&request, &request.get_ref().name);
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
        name_model(&request, &request.get_ref().model_name);
        let request = request.into_inner();
        // Where clients may not load, that is the answer, whatever the load would have carried.
        self.service.repository().check_client_control()?;
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
        name_model(&request, &request.get_ref().model_name);
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
        request: Request<pb::TraceSettingRequest>,
    ) -> Result<Response<pb::TraceSettingResponse>, Status> {
        Ok(Response::new(trace_setting(
            &self.trace_settings,
            request.into_inner(),
        )?))
    }

    async fn log_settings(
        &self,
        request: Request<pb::LogSettingsRequest>,
    ) -> Result<Response<pb::LogSettingsResponse>, Status> {
        Ok(Response::new(log_settings(
            &self.log_settings,
            request.into_inner(),
        )?))
    }
}

/// Names the model a model-scoped call addresses in its context, for the access log.
fn name_model<T>(request: &Request<T>, name: &str) {
    if let Some(context) = request.extensions().get::<Arc<RequestContext>>() {
        context.name_model(name);
    }
}
