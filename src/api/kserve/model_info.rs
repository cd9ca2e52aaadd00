//! Model metadata, configuration and repository index in KServe / Triton terms.

use serde_json::{json, Value};

use super::codec::datatype_name;
use crate::backend::{Signature, TensorSpec};
use crate::error::Error;
use crate::infer::InferService;
use crate::pipeline::Ensemble;
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::model_ensembling::Step as EnsembleStep;
use crate::proto::inference::model_instance_group::Kind as InstanceKind;
use crate::proto::inference::{
    DataType as ConfigType, ModelConfig, ModelDynamicBatching, ModelEnsembling, ModelInput,
    ModelInstanceGroup, ModelOutput, ModelQueuePolicy,
};
use crate::repository::VersionSelector;
use crate::repository::{LoadedModel, VersionState};
use crate::request::RequestContext;
use crate::tensor::DataType;

/// Extensions this server implements, as `GET /v2` and `ServerMetadata` report them.
pub const EXTENSIONS: &[&str] = &[
    "model_repository",
    "model_configuration",
    "system_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
];

/// The largest batch reported to Triton clients for a model with a batch dimension whose
/// dynamic batching is off. Such a model runs each request alone, whatever its size, so no
/// batching setting bounds it; the figure only lets clients such as `perf_analyzer` send
/// batches. With batching on, the model's `max_batch_size` is reported instead.
pub const UNBATCHED_MAX_BATCH_SIZE: i32 = 1024;

/// Triton's backend name for a platform.
fn backend_name(platform: &str) -> &str {
    match platform {
        "onnxruntime_onnx" => "onnxruntime",
        // Triton names no backend for an ensemble: its steps have theirs.
        crate::pipeline::ENSEMBLE_PLATFORM => "",
        "pytorch_libtorch" => "pytorch",
        "tensorflow_savedmodel" | "tensorflow_graphdef" => "tensorflow",
        other => other,
    }
}

/// `max_batch_size` as Triton reports it: the configuration's where it states one, else 0
/// without a batch dimension, the dynamic batcher's limit with batching on, and
/// [`UNBATCHED_MAX_BATCH_SIZE`] otherwise.
fn reported_max_batch_size(model: &LoadedModel, batchable: bool) -> i32 {
    // The configuration's own figure (config.pbtxt's max_batch_size), which requests are
    // held to, wins over anything derived.
    if let Some(max) = model.backend.max_batch_size() {
        return i32::try_from(max).unwrap_or(i32::MAX);
    }
    let policy = model.batcher.policy();
    match (batchable, policy.batching_enabled()) {
        (false, _) => 0,
        (true, true) => i32::try_from(policy.max_batch_size()).unwrap_or(i32::MAX),
        (true, false) => UNBATCHED_MAX_BATCH_SIZE,
    }
}

pub struct TensorMetadata {
    pub name: String,
    pub datatype: &'static str,
    pub shape: Vec<i64>,
}

pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: &'static str,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

fn tensor_metadata(specs: &[TensorSpec]) -> Vec<TensorMetadata> {
    specs
        .iter()
        .map(|spec| TensorMetadata {
            name: spec.name.clone(),
            datatype: datatype_name(spec.dtype),
            shape: spec.shape.clone(),
        })
        .collect()
}

fn default_signature(model: &LoadedModel) -> Result<&Signature, Error> {
    Ok(model.signature("").map(|(_, sig)| sig)?)
}

/// `GET /v2/models/{name}[/versions/{v}]` and `ModelMetadata`.
pub async fn model_metadata(
    service: &InferService,
    name: &str,
    version: &str,
    context: Option<&RequestContext>,
) -> Result<ModelMetadata, Error> {
    let model = service
        .resolve_loading(name, VersionSelector::from_kserve(version)?, context)
        .await?;
    let sig = default_signature(&model)?;
    let snapshot = service.repository().snapshot();
    let record = snapshot.model(name)?;
    let versions = record
        .versions
        .values()
        .filter_map(|state| match state {
            VersionState::Available(loaded) => Some(loaded.reported_version()),
            _ => None,
        })
        .collect();
    Ok(ModelMetadata {
        name: model.name.to_string(),
        versions,
        platform: model.backend.platform(),
        inputs: tensor_metadata(&sig.inputs),
        outputs: tensor_metadata(&sig.outputs),
    })
}

/// Whether the first dimension of every input and output is dynamic, i.e. a batch dimension
/// in Triton's sense.
fn batchable(sig: &Signature) -> bool {
    sig.inputs
        .iter()
        .chain(&sig.outputs)
        .all(|spec| spec.shape.first() == Some(&-1))
}

