//! The parts of a `config.pbtxt` that tune the runtime rather than describe the model:
//! `model_warmup`, `parameters` and `optimization`, mapped where tensorport has the setting
//! and otherwise named, with what happens instead, for the load-time log line.
//!
//! | config.pbtxt | tensorport |
//! | --- | --- |
//! | `model_warmup` (first sample: `batch_size`, `inputs` dims, `count`) | `[warmup]`: `count` requests (at least one) of zeros in those shapes |
//! | `parameters` `intra_op_thread_count` / `inter_op_thread_count` (the ONNX Runtime backend's) | `[runtime] intra_op_threads` / `inter_op_threads` |
//! | `parameters` `execution_mode` `"0"` / `"1"` | `[runtime] execution_mode = "sequential"` / `"parallel"` |
//! | `parameters` `enable_mem_arena`, `enable_mem_pattern` (`"1"` / `"0"`, also `true` / `false`, `on` / `off`) | `[runtime] cpu_arena`, `memory_pattern` |
//! | `parameters` `session.use_device_allocator_for_initializers` | `[runtime] device_allocator_for_initializers` |
//! | `parameters` `session.intra_op.allow_spinning`, `session.inter_op.allow_spinning` (ONNX Runtime's own keys) | `[runtime] intra_op_spinning`, `inter_op_spinning` |
//! | `parameters` `memory.enable_memory_arena_shrinkage` | warned: the arena keeps what it grew to (the memory budget charges it) |
//! | `optimization { graph { level } }`: `-1`, `1`, `2`, `0` | `[runtime] graph_optimization = "basic"`, `"extended"`, `"disable"`, ONNX Runtime's default (`"all"`); other levels are refused |
//! | `optimization` accelerators, `cuda`, pinned memory, `priority` | warned: models run on ONNX Runtime's CPU execution provider |
//!
//! A boolean or mode that is not one of its values (`enable_mem_arena: "2"`) fails the load,
//! naming the key and the value, as a thread count that is not a number does.

use std::collections::BTreeMap;

use super::model_config::WarmupConfig;
use super::runtime_config::RuntimeConfig;
use crate::backend::onnx::{ExecutionMode, GraphOptimization};
use crate::proto::inference as triton;

/// `[warmup]` from `model_warmup`: the first sample's shapes and count. Triton runs every
/// sample; the others are named in `ignored`, as are data choices other than zeros.
pub fn warmup(
    parsed: &triton::ModelConfig,
    max_batch_size: usize,
    ignored: &mut Vec<String>,
) -> Option<WarmupConfig> {
    let (first, others) = parsed.model_warmup.split_first()?;
    if !others.is_empty() {
        let names: Vec<&str> = others.iter().map(|s| s.name.as_str()).collect();
        ignored.push(format!(
            "model_warmup samples after the first ({}): the first sample's shapes warm up",
            names.join(", ")
        ));
    }
    let batch_size = usize::try_from(first.batch_size.max(1)).unwrap_or(1);
    let mut shapes = BTreeMap::new();
    for (name, input) in &first.inputs {
        use triton::model_warmup::input::InputDataType;
        match &input.input_data_type {
            Some(InputDataType::RandomData(true)) => ignored.push(format!(
                "model_warmup input {name}: random_data (warmup inputs are zeros)"
            )),
            Some(InputDataType::InputDataFile(file)) => ignored.push(format!(
                "model_warmup input {name}: input_data_file {file} (warmup inputs are zeros)"
            )),
            _ => {}
        }
        let mut shape = Vec::with_capacity(input.dims.len() + 1);
        if max_batch_size > 0 {
            shape.push(batch_size);
        }
        // Warmup shapes are fixed; a dynamic dimension gets one element, as elsewhere.
        shape.extend(input.dims.iter().map(|&d| usize::try_from(d).unwrap_or(1)));
        shapes.insert(name.clone(), shape);
    }
    Some(WarmupConfig {
        requests: usize::try_from(first.count.max(1)).unwrap_or(1),
        batch_size,
        shapes,
    })
}

