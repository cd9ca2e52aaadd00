//! ONNX Runtime session options (config.toml's `[runtime]`, config.pbtxt's `optimization` and
//! `parameters`) change how a session runs, never what it answers.

// Test code fails loudly: a panic is a failed test with its message.
#![allow(clippy::expect_used)]

mod common;

use common::{onnx_runtime, repo_path, TestResult};
use tensorport::backend::onnx::{ExecutionMode, GraphOptimization, OnnxModel, OnnxSessionOptions};
use tensorport::backend::{Backend, RuntimeThreads};
use tensorport::tensor::Tensor;

const FEATURES: usize = 16;
const RANKER: &str = "examples/models/ranker/2/model.onnx";

fn scores(model: &OnnxModel, rows: usize) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let values: Vec<f32> = (0..rows * FEATURES)
        .map(|i| (i as f32 * 0.37).sin())
        .collect();
    let input = Tensor::from_vec(vec![rows, FEATURES], values)?;
    let signature = model.signatures()[0].clone();
    let outputs = model.run(
        &signature,
        vec![("features".into(), input)],
        &["score".to_owned()],
    )?;
    Ok(outputs[0].1.view::<f32>()?.into_owned())
}

/// Every option set away from its default, the CPU arena off included: the model loads and
/// answers as with the defaults.
#[test]
fn a_model_with_every_option_changed_answers_the_same() -> TestResult {
    let load = |options: &OnnxSessionOptions| {
        onnx_runtime().load_model(
            &repo_path(RANKER),
            RuntimeThreads::default(),
            options,
            1,
            true,
        )
    };
    let plain = load(&OnnxSessionOptions::default())?;
    let tuned = load(&OnnxSessionOptions {
        graph_optimization: Some(GraphOptimization::Disable),
        optimized_model_file: None,
        memory_pattern: Some(false),
        cpu_arena: Some(false),
        intra_op_spinning: Some(false),
        inter_op_spinning: Some(false),
        execution_mode: Some(ExecutionMode::Parallel),
        device_allocator_for_initializers: Some(true),
    })?;
    for rows in [1, 7, 3] {
        let want = scores(&plain, rows)?;
        let got = scores(&tuned, rows)?;
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5, "{rows} rows: {g} vs {w}");
        }
    }
    // The option reaches ONNX Runtime: the default session's arena reports what it holds, and
    // the other session has none to report.
    assert!(
        plain.held_bytes().is_some(),
        "the default session has an arena"
    );
    assert_eq!(tuned.held_bytes(), None, "no arena, nothing measured");
    Ok(())
}
