//! `DIR/<model>/config.pbtxt`: Triton's model configuration, read so that a Triton model
//! repository serves as it did under Triton.
//!
//! The file is text-format `inference.ModelConfig` (the message in
//! `proto/kserve/model_config.proto`). What it says is mapped onto tensorport's own
//! [`ModelConfig`]:
//!
//! | config.pbtxt | tensorport |
//! | --- | --- |
//! | `max_batch_size` with `dynamic_batching` | `[batching] max_batch_size` |
//! | `dynamic_batching.max_queue_delay_microseconds` | `[batching] max_queue_delay_us` |
//! | `dynamic_batching.preferred_batch_size` | `[batching] preferred_batch_sizes` |
//! | `dynamic_batching.default_queue_policy.max_queue_size` | `[batching] max_queue_size` |
//! | `dynamic_batching.priority_levels` | two levels at most (KServe `priority` 1 runs first) |
//! | `max_batch_size` | the largest batch a request may carry (`max_batch_size`), reported as set |
//! | `input` / `output` (`name`, `data_type`, `dims`, `reshape`) | `[[input]]` / `[[output]]`, with a leading batch dimension when `max_batch_size > 0`; checked against the model file when it loads (see `contract`) |
//! | `output.label_filename` | the labels of the classification extension |
//! | `instance_group` (`count`, summed over groups) | `[instances] count` |
//! | `parameters` `share_session_between_instances` (the ONNX Runtime backend's) | `[instances] share_session` (here the default is to share) |
//! | `version_policy` (`latest`, `all`, `specific`) | `[version_policy]` |
//! | `default_model_filename` | the model file looked for in each version folder |
//! | `platform` / `backend` | checked against the model file found |
//! | `model_warmup`, `parameters`, `optimization` | see [`super::triton_runtime`] |
//! | `platform: "ensemble"` with `ensemble_scheduling { step [..] }` | `[[ensemble.step]]` (see `crate::pipeline`) |
//!
//! Every other field that is set is named once in [`TritonConfig::ignored`], which the
//! repository logs when it loads the model. `max_batch_size > 0` without `dynamic_batching`
//! means, as in Triton, that the model takes a batch dimension but requests are not merged.

use crate::proto::inference as triton;
use crate::textproto::{self, TextProtoError};

use super::declared::{DeclaredDim, DeclaredTensor};
use super::model_config::{InstancesConfig, ModelConfig, VersionPolicyTable};
use super::triton_runtime;
use crate::batcher::BatchSettings;
use crate::pipeline::{EnsembleConfig, StepConfig};

/// The name of Triton's per-model configuration file.
pub const TRITON_CONFIG_FILE: &str = "config.pbtxt";

/// A `config.pbtxt` mapped onto tensorport's settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TritonConfig {
    pub config: ModelConfig,
    /// Fields that are set but not applied, one entry each (e.g. `optimization`).
    pub ignored: Vec<String>,
}

/// Why a `config.pbtxt` was refused.
#[derive(Debug, thiserror::Error)]
pub enum TritonConfigError {
    #[error(transparent)]
    Parse(#[from] TextProtoError),
    #[error("{0}")]
    Invalid(String),
}

impl TritonConfig {
    /// Parses the text of a `config.pbtxt` for the model in folder `model`.
    pub fn parse(model: &str, text: &str) -> Result<Self, TritonConfigError> {
        let parsed: triton::ModelConfig = textproto::parse("inference.ModelConfig", text)?;
        Self::from_proto(model, &parsed)
    }

