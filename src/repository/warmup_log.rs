//! TF Serving's warmup file: `<version>/assets.extra/tf_serving_warmup_requests`, a TFRecord
//! file of `PredictionLog`s. A version that ships one replays each logged Predict request
//! before it serves, as TF Serving does; a file that cannot be read, or a request that fails,
//! fails the load of that version.

use std::path::Path;

use prost::Message;

use super::repo_file::{read_inside, WARMUP};
use super::tfrecord;
use crate::backend::Backend;
use crate::batcher::ValidRequest;
use crate::proto::tensorflow::serving::{prediction_log::LogType, PredictRequest, PredictionLog};
use crate::tensor::{tensor_proto, DecodeLimits};

/// Where TF Serving looks for the warmup file, relative to the version folder.
pub const WARMUP_FILE: &str = "assets.extra/tf_serving_warmup_requests";

/// TF Serving's cap on the records of one warmup file.
const MAX_RECORDS: usize = 1000;

/// Whether a version folder ships a warmup file: anything by that name (a link, a FIFO) is
/// found, so that what is not a regular file inside the folder fails the load saying so.
pub fn ships(version_dir: &Path) -> bool {
    std::fs::symlink_metadata(version_dir.join(WARMUP_FILE)).is_ok()
}

/// Replays every request of the warmup file of `version_dir` on `backend`; returns how many
/// ran. The file is read within [`WARMUP`] bytes, as a regular file inside the version folder.
/// Blocks.
pub fn replay(backend: &dyn Backend, version_dir: &Path) -> Result<usize, String> {
    let path = version_dir.join(WARMUP_FILE);
    let shown = path.display();
    let file =
        read_inside(version_dir, Path::new(WARMUP_FILE), WARMUP).map_err(|err| err.to_string())?;
    let records = tfrecord::records(&file).map_err(|err| format!("{shown}: {err}"))?;
    if records.len() > MAX_RECORDS {
        return Err(format!(
            "{shown}: {} records, more than the {MAX_RECORDS} a warmup file may hold",
            records.len()
        ));
    }
    for (i, record) in records.iter().enumerate() {
        let request =
            predict_request(record).map_err(|err| format!("{shown}: record {i}: {err}"))?;
        run(backend, request).map_err(|err| format!("{shown}: record {i}: {err}"))?;
    }
    Ok(records.len())
}

fn predict_request(record: &[u8]) -> Result<PredictRequest, String> {
    let log = PredictionLog::decode(record)
        .map_err(|err| format!("not a tensorflow.serving.PredictionLog: {err}"))?;
    match log.log_type {
        Some(LogType::PredictLog(predict)) => predict
            .request
            .ok_or_else(|| "the predict log holds no request".to_owned()),
        Some(_) => Err("only predict logs can be replayed (Classify, Regress and \
                        MultiInference are not served)"
            .into()),
        None => Err("the log holds no request".into()),
    }
}

fn run(backend: &dyn Backend, request: PredictRequest) -> Result<(), String> {
    let name = request
        .model_spec
        .as_ref()
        .map(|spec| spec.signature_name.as_str())
        .unwrap_or_default();
    let signatures = backend.signatures();
    let (index, signature) = if name.is_empty() {
        signatures.iter().enumerate().next()
    } else {
        signatures
            .iter()
            .enumerate()
            .find(|(_, sig)| sig.name == name)
    }
    .ok_or_else(|| format!("the model has no signature '{name}'"))?;
    let limits = DecodeLimits::default();
    let inputs = request
        .inputs
        .into_iter()
        .map(|(input, proto)| {
            tensor_proto::decode(proto, &limits)
                .map(|tensor| (input.clone(), tensor))
                .map_err(|err| err.in_input(&input).to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let valid = ValidRequest::new(signatures, index, inputs, request.output_filter, Vec::new())
        .map_err(|err| err.to_string())?;
    let outputs = valid.outputs().to_vec();
    backend
        .run(signature, valid.into_inputs(), &outputs)
        .map(|_| ())
        .map_err(|err| err.to_string())
}
