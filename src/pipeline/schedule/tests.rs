use tokio::sync::Notify;

use super::*;
use crate::backend::{Signature, TensorSpec};
use crate::pipeline::{check, EnsembleConfig, StepConfig};
use crate::tensor::DataType;

fn spec(name: &str) -> TensorSpec {
    TensorSpec::new(name, DataType::F32, vec![-1, 2])
}

fn sig(inputs: &[&str], outputs: &[&str]) -> Signature {
    Signature {
        name: "serving_default".into(),
        inputs: inputs.iter().map(|name| spec(name)).collect(),
        outputs: outputs.iter().map(|name| spec(name)).collect(),
    }
}

fn step(model: &str, inputs: &[(&str, &str)], outputs: &[(&str, &str)]) -> StepConfig {
    StepConfig::mapped(model, inputs, outputs)
}

/// The step models: each takes `x` and gives `y` (and `left` also `z`).
fn models(name: &str, _version: Option<u64>) -> Option<Signature> {
    match name {
        "left" => Some(sig(&["x"], &["y", "z"])),
        "right" => Some(sig(&["x"], &["y"])),
        "join" => Some(sig(&["a", "b"], &["y"])),
        _ => None,
    }
}

/// raw -> left -> (L, Z); raw -> right -> R; (L, R) -> join -> OUT. `left` and `right` form
/// one wave.
fn diamond() -> Ensemble {
    let config = EnsembleConfig {
        step: vec![
            step("join", &[("a", "L"), ("b", "R")], &[("y", "OUT")]),
            step("left", &[("x", "RAW")], &[("y", "L"), ("z", "Z")]),
            step("right", &[("x", "RAW")], &[("y", "R")]),
        ],
    };
    let declared = Signature {
        name: "serving_default".into(),
        inputs: vec![spec("RAW")],
        outputs: vec![spec("OUT"), spec("Z")],
    };
    check("diamond", &config, Some(declared), models).expect("the diamond checks")
}

fn tensor(value: f32) -> Tensor {
    Tensor::from_vec(vec![1, 2], vec![value, value]).expect("a 1x2 tensor")
}

fn value(tensor: &Tensor) -> f32 {
    tensor.view::<f32>().expect("f32")[0]
}

/// Answers each step with its outputs holding the sum of its inputs plus the step's number,
/// so a result says which steps it went through. `left` waits until `right` has started,
/// which only a wave whose steps run together gets past.
#[derive(Default)]
struct Arithmetic {
    right_started: Notify,
    /// A step model that fails, and one that leaves out its last output.
    failing: Option<&'static str>,
    short: Option<&'static str>,
}

impl StepRunner for Arithmetic {
    type Error = String;

    async fn run_step(&self, step: &Step, call: StepCall) -> Result<Vec<NamedTensor>, String> {
        if self.failing == Some(step.model.as_str()) {
            return Err("the runtime refused".into());
        }
        match step.model.as_str() {
            "left" => self.right_started.notified().await,
            "right" => self.right_started.notify_one(),
            _ => {}
        }
        let sum: f32 = call.inputs.iter().map(|(_, t)| value(t)).sum::<f32>();
        let mut outputs: Vec<NamedTensor> = call
            .outputs
            .iter()
            .map(|name| (name.clone(), tensor(sum + call.number as f32)))
            .collect();
        if self.short == Some(step.model.as_str()) {
            outputs.pop();
        }
        Ok(outputs)
    }
}

async fn run_diamond(runner: &Arithmetic) -> Result<Vec<NamedTensor>, PipelineError<String>> {
    let ensemble = diamond();
    let requested = ["Z".to_owned(), "OUT".to_owned()];
    let inputs = vec![("RAW".to_owned(), tensor(10.0))];
    let run = run(&ensemble, inputs, &requested, &[], runner);
    tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .expect("the steps of one wave run together")
}

#[tokio::test]
async fn outputs_come_back_in_the_requested_order_through_every_step() {
    let outputs = run_diamond(&Arithmetic::default()).await.expect("runs");
    let names: Vec<&str> = outputs.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["Z", "OUT"]);
    // left is step 2: Z = 10 + 2. right is step 3: R = 13; join is step 1: 12 + 13 + 1.
    assert_eq!(value(&outputs[0].1), 12.0);
    assert_eq!(value(&outputs[1].1), 26.0);
}

#[tokio::test]
async fn a_failing_step_fails_the_request_with_the_step_named() {
    let runner = Arithmetic {
        failing: Some("join"),
        ..Arithmetic::default()
    };
    let err = run_diamond(&runner).await.expect_err("join fails");
    assert!(
        matches!(&err, PipelineError::Step { number: 1, model, error } if model == "join" && error == "the runtime refused"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "step 1 (model 'join'): the runtime refused"
    );
}

#[tokio::test]
async fn a_step_without_an_output_the_graph_expects_is_named() {
    let runner = Arithmetic {
        short: Some("left"),
        ..Arithmetic::default()
    };
    let err = run_diamond(&runner).await.expect_err("left returns no z");
    assert_eq!(
        err.to_string(),
        "step 2 (model 'left') returned no output 'z'"
    );
}