    fn from_proto(model: &str, parsed: &triton::ModelConfig) -> Result<Self, TritonConfigError> {
        let mut ignored = Vec::new();
        if !parsed.name.is_empty() && parsed.name != model {
            ignored.push(format!(
                "name (\"{}\": the folder's name, \"{model}\", is the model's name)",
                parsed.name
            ));
        }
        let max_batch_size = usize::try_from(parsed.max_batch_size).map_err(|_| {
            TritonConfigError::Invalid("max_batch_size must not be negative".into())
        })?;
        let mut config = ModelConfig {
            batching: batching(parsed, max_batch_size, &mut ignored)?,
            version_policy: version_policy(parsed.version_policy.as_ref()),
            input: Vec::new(),
            output: Vec::new(),
            model_filename: (!parsed.default_model_filename.is_empty())
                .then(|| parsed.default_model_filename.clone()),
            platform: platform(parsed),
            ..ModelConfig::default()
        };
        let batch_dim = max_batch_size > 0;
        for input in &parsed.input {
            if input.format != triton::model_input::Format::None as i32 {
                ignored.push(format!(
                    "input {}: format {} (tensors are passed as laid out; dims say the shape)",
                    input.name,
                    triton::model_input::Format::try_from(input.format)
                        .map_or("unknown", |f| f.as_str_name())
                ));
            }
            if input.optional || input.allow_ragged_batch || input.is_shape_tensor {
                ignored.push(format!(
                    "input {}: optional, allow_ragged_batch and is_shape_tensor",
                    input.name
                ));
            }
            let mut tensor = declared(&input.name, input.data_type, &input.dims, batch_dim)?;
            tensor.reshape = input
                .reshape
                .as_ref()
                .map(|reshape| with_batch(&reshape.shape, batch_dim));
            config.input.push(tensor);
        }
        for output in &parsed.output {
            let mut tensor = declared(&output.name, output.data_type, &output.dims, batch_dim)?;
            tensor.reshape = output
                .reshape
                .as_ref()
                .map(|reshape| with_batch(&reshape.shape, batch_dim));
            tensor.label_filename =
                (!output.label_filename.is_empty()).then(|| output.label_filename.clone());
            config.output.push(tensor);
        }
        // Triton completes an unset max_batch_size from the model file along with the
        // tensors; a file that declares its tensors states its batching with them.
        let declares_tensors = !parsed.input.is_empty() || !parsed.output.is_empty();
        if max_batch_size > 0 || declares_tensors {
            config.max_batch_size = Some(max_batch_size);
        }
        if !parsed.instance_group.is_empty() {
            let count: i64 = parsed
                .instance_group
                .iter()
                .map(|group| i64::from(group.count.max(1)))
                .sum();
            config.instances = Some(InstancesConfig {
                count: Some(usize::try_from(count).unwrap_or(1)),
                share_session: None,
            });
            if parsed.instance_group.iter().any(|g| {
                !g.gpus.is_empty() || g.kind == triton::model_instance_group::Kind::Gpu as i32
            }) {
                ignored.push(
                    "instance_group: kind KIND_GPU and gpus (instances run on the CPU)".into(),
                );
            }
        }
        if let Some(shared) =
            triton_runtime::share_session(parsed).map_err(TritonConfigError::Invalid)?
        {
            let instances = config.instances.get_or_insert_with(Default::default);
            instances.share_session = Some(shared);
        }
        config.response_cache.enable = parsed.response_cache.as_ref().map(|c| c.enable);
        config.ensemble = ensemble(parsed)?;
        config.warmup = triton_runtime::warmup(parsed, max_batch_size, &mut ignored);
        config.runtime =
            triton_runtime::runtime(parsed, &mut ignored).map_err(TritonConfigError::Invalid)?;
        triton_runtime::optimization(parsed, &mut config.runtime, &mut ignored)
            .map_err(TritonConfigError::Invalid)?;
        ignored.extend(unapplied(parsed));
        Ok(Self { config, ignored })
    }
}

/// `[batching]` from `max_batch_size` and `dynamic_batching`.
fn batching(
    parsed: &triton::ModelConfig,
    max_batch_size: usize,
    ignored: &mut Vec<String>,
) -> Result<Option<BatchSettings>, TritonConfigError> {
    use triton::model_config::SchedulingChoice;
    let dynamic = match &parsed.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(dynamic)) => dynamic,
        Some(SchedulingChoice::SequenceBatching(_)) => {
            // Serving a stateful model without its sequence scheduler (which routes a
            // sequence to one instance and feeds the control inputs) would answer wrongly.
            return Err(TritonConfigError::Invalid(
                "sequence_batching: stateful sequence models are not served (no sequence \
                 scheduler feeds their control inputs or keeps a sequence on one instance)"
                    .into(),
            ));
        }
        // An ensemble's steps run on their own models' batchers (see `pipeline`).
        Some(SchedulingChoice::EnsembleScheduling(_)) => return Ok(None),
        None => return Ok(None),
    };
    if max_batch_size == 0 {
        return Err(TritonConfigError::Invalid(
            "dynamic_batching needs max_batch_size above 0".into(),
        ));
    }
    let mut settings = BatchSettings {
        max_batch_size,
        max_queue_delay_us: dynamic.max_queue_delay_microseconds,
        preferred_batch_sizes: dynamic
            .preferred_batch_size
            .iter()
            .map(|&size| {
                usize::try_from(size).map_err(|_| {
                    TritonConfigError::Invalid(format!(
                        "dynamic_batching: preferred_batch_size {size} must be positive"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        ..BatchSettings::default()
    };
    if let Some(policy) = &dynamic.default_queue_policy {
        if policy.max_queue_size > 0 {
            settings.max_queue_size = usize::try_from(policy.max_queue_size).unwrap_or(usize::MAX);
        }
        if policy.default_timeout_microseconds > 0 || policy.timeout_action != 0 {
            ignored.push(
                "dynamic_batching.default_queue_policy: timeout_action and \
                 default_timeout_microseconds (deadlines come from the request or \
                 --request-timeout-ms)"
                    .into(),
            );
        }
    }
    if dynamic.priority_levels > 2 {
        ignored.push(format!(
            "dynamic_batching.priority_levels: {} (two levels: the default and priority 1)",
            dynamic.priority_levels
        ));
    }
    if dynamic.preserve_ordering {
        ignored.push("dynamic_batching.preserve_ordering (answers follow completion)".into());
    }
    if !dynamic.priority_queue_policy.is_empty() {
        ignored.push("dynamic_batching.priority_queue_policy".into());
    }
    settings
        .validate()
        .map_err(|err| TritonConfigError::Invalid(format!("dynamic_batching: {err}")))?;
    Ok(Some(settings))
}

/// `ensemble_scheduling`'s steps, in Triton's terms (`input_map`: the step model's input ->
/// the ensemble tensor; `output_map`: the step model's output -> the ensemble tensor).
fn ensemble(parsed: &triton::ModelConfig) -> Result<Option<EnsembleConfig>, TritonConfigError> {
    use triton::model_config::SchedulingChoice;
    let Some(SchedulingChoice::EnsembleScheduling(scheduling)) = &parsed.scheduling_choice else {
        return Ok(None);
    };
    if scheduling.step.is_empty() {
        return Err(TritonConfigError::Invalid(
            "ensemble_scheduling lists no step: ensembles need at least one".into(),
        ));
    }
    let step = scheduling
        .step
        .iter()
        .map(|step| StepConfig {
            model: step.model_name.clone(),
            version: step.model_version,
            input_map: step.input_map.clone().into_iter().collect(),
            output_map: step.output_map.clone().into_iter().collect(),
        })
        .collect();
    Ok(Some(EnsembleConfig { step }))
}

fn version_policy(policy: Option<&triton::ModelVersionPolicy>) -> VersionPolicyTable {
    use triton::model_version_policy::PolicyChoice;
    let mut table = VersionPolicyTable::default();
    match policy.and_then(|p| p.policy_choice.as_ref()) {
        Some(PolicyChoice::Latest(latest)) => {
            table.latest = Some(usize::try_from(latest.num_versions).unwrap_or(usize::MAX));
        }
        Some(PolicyChoice::All(_)) => table.all = Some(true),
        Some(PolicyChoice::Specific(specific)) => {
            table.specific = Some(
                specific
                    .versions
                    .iter()
                    .filter_map(|&v| u64::try_from(v).ok())
                    .collect(),
            );
        }
        None => {}
    }
    table
}

/// The platform `platform` or `backend` names, in Triton's platform spelling.
fn platform(parsed: &triton::ModelConfig) -> Option<String> {
    let named = if parsed.platform.is_empty() {
        &parsed.backend
    } else {
        &parsed.platform
    };
    let platform = match named.as_str() {
        "" => return None,
        "onnxruntime" | "onnxruntime_onnx" => "onnxruntime_onnx",
        "pytorch" | "pytorch_libtorch" => "pytorch_libtorch",
        "tensorflow" | "tensorflow_savedmodel" => "tensorflow_savedmodel",
        other => other,
    };
    Some(platform.to_owned())
}

/// One `input` or `output` as a declared tensor.
fn declared(
    name: &str,
    data_type: i32,
    dims: &[i64],
    batch_dim: bool,
) -> Result<DeclaredTensor, TritonConfigError> {
    let dtype = triton::DataType::try_from(data_type)
        .ok()
        .filter(|t| *t != triton::DataType::TypeInvalid)
        .ok_or_else(|| TritonConfigError::Invalid(format!("{name}: data_type is missing")))?;
    let dtype = match dtype {
        triton::DataType::TypeString => "BYTES".to_owned(),
        other => other.as_str_name().trim_start_matches("TYPE_").to_owned(),
    };
    Ok(DeclaredTensor {
        name: name.to_owned(),
        dtype,
        shape: with_batch(dims, batch_dim),
        reshape: None,
        label_filename: None,
    })
}

/// `dims` as a whole shape: after a dynamic batch dimension when the model batches.
fn with_batch(dims: &[i64], batch_dim: bool) -> Vec<DeclaredDim> {
    let mut shape = Vec::with_capacity(dims.len() + 1);
    if batch_dim {
        shape.push(DeclaredDim::Named("batch".into()));
    }
    shape.extend(dims.iter().map(|&d| DeclaredDim::Size(d)));
    shape
}

/// The fields that are set and have no counterpart here.
fn unapplied(parsed: &triton::ModelConfig) -> Vec<String> {
    let set = [
        ("runtime", !parsed.runtime.is_empty()),
        ("batch_input", !parsed.batch_input.is_empty()),
        ("batch_output", !parsed.batch_output.is_empty()),
        ("cc_model_filenames", !parsed.cc_model_filenames.is_empty()),
        ("metric_tags", !parsed.metric_tags.is_empty()),
        ("model_operations", parsed.model_operations.is_some()),
        (
            "model_transaction_policy",
            parsed.model_transaction_policy.is_some(),
        ),
        (
            "model_repository_agents",
            parsed.model_repository_agents.is_some(),
        ),
        ("model_metrics", parsed.model_metrics.is_some()),
    ];
    set.iter()
        .filter(|(_, is_set)| *is_set)
        .map(|(name, _)| (*name).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_session_between_instances_maps_to_the_instances() -> Result<(), TritonConfigError> {
        let own = TritonConfig::parse(
            "ranker",
            r#"
            backend: "onnxruntime"
            instance_group [ { count: 2 kind: KIND_CPU } ]
            parameters { key: "share_session_between_instances" value { string_value: "0" } }
            "#,
        )?;
        let instances = own.config.instances.unwrap_or_default();
        assert_eq!(
            (instances.count, instances.share_session),
            (Some(2), Some(false))
        );
        assert!(
            !own.config
                .ignored
                .iter()
                .any(|i| i.contains("share_session")),
            "{:?}",
            own.config.ignored
        );
        let bad = TritonConfig::parse(
            "ranker",
            r#"parameters { key: "share_session_between_instances" value { string_value: "yes" } }"#,
        );
        assert!(bad.is_err());
        Ok(())
    }

    #[test]
    fn maps_batching_versions_instances_tensors_and_the_file_name() -> Result<(), TritonConfigError>
    {
        let triton = TritonConfig::parse(
            "ranker",
            r#"
            name: "ranker"
            backend: "onnxruntime"
            max_batch_size: 16
            default_model_filename: "ranker.onnx"
            version_policy: { all: {} }
            input [ { name: "features", data_type: TYPE_FP32, dims: [ 16 ] } ]
            output [ { name: "score", data_type: TYPE_FP32, dims: [ 1 ] } ]
            dynamic_batching {
              preferred_batch_size: [ 8, 16 ]
              max_queue_delay_microseconds: 200
              default_queue_policy { max_queue_size: 64 }
            }
            instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 } ]
            "#,
        )?;
        let config = &triton.config;
        let batching = config.batching.clone().unwrap_or_default();
        assert_eq!(batching.max_batch_size, 16);
        assert_eq!(batching.max_queue_delay_us, 200);
        assert_eq!(batching.preferred_batch_sizes, vec![8, 16]);
        assert_eq!(batching.max_queue_size, 64);
        assert_eq!(config.version_policy.all, Some(true));
        assert_eq!(config.instances.and_then(|i| i.count), Some(3));
        assert_eq!(config.model_filename.as_deref(), Some("ranker.onnx"));
        assert_eq!(config.platform.as_deref(), Some("onnxruntime_onnx"));
        assert_eq!(
            config.input.first().map(|t| t.shape.clone()),
            Some(vec![
                DeclaredDim::Named("batch".into()),
                DeclaredDim::Size(16)
            ])
        );
        assert_eq!(
            config.output.first().map(|t| t.dtype.as_str()),
            Some("FP32")
        );
        assert!(triton.ignored.is_empty(), "{:?}", triton.ignored);
        Ok(())
    }

    #[test]
    fn batch_dimension_without_dynamic_batching_merges_nothing() -> Result<(), TritonConfigError> {
        let triton = TritonConfig::parse(
            "m",
            "max_batch_size: 8\ninput [ { name: \"x\", data_type: TYPE_STRING, dims: [ -1 ] } ]",
        )?;
        assert_eq!(triton.config.batching, None);
        let input = triton.config.input.first().cloned();
        assert_eq!(
            input.map(|t| (t.dtype, t.shape.len())),
            Some(("BYTES".into(), 2))
        );
        Ok(())
    }

    #[test]
    fn names_every_field_it_does_not_apply() -> Result<(), TritonConfigError> {
        let triton = TritonConfig::parse(
            "m",
            r#"
            name: "other"
            optimization {
              graph { level: 1 }
              execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" } ] }
            }
            parameters { key: "threads" value { string_value: "4" } }
            model_warmup [ { name: "w" batch_size: 1 }, { name: "second" } ]
            input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] reshape { shape: [ 1, 2 ] } } ]
            "#,
        )?;
        let ignored = triton.ignored.join("; ");
        for field in [
            "name",
            "optimization",
            "parameters (threads)",
            "model_warmup",
        ] {
            assert!(ignored.contains(field), "{field} in {ignored}");
        }
        // A reshape and the graph level are applied, not ignored.
        assert!(!ignored.contains("reshape"), "{ignored}");
        assert!(!ignored.contains("graph"), "{ignored}");
        assert_eq!(
            triton.config.runtime.graph_optimization,
            Some(crate::backend::onnx::GraphOptimization::Extended)
        );
        assert_eq!(
            triton.config.input.first().and_then(|t| t.reshape.clone()),
            Some(vec![DeclaredDim::Size(1), DeclaredDim::Size(2)])
        );
        Ok(())
    }

    #[test]
    fn refuses_what_cannot_work() {
        for (text, needle) in [
            ("dynamic_batching { }", "max_batch_size above 0"),
            ("max_batch_size: -1", "negative"),
            ("ensemble_scheduling { }", "ensembles"),
            ("input [ { name: \"x\" dims: [ 1 ] } ]", "data_type"),
            (
                "max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 9 ] }",
                "preferred",
            ),
            ("max_batch_sise: 4", "max_batch_sise"),
        ] {
            let err = TritonConfig::parse("m", text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