/// Triton's model configuration (`ModelConfig` RPC). With a batch dimension, `dims` leave it
/// out and `max_batch_size` is positive, as Triton reports it.
pub async fn model_config(
    service: &InferService,
    name: &str,
    version: &str,
    context: Option<&RequestContext>,
) -> Result<ModelConfig, Error> {
    let model = service
        .resolve_loading(name, VersionSelector::from_kserve(version)?, context)
        .await?;
    let sig = default_signature(&model)?;
    let batch = model
        .backend
        .max_batch_size()
        .map_or_else(|| batchable(sig), |max| max > 0);
    let dims = |spec: &TensorSpec| {
        spec.shape
            .iter()
            .skip(usize::from(batch))
            .copied()
            .collect()
    };
    Ok(ModelConfig {
        name: model.name.to_string(),
        platform: model.backend.platform().to_owned(),
        backend: backend_name(model.backend.platform()).to_owned(),
        max_batch_size: reported_max_batch_size(&model, batch),
        input: sig
            .inputs
            .iter()
            .map(|spec| ModelInput {
                name: spec.name.clone(),
                data_type: config_type(spec.dtype) as i32,
                dims: dims(spec),
                ..Default::default()
            })
            .collect(),
        output: sig
            .outputs
            .iter()
            .map(|spec| ModelOutput {
                name: spec.name.clone(),
                data_type: config_type(spec.dtype) as i32,
                dims: dims(spec),
                ..Default::default()
            })
            .collect(),
        // An ensemble has no instances of its own: its steps run on their models'.
        instance_group: match &model.ensemble {
            Some(_) => Vec::new(),
            None => vec![ModelInstanceGroup {
                name: model.name.to_string(),
                kind: InstanceKind::Cpu as i32,
                count: i32::try_from(model.batcher.instances()).unwrap_or(i32::MAX),
                ..Default::default()
            }],
        },
        scheduling_choice: match &model.ensemble {
            Some(ensemble) => Some(SchedulingChoice::EnsembleScheduling(ensemble_scheduling(
                ensemble,
            ))),
            None => dynamic_batching(&model).map(SchedulingChoice::DynamicBatching),
        },
        ..Default::default()
    })
}

/// An ensemble's steps in Triton's terms (`model_version` -1: the latest).
fn ensemble_scheduling(ensemble: &Ensemble) -> ModelEnsembling {
    let step = ensemble
        .steps
        .iter()
        .map(|step| EnsembleStep {
            model_name: step.model.clone(),
            model_version: step
                .version
                .and_then(|v| i64::try_from(v).ok())
                .unwrap_or(-1),
            input_map: step.inputs.iter().cloned().collect(),
            output_map: step.outputs.iter().cloned().collect(),
            ..Default::default()
        })
        .collect();
    ModelEnsembling {
        step,
        ..Default::default()
    }
}

