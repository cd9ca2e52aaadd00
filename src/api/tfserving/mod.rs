//! The TensorFlow Serving API: gRPC `PredictionService` / `ModelService` and the `/v1` REST API.
//!
//! Both transports share what is here: how a model spec selects a version, and the status and
//! metadata views of a model.

pub mod classify;
pub mod examples;
pub mod grpc;
mod grpc_metadata;
mod grpc_model_service;
mod grpc_predict;
pub mod multi_inference;
mod predict_body;
mod predict_inputs;
mod predict_lift;
pub mod regress;
pub mod rest;
pub mod rest_examples;
mod rest_metadata;
mod rest_path;
mod rest_predict;
mod rest_status;
/// TF Serving's tensor codec lives with the tensor type, below the repository, whose warmup
/// replay decodes the same protos.
pub use crate::tensor::tensor_proto;

use std::collections::HashMap;

use crate::backend::Signature;
use crate::error::Error;
use crate::proto::tensorflow::error::Code as TfCode;
use crate::proto::tensorflow::serving::model_version_status::State;
use crate::proto::tensorflow::{tensor_info, SignatureDef, TensorInfo};
use crate::repository::{LoadedModel, ModelRecord, Residence, VersionState};

/// TF Serving's method name for predict signatures.
pub const PREDICT_METHOD: &str = "tensorflow/serving/predict";

/// One row of a model's status, as both transports report it.
pub struct VersionStatus {
    pub version: u64,
    pub state: State,
    pub error_code: TfCode,
    pub error_message: String,
}

/// The status of the versions of `record` (all, or just `version`).
pub fn version_statuses(
    record: &ModelRecord,
    version: Option<u64>,
) -> Result<Vec<VersionStatus>, Error> {
    let rows: Vec<VersionStatus> = record
        .versions
        .iter()
        .filter(|(v, _)| version.is_none_or(|want| want == **v))
        .map(|(&version, state)| {
            let (state, error) = match state {
                VersionState::Loading => (State::Loading, None),
                VersionState::Available(_) => (State::Available, None),
                VersionState::Unloading => (State::Unloading, None),
                VersionState::End { error } => (State::End, error.clone()),
                // Not in memory under --model-memory-budget: END, as TF Serving reports a
                // version it has unloaded; a too-large one carries why.
                VersionState::NotResident(residence @ Residence::TooLarge { .. }) => {
                    (State::End, Some(residence.reason()))
                }
                VersionState::NotResident(_) => (State::End, None),
            };
            VersionStatus {
                version,
                state,
                error_code: if error.is_some() {
                    TfCode::Unknown
                } else {
                    TfCode::Ok
                },
                error_message: error.unwrap_or_default(),
            }
        })
        .collect();
    match (version, rows.is_empty()) {
        (Some(version), true) => Err(Error::VersionNotFound {
            model: record.name.clone(),
            version,
        }),
        (None, true) => Err(Error::NoAvailableVersion {
            model: record.name.clone(),
            reason: None,
        }),
        _ => Ok(rows),
    }
}

/// TF Serving's spelling of a version state in REST bodies.
pub fn state_name(state: State) -> &'static str {
    match state {
        State::Unknown => "UNKNOWN",
        State::Start => "START",
        State::Loading => "LOADING",
        State::Available => "AVAILABLE",
        State::Unloading => "UNLOADING",
        State::End => "END",
    }
}

/// A model's signatures as TF `SignatureDef`s keyed by name, with the method each declares
/// (Predict where the model format records none).
pub fn signature_defs(model: &LoadedModel) -> HashMap<String, SignatureDef> {
    let backend = &model.backend;
    backend
        .signatures()
        .iter()
        .map(|sig| {
            let method = backend
                .signature_method(&sig.name)
                .unwrap_or(PREDICT_METHOD);
            (sig.name.clone(), signature_def(sig, method))
        })
        .collect()
}

fn signature_def(sig: &Signature, method: &str) -> SignatureDef {
    let infos = |specs: &[crate::backend::TensorSpec]| {
        specs
            .iter()
            .map(|spec| {
                let info = TensorInfo {
                    encoding: Some(tensor_info::Encoding::Name(spec.name.clone())),
                    dtype: tensor_proto::tf_dtype(spec.dtype) as i32,
                    tensor_shape: Some(tensor_proto::shape_proto(spec.shape.iter().copied())),
                };
                (spec.name.clone(), info)
            })
            .collect()
    };
    SignatureDef {
        inputs: infos(&sig.inputs),
        outputs: infos(&sig.outputs),
        method_name: method.to_owned(),
        defaults: HashMap::new(),
    }
}