/// The ONNX Runtime backend's parameters (threads, execution mode, arena, memory pattern,
/// initializers' allocator) and ONNX Runtime's own spinning keys; every other parameter is
/// named in `ignored`. A value that is not of its kind is refused, naming the key and value.
pub fn runtime(
    parsed: &triton::ModelConfig,
    ignored: &mut Vec<String>,
) -> Result<RuntimeConfig, String> {
    let mut runtime = RuntimeConfig::default();
    let mut unapplied = Vec::new();
    for (key, value) in &parsed.parameters {
        let text = value.string_value.as_str();
        let threads = || {
            text.trim()
                .parse::<usize>()
                .map_err(|_| format!("parameters {key}: \"{text}\" is not a thread count"))
        };
        let flag = || Some(parse_flag(key, text)).transpose();
        match key.as_str() {
            "intra_op_thread_count" => runtime.intra_op_threads = Some(threads()?),
            "inter_op_thread_count" => runtime.inter_op_threads = Some(threads()?),
            "execution_mode" => {
                runtime.execution_mode = Some(match text.trim() {
                    "0" => ExecutionMode::Sequential,
                    "1" => ExecutionMode::Parallel,
                    _ => {
                        return Err(format!(
                            "parameters {key}: \"{text}\" is not 0 (sequential) or 1 (parallel)"
                        ))
                    }
                });
            }
            "enable_mem_arena" => runtime.cpu_arena = flag()?,
            "enable_mem_pattern" => runtime.memory_pattern = flag()?,
            "session.use_device_allocator_for_initializers" => {
                runtime.device_allocator_for_initializers = flag()?;
            }
            "session.intra_op.allow_spinning" => runtime.intra_op_spinning = flag()?,
            "session.inter_op.allow_spinning" => runtime.inter_op_spinning = flag()?,
            "memory.enable_memory_arena_shrinkage" => ignored.push(format!(
                "parameters memory.enable_memory_arena_shrinkage (\"{text}\"): the arena is not \
                 shrunk after runs; it keeps what it grew to, which the model memory budget \
                 charges"
            )),
            // Read with the instances (`share_session`).
            "share_session_between_instances" => {}
            other => unapplied.push(other),
        }
    }
    if !unapplied.is_empty() {
        unapplied.sort_unstable();
        ignored.push(format!("parameters ({})", unapplied.join(", ")));
    }
    Ok(runtime)
}

/// The ONNX Runtime backend's `share_session_between_instances`: whether the instances of a
/// version run one session; `None` when the file does not say.
pub fn share_session(parsed: &triton::ModelConfig) -> Result<Option<bool>, String> {
    const KEY: &str = "share_session_between_instances";
    parsed
        .parameters
        .get(KEY)
        .map(|value| parse_flag(KEY, &value.string_value))
        .transpose()
}

/// A boolean parameter as Triton's backends read one: 1, true or on; 0, false or off.
fn parse_flag(key: &str, text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" => Ok(true),
        "0" | "false" | "off" => Ok(false),
        _ => Err(format!(
            "parameters {key}: \"{text}\" is not 1 or 0 (nor true / false, on / off)"
        )),
    }
}

