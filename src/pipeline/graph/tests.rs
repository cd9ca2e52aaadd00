use super::*;
use crate::tensor::DataType;

fn spec(name: &str, dtype: DataType, shape: &[i64]) -> TensorSpec {
    TensorSpec::new(name, dtype, shape.to_vec())
}

fn sig(inputs: Vec<TensorSpec>, outputs: Vec<TensorSpec>) -> Signature {
    Signature {
        name: "serving_default".into(),
        inputs,
        outputs,
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

fn step(model: &str, inputs: &[(&str, &str)], outputs: &[(&str, &str)]) -> StepConfig {
    StepConfig::mapped(model, inputs, outputs)
}

/// The step models: `transform` (x -> y), `ranker` (features -> scores), `topk`
/// (scores -> values, indices), all FP32 [-1, 4] but topk's indices.
fn models(name: &str, _version: Option<u64>) -> Option<Signature> {
    let f32 = |n: &str| spec(n, DataType::F32, &[-1, 4]);
    match name {
        "transform" => Some(sig(vec![f32("x")], vec![f32("y")])),
        "ranker" => Some(sig(vec![f32("features")], vec![f32("scores")])),
        "topk" => Some(sig(
            vec![f32("scores")],
            vec![f32("values"), spec("indices", DataType::I64, &[-1, 4])],
        )),
        _ => None,
    }
}

fn declared(outputs: Vec<TensorSpec>) -> Option<Signature> {
    Some(sig(vec![spec("raw", DataType::F32, &[-1, 4])], outputs))
}

fn chain() -> EnsembleConfig {
    EnsembleConfig {
        step: vec![
            step(
                "topk",
                &[("scores", "s")],
                &[("values", "top"), ("indices", "idx")],
            ),
            step("transform", &[("x", "raw")], &[("y", "f")]),
            step("ranker", &[("features", "f")], &[("scores", "s")]),
        ],
    }
}

fn outputs() -> Vec<TensorSpec> {
    vec![
        spec("top", DataType::F32, &[-1, 4]),
        spec("idx", DataType::I64, &[-1, 4]),
    ]
}

#[test]
fn a_chain_runs_in_dependency_order_whatever_the_listed_order() {
    let ensemble = check("p", &chain(), declared(outputs()), models).expect("checks");
    assert_eq!(ensemble.waves, vec![vec![1], vec![2], vec![0]]);
    assert_eq!(
        ensemble.steps[0].inputs,
        vec![("scores".into(), "s".into())]
    );
}

#[test]
fn independent_steps_share_a_wave() {
    let config = EnsembleConfig {
        step: vec![
            step("transform", &[("x", "raw")], &[("y", "a")]),
            step("ranker", &[("features", "raw")], &[("scores", "b")]),
        ],
    };
    let declared = declared(vec![
        spec("a", DataType::F32, &[-1, 4]),
        spec("b", DataType::F32, &[-1, 4]),
    ]);
    let ensemble = check("p", &config, declared, models).expect("checks");
    assert_eq!(ensemble.waves, vec![vec![0, 1]]);
}

#[test]
fn a_missing_step_model_is_named() {
    let mut config = chain();
    config.step[2].model = "absent".into();
    let err = check("p", &config, declared(outputs()), models).unwrap_err();
    assert_eq!(
        err,
        GraphError::StepModelMissing {
            step: 3,
            model: "absent".into()
        }
    );
    assert!(err.to_string().contains("'absent'"), "{err}");
}

#[test]
fn a_tensor_produced_twice_is_refused() {
    let mut config = chain();
    config.step[1].output_map = map(&[("y", "s")]);
    config.step[2].input_map = map(&[("features", "raw")]);
    let err = check("p", &config, declared(outputs()), models).unwrap_err();
    assert!(
        matches!(&err, GraphError::ProducedTwice { tensor, .. } if tensor == "s"),
        "{err}"
    );
}

#[test]
fn a_step_output_named_like_an_ensemble_input_is_produced_twice() {
    let mut config = chain();
    config.step[1].output_map = map(&[("y", "raw")]);
    let err = check("p", &config, declared(outputs()), models).unwrap_err();
    assert!(
        matches!(&err, GraphError::ProducedTwice { tensor, first, .. }
            if tensor == "raw" && first == "the ensemble's input"),
        "{err}"
    );
}

#[test]
fn a_tensor_never_produced_is_refused() {
    let mut config = chain();
    config.step[2].input_map = map(&[("features", "nowhere")]);
    let err = check("p", &config, declared(outputs()), models).unwrap_err();
    assert!(
        matches!(&err, GraphError::NeverProduced { tensor, reader }
            if tensor == "nowhere" && reader == "step 3 (model 'ranker')"),
        "{err}"
    );
}

#[test]
fn a_declared_output_never_produced_is_refused() {
    let mut outs = outputs();
    outs.push(spec("extra", DataType::F32, &[-1, 4]));
    let err = check("p", &chain(), declared(outs), models).unwrap_err();
    assert!(
        matches!(&err, GraphError::NeverProduced { tensor, .. } if tensor == "extra"),
        "{err}"
    );
}

#[test]
fn a_cycle_is_refused_with_its_steps() {
    let config = EnsembleConfig {
        step: vec![
            step("transform", &[("x", "b")], &[("y", "a")]),
            step("ranker", &[("features", "a")], &[("scores", "b")]),
        ],
    };
    let declared = declared(vec![spec("a", DataType::F32, &[-1, 4])]);
    let err = check("p", &config, declared, models).unwrap_err();
    assert_eq!(
        err,
        GraphError::Cycle {
            steps: "1, 2".into()
        }
    );
}

#[test]
fn a_step_reading_its_own_output_is_a_cycle() {
    let config = EnsembleConfig {
        step: vec![step("transform", &[("x", "a")], &[("y", "a")])],
    };
    let declared = declared(vec![spec("a", DataType::F32, &[-1, 4])]);
    let err = check("p", &config, declared, models).unwrap_err();
    assert!(matches!(err, GraphError::Cycle { .. }), "{err}");
}

#[test]
fn a_dtype_disagreement_between_steps_is_refused() {
    // topk's indices (INT64) fed to the ranker, which takes FP32.
    let config = EnsembleConfig {
        step: vec![
            step("topk", &[("scores", "raw")], &[("indices", "idx")]),
            step("ranker", &[("features", "idx")], &[("scores", "s")]),
        ],
    };
    let declared = declared(vec![spec("s", DataType::F32, &[-1, 4])]);
    let err = check("p", &config, declared, models).unwrap_err();
    assert!(
        matches!(&err, GraphError::Disagree { tensor, producer, reader, .. }
            if tensor == "idx" && producer == "step 1 (model 'topk')"
                && reader == "step 2 (model 'ranker')"),
        "{err}"
    );
}

#[test]
fn a_shape_disagreement_with_the_declared_input_is_refused() {
    let declared = Some(sig(vec![spec("raw", DataType::F32, &[-1, 5])], outputs()));
    let err = check("p", &chain(), declared, models).unwrap_err();
    assert!(
        matches!(&err, GraphError::Disagree { tensor, producer, .. }
            if tensor == "raw" && producer == "the ensemble's input"),
        "{err}"
    );
}

#[test]
fn a_declared_output_of_another_dtype_is_refused() {
    let outs = vec![
        spec("top", DataType::F32, &[-1, 4]),
        spec("idx", DataType::I32, &[-1, 4]),
    ];
    let err = check("p", &chain(), declared(outs), models).unwrap_err();
    assert!(
        matches!(&err, GraphError::Disagree { tensor, reader, .. }
            if tensor == "idx" && reader == "the ensemble's output"),
        "{err}"
    );
}

#[test]
fn unknown_and_unmapped_step_tensors_are_named() {
    let mut config = chain();
    config.step[1].input_map = map(&[("x", "raw"), ("typo", "raw")]);
    let err = check("p", &config, declared(outputs()), models).unwrap_err();
    assert!(
        matches!(&err, GraphError::UnknownStepInput { input, available, .. }
            if input == "typo" && available == "x"),
        "{err}"
    );

    let mut config = chain();
    config.step[1].input_map = BTreeMap::new();
    let err = check("p", &config, declared(outputs()), models).unwrap_err();
    assert!(
        matches!(&err, GraphError::UnmappedStepInput { input, .. } if input == "x"),
        "{err}"
    );

    let mut config = chain();
    config.step[1].output_map = map(&[("z", "f")]);
    let err = check("p", &config, declared(outputs()), models).unwrap_err();
    assert!(
        matches!(&err, GraphError::UnknownStepOutput { output, .. } if output == "z"),
        "{err}"
    );
}

#[test]
fn versions_other_than_latest_or_positive_are_refused() {
    let mut config = chain();
    config.step[0].version = 0;
    let err = check("p", &config, declared(outputs()), models).unwrap_err();
    assert_eq!(
        err,
        GraphError::BadVersion {
            step: 1,
            version: 0
        }
    );
    config.step[0].version = 3;
    let seen = std::sync::Mutex::new(Vec::new());
    let _ = check("p", &config, declared(outputs()), |name, version| {
        seen.lock().expect("lock").push((name.to_owned(), version));
        models(name, version)
    });
    assert!(seen
        .lock()
        .expect("lock")
        .contains(&("topk".to_owned(), Some(3))));
}

#[test]
fn an_ensemble_needs_steps_and_a_signature() {
    let empty = EnsembleConfig::default();
    assert_eq!(
        check("p", &empty, declared(outputs()), models).unwrap_err(),
        GraphError::NoSteps
    );
    assert_eq!(
        check("p", &chain(), None, models).unwrap_err(),
        GraphError::NoSignature
    );
}