/// The dynamic batcher's settings as Triton spells them, when the version merges requests.
fn dynamic_batching(model: &LoadedModel) -> Option<ModelDynamicBatching> {
    let policy = model.batcher.policy();
    if !policy.batching_enabled() {
        return None;
    }
    Some(ModelDynamicBatching {
        preferred_batch_size: policy
            .preferred_batch_sizes()
            .iter()
            .map(|&size| i32::try_from(size).unwrap_or(i32::MAX))
            .collect(),
        max_queue_delay_microseconds: u64::try_from(policy.max_queue_delay().as_micros())
            .unwrap_or(u64::MAX),
        // The default level and KServe's `priority: 1`, which runs first.
        priority_levels: 2,
        default_priority_level: 2,
        default_queue_policy: Some(ModelQueuePolicy {
            max_queue_size: u32::try_from(policy.max_queue_size()).unwrap_or(u32::MAX),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The same configuration as Triton's JSON rendering (`GET /v2/models/{name}/config`).
pub fn config_json(config: &ModelConfig) -> Value {
    let type_name = |code: i32| {
        ConfigType::try_from(code)
            .map(|t| t.as_str_name())
            .unwrap_or("TYPE_INVALID")
    };
    let inputs: Vec<Value> = config
        .input
        .iter()
        .map(|i| json!({ "name": i.name, "data_type": type_name(i.data_type), "dims": i.dims }))
        .collect();
    let outputs: Vec<Value> = config
        .output
        .iter()
        .map(|o| json!({ "name": o.name, "data_type": type_name(o.data_type), "dims": o.dims }))
        .collect();
    let groups: Vec<Value> = config
        .instance_group
        .iter()
        .map(|g| {
            let kind = InstanceKind::try_from(g.kind)
                .map(|k| k.as_str_name())
                .unwrap_or("KIND_AUTO");
            json!({ "name": g.name, "kind": kind, "count": g.count })
        })
        .collect();
    let mut rendered = json!({
        "name": config.name,
        "platform": config.platform,
        "backend": config.backend,
        "max_batch_size": config.max_batch_size,
        "input": inputs,
        "output": outputs,
        "instance_group": groups,
    });
    if let (Some(SchedulingChoice::EnsembleScheduling(ensemble)), Some(object)) =
        (&config.scheduling_choice, rendered.as_object_mut())
    {
        let steps: Vec<Value> = ensemble
            .step
            .iter()
            .map(|step| {
                json!({
                    "model_name": step.model_name,
                    "model_version": step.model_version,
                    "input_map": step.input_map,
                    "output_map": step.output_map,
                })
            })
            .collect();
        object.insert("ensemble_scheduling".into(), json!({ "step": steps }));
    }
    if let (Some(SchedulingChoice::DynamicBatching(dynamic)), Some(object)) =
        (&config.scheduling_choice, rendered.as_object_mut())
    {
        let queue = dynamic
            .default_queue_policy
            .as_ref()
            .map_or(0, |policy| policy.max_queue_size);
        object.insert(
            "dynamic_batching".into(),
            json!({
                "preferred_batch_size": dynamic.preferred_batch_size,
                "max_queue_delay_microseconds": dynamic.max_queue_delay_microseconds,
                "priority_levels": dynamic.priority_levels,
                "default_priority_level": dynamic.default_priority_level,
                "default_queue_policy": { "max_queue_size": queue },
            }),
        );
    }
    rendered
}

fn config_type(dtype: DataType) -> ConfigType {
    match dtype {
        DataType::Bool => ConfigType::TypeBool,
        DataType::U8 => ConfigType::TypeUint8,
        DataType::U16 => ConfigType::TypeUint16,
        DataType::U32 => ConfigType::TypeUint32,
        DataType::U64 => ConfigType::TypeUint64,
        DataType::I8 => ConfigType::TypeInt8,
        DataType::I16 => ConfigType::TypeInt16,
        DataType::I32 => ConfigType::TypeInt32,
        DataType::I64 => ConfigType::TypeInt64,
        DataType::F16 => ConfigType::TypeFp16,
        DataType::BF16 => ConfigType::TypeBf16,
        DataType::F32 => ConfigType::TypeFp32,
        DataType::F64 => ConfigType::TypeFp64,
        DataType::String => ConfigType::TypeString,
    }
}

/// One row of the repository index.
pub struct IndexEntry {
    pub name: String,
    pub version: String,
    pub state: &'static str,
    pub reason: String,
    /// The memory a resident version is charged (`tensorport_model_memory_bytes`).
    pub memory_bytes: Option<u64>,
}

/// Every model in the repository with the state of each managed version, and (unless
/// `ready_only`) by name alone each model on disk never loaded that waits for the load API.
pub fn repository_index(service: &InferService, ready_only: bool) -> Vec<IndexEntry> {
    let mut entries = Vec::new();
    let snapshot = service.repository().snapshot();
    for record in snapshot.models() {
        for (version, state_of) in &record.versions {
            let (state, reason) = match state_of {
                VersionState::Loading => ("LOADING", String::new()),
                VersionState::Available(_) => ("READY", String::new()),
                VersionState::Unloading => ("UNLOADING", String::new()),
                VersionState::End { error: None } => ("UNAVAILABLE", "unloaded".to_owned()),
                VersionState::End { error: Some(error) } => ("UNAVAILABLE", error.clone()),
                VersionState::NotResident(residence) => ("UNAVAILABLE", residence.reason()),
            };
            let memory_bytes = match state_of {
                VersionState::Available(loaded) => Some(loaded.memory_bytes()),
                _ => None,
            };
            if ready_only && state != "READY" {
                continue;
            }
            entries.push(IndexEntry {
                name: record.name.clone(),
                version: match state_of {
                    VersionState::Available(loaded) => loaded.reported_version(),
                    _ => version.to_string(),
                },
                state,
                reason,
                memory_bytes,
            });
        }
    }
    // A model that waits for the load API and was never loaded has no version to report:
    // Triton lists it by name alone.
    if !ready_only {
        for name in snapshot.waiting() {
            if snapshot.model(name).is_err() {
                entries.push(IndexEntry {
                    name: name.to_owned(),
                    version: String::new(),
                    state: "",
                    reason: String::new(),
                    memory_bytes: None,
                });
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
    }
    entries
}