/// `optimization`: the graph level as Triton's ONNX Runtime backend reads it, into `runtime`;
/// the rest named with what it asked for. A level that backend does not take is refused.
pub fn optimization(
    parsed: &triton::ModelConfig,
    runtime: &mut RuntimeConfig,
    ignored: &mut Vec<String>,
) -> Result<(), String> {
    let Some(optimization) = &parsed.optimization else {
        return Ok(());
    };
    if let Some(graph) = &optimization.graph {
        runtime.graph_optimization = match graph.level {
            // 0 (also an empty `graph { }`) leaves ONNX Runtime's default, every optimization.
            0 => None,
            -1 => Some(GraphOptimization::Basic),
            1 => Some(GraphOptimization::Extended),
            2 => Some(GraphOptimization::Disable),
            level => {
                return Err(format!(
                    "optimization graph level {level}: the levels are -1 (basic), 1 (basic and \
                     extended), 2 (none) and 0 (all, the default)"
                ))
            }
        };
    }
    let mut asked = Vec::new();
    if let Some(accelerators) = &optimization.execution_accelerators {
        let names: Vec<&str> = accelerators
            .cpu_execution_accelerator
            .iter()
            .chain(&accelerators.gpu_execution_accelerator)
            .map(|a| a.name.as_str())
            .collect();
        asked.push(format!("execution_accelerators {}", names.join(", ")));
    }
    if optimization.cuda.is_some() {
        asked.push("cuda".into());
    }
    if optimization.input_pinned_memory.is_some() || optimization.output_pinned_memory.is_some() {
        asked.push("pinned memory".into());
    }
    if optimization.priority != 0 {
        asked.push("priority".into());
    }
    if !asked.is_empty() {
        ignored.push(format!(
            "optimization ({}): models run on ONNX Runtime's CPU execution provider, without \
             accelerators, pinned memory or priorities",
            asked.join("; ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::textproto;

    fn parsed(text: &str) -> triton::ModelConfig {
        textproto::parse("inference.ModelConfig", text).unwrap_or_default()
    }

    #[test]
    fn the_first_warmup_sample_becomes_warmup_requests() {
        let config = parsed(
            r#"
            model_warmup [
              { name: "zeros" batch_size: 4 count: 3
                inputs { key: "features" value { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } },
              { name: "file" batch_size: 1
                inputs { key: "features" value { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "f" } } }
            ]
            "#,
        );
        let mut ignored = Vec::new();
        let warmup = warmup(&config, 8, &mut ignored);
        assert_eq!(warmup.as_ref().map(|w| w.requests), Some(3));
        assert_eq!(
            warmup.and_then(|w| w.shapes.get("features").cloned()),
            Some(vec![4, 16])
        );
        assert_eq!(ignored.len(), 1, "{ignored:?}");
        assert!(ignored[0].contains("file"), "{ignored:?}");
    }

    #[test]
    fn thread_parameters_apply_and_the_rest_are_named() -> Result<(), String> {
        let config = parsed(
            r#"
            parameters { key: "intra_op_thread_count" value { string_value: "2" } }
            parameters { key: "cudnn_conv_algo_search" value { string_value: "1" } }
            "#,
        );
        let mut ignored = Vec::new();
        let runtime = runtime(&config, &mut ignored)?;
        assert_eq!(runtime.intra_op_threads, Some(2));
        assert_eq!(runtime.inter_op_threads, None);
        assert_eq!(
            ignored,
            vec!["parameters (cudnn_conv_algo_search)".to_owned()]
        );
        let bad =
            parsed(r#"parameters { key: "inter_op_thread_count" value { string_value: "two" } }"#);
        let err = super::runtime(&bad, &mut ignored).err().unwrap_or_default();
        assert!(err.contains("not a thread count"), "{err}");
        Ok(())
    }

    #[test]
    fn optimization_is_named_with_what_it_asked_for() {
        let config = parsed(
            r#"optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" } ] } }"#,
        );
        let mut ignored = Vec::new();
        let mut runtime = RuntimeConfig::default();
        assert_eq!(optimization(&config, &mut runtime, &mut ignored), Ok(()));
        assert!(ignored[0].contains("openvino"), "{ignored:?}");
        assert_eq!(runtime, RuntimeConfig::default());
    }

    #[test]
    fn session_parameters_apply() -> Result<(), String> {
        let config = parsed(
            r#"
            parameters { key: "execution_mode" value { string_value: "1" } }
            parameters { key: "enable_mem_arena" value { string_value: "0" } }
            parameters { key: "enable_mem_pattern" value { string_value: "false" } }
            parameters { key: "session.use_device_allocator_for_initializers" value { string_value: "1" } }
            parameters { key: "session.intra_op.allow_spinning" value { string_value: "0" } }
            parameters { key: "session.inter_op.allow_spinning" value { string_value: "ON" } }
            parameters { key: "memory.enable_memory_arena_shrinkage" value { string_value: "cpu:0" } }
            "#,
        );
        let mut ignored = Vec::new();
        let runtime = runtime(&config, &mut ignored)?;
        assert_eq!(runtime.execution_mode, Some(ExecutionMode::Parallel));
        assert_eq!(runtime.cpu_arena, Some(false));
        assert_eq!(runtime.memory_pattern, Some(false));
        assert_eq!(runtime.device_allocator_for_initializers, Some(true));
        assert_eq!(runtime.intra_op_spinning, Some(false));
        assert_eq!(runtime.inter_op_spinning, Some(true));
        assert_eq!(ignored.len(), 1, "{ignored:?}");
        assert!(
            ignored[0].contains("memory.enable_memory_arena_shrinkage"),
            "{ignored:?}"
        );
        Ok(())
    }

    #[test]
    fn a_parameter_value_of_the_wrong_kind_is_refused_naming_key_and_value() {
        for (key, value) in [
            ("enable_mem_arena", "2"),
            ("enable_mem_pattern", "yes please"),
            ("execution_mode", "parallel"),
            ("session.intra_op.allow_spinning", ""),
        ] {
            let config = parsed(&format!(
                r#"parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}"#
            ));
            let err = runtime(&config, &mut Vec::new()).err().unwrap_or_default();
            assert!(err.contains(key), "{key}: {err}");
            assert!(err.contains(&format!("\"{value}\"")), "{key}: {err}");
        }
    }

    #[test]
    fn graph_levels_mean_what_they_mean_to_tritons_onnx_runtime_backend() {
        for (level, want) in [
            (-1, Some(GraphOptimization::Basic)),
            (1, Some(GraphOptimization::Extended)),
            (2, Some(GraphOptimization::Disable)),
            (0, None),
        ] {
            let config = parsed(&format!("optimization {{ graph {{ level: {level} }} }}"));
            let mut ignored = Vec::new();
            let mut runtime = RuntimeConfig::default();
            assert_eq!(optimization(&config, &mut runtime, &mut ignored), Ok(()));
            assert_eq!(runtime.graph_optimization, want, "level {level}");
            assert!(ignored.is_empty(), "{ignored:?}");
        }
        let config = parsed("optimization { graph { level: 3 } }");
        let err = optimization(&config, &mut RuntimeConfig::default(), &mut Vec::new())
            .err()
            .unwrap_or_default();
        assert!(err.contains("level 3"), "{err}");
    }
}
