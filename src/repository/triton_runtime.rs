//! The parts of a `config.pbtxt` that tune the runtime rather than describe the model:
//! `model_warmup`, `parameters` and `optimization`, mapped where tensorport has the setting
//! and otherwise named, with what happens instead, for the load-time log line.
//!
//! | config.pbtxt | tensorport |
//! | --- | --- |
//! | `model_warmup` (first sample: `batch_size`, `inputs` dims, `count`) | `[warmup]`: `count` requests (at least one) of zeros in those shapes |
//! | `parameters` `intra_op_thread_count` / `inter_op_thread_count` (the ONNX Runtime backend's) | `[runtime] intra_op_threads` / `inter_op_threads` |
//! | `optimization` | warned: ONNX Runtime runs with its default graph optimizations, on the CPU |

use std::collections::BTreeMap;

use super::declared::RuntimeConfig;
use super::model_config::WarmupConfig;
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

/// The ONNX Runtime backend's thread parameters; every other parameter is named in
/// `ignored`. A thread count that is not a number is refused.
pub fn runtime(
    parsed: &triton::ModelConfig,
    ignored: &mut Vec<String>,
) -> Result<RuntimeConfig, String> {
    let mut runtime = RuntimeConfig::default();
    let mut unapplied = Vec::new();
    for (key, value) in &parsed.parameters {
        let threads = || {
            value.string_value.trim().parse::<usize>().map_err(|_| {
                format!(
                    "parameters {key}: \"{}\" is not a thread count",
                    value.string_value
                )
            })
        };
        match key.as_str() {
            "intra_op_thread_count" => runtime.intra_op_threads = Some(threads()?),
            "inter_op_thread_count" => runtime.inter_op_threads = Some(threads()?),
            other => unapplied.push(other),
        }
    }
    if !unapplied.is_empty() {
        unapplied.sort_unstable();
        ignored.push(format!("parameters ({})", unapplied.join(", ")));
    }
    Ok(runtime)
}

/// `optimization`, named with what it asked for.
pub fn optimization(parsed: &triton::ModelConfig, ignored: &mut Vec<String>) {
    let Some(optimization) = &parsed.optimization else {
        return;
    };
    let mut asked = Vec::new();
    if let Some(graph) = &optimization.graph {
        asked.push(format!("graph level {}", graph.level));
    }
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
    let asked = if asked.is_empty() {
        String::new()
    } else {
        format!(" ({})", asked.join("; "))
    };
    ignored.push(format!(
        "optimization{asked}: ONNX Runtime runs with its default graph optimizations, on the CPU"
    ));
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
            parameters { key: "enable_mem_arena" value { string_value: "1" } }
            "#,
        );
        let mut ignored = Vec::new();
        let runtime = runtime(&config, &mut ignored)?;
        assert_eq!(runtime.intra_op_threads, Some(2));
        assert_eq!(runtime.inter_op_threads, None);
        assert_eq!(ignored, vec!["parameters (enable_mem_arena)".to_owned()]);
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
        optimization(&config, &mut ignored);
        assert!(ignored[0].contains("openvino"), "{ignored:?}");
    }
}
