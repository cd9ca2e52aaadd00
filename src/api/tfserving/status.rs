//! A model's version statuses, as both transports report them (REST `GET /v1/models/{name}`
//! and gRPC `ModelService.GetModelStatus`).

use crate::error::Error;
use crate::proto::tensorflow::error::Code as TfCode;
use crate::proto::tensorflow::serving::model_version_status::State;
use crate::repository::{ModelRecord, RepositoryError, Residence, VersionState};

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
        (Some(version), true) => Err(RepositoryError::VersionNotFound {
            model: record.name.clone(),
            version,
        }
        .into()),
        (None, true) => Err(RepositoryError::NoAvailableVersion {
            model: record.name.clone(),
            reason: None,
        }
        .into()),
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
