use std::path::Path;

use super::*;
use crate::repository::triton_config::TritonConfig;
use crate::tensor::DataType;

/// What a ranker's ONNX file states: features [-1, 16] FP32 in, score [-1, 1] FP32 out.
fn ranker_file() -> Signature {
    Signature {
        name: "serving_default".into(),
        inputs: vec![TensorSpec::new("features", DataType::F32, vec![-1, 16])],
        outputs: vec![TensorSpec::new("score", DataType::F32, vec![-1, 1])],
    }
}

fn pbtxt(text: &str) -> ModelConfig {
    let mut config = TritonConfig::parse("ranker", text)
        .map(|triton| triton.config)
        .unwrap_or_default();
    config.from_triton = true;
    config
}

fn bound(text: &str, strict: bool) -> Result<Contract, String> {
    contract(
        &pbtxt(text),
        &ranker_file(),
        Path::new("/nonexistent"),
        strict,
    )
}

const RANKER: &str = r#"
    max_batch_size: 8
    input [ { name: "features", data_type: TYPE_FP32, dims: [ 16 ] } ]
    output [ { name: "score", data_type: TYPE_FP32, dims: [ 1 ] } ]
"#;

#[test]
fn a_config_that_agrees_with_the_file_keeps_its_max_batch_size() -> Result<(), String> {
    let contract = bound(RANKER, true)?;
    assert_eq!(contract.max_batch_size, Some(8));
    assert!(contract.input_reshapes.is_empty() && contract.output_reshapes.is_empty());
    let shapes = contract
        .signature
        .map(|sig| (sig.inputs[0].shape.clone(), sig.outputs[0].shape.clone()));
    // The declared signature names the batch dimension; the shapes agree with the file's.
    assert!(shapes.is_none() || shapes == Some((vec![-1, 16], vec![-1, 1])));
    Ok(())
}

#[test]
fn what_is_not_declared_is_completed_from_the_file_unless_strict() -> Result<(), String> {
    let contract = bound("max_batch_size: 4", false)?;
    assert_eq!(contract.max_batch_size, Some(4));
    assert!(contract.signature.is_none());
    let strict = bound("max_batch_size: 4", true).err().unwrap_or_default();
    assert!(strict.contains("--strict-model-config"), "{strict}");
    assert!(
        strict.contains("features") && strict.contains("score"),
        "{strict}"
    );
    Ok(())
}

#[test]
fn each_contradiction_names_the_tensor_and_the_field() {
    let cases = [
        (
            RANKER.replace("TYPE_FP32, dims: [ 16 ]", "TYPE_INT64, dims: [ 16 ]"),
            "config.pbtxt input 'features': data_type INT64 contradicts the model file, whose input is FP32",
        ),
        (
            RANKER.replace("dims: [ 16 ]", "dims: [ 15 ]"),
            "config.pbtxt input 'features': dims [15] contradicts the model file's shape [-1, 16]",
        ),
        (
            RANKER.replace("\"features\"", "\"feature\""),
            "config.pbtxt input 'feature': the model file has no input of that name (its inputs: features)",
        ),
        (
            RANKER.replace("\"score\"", "\"scores\""),
            "config.pbtxt output 'scores': the model file has no output of that name",
        ),
        (
            RANKER.replace("dims: [ 16 ]", "dims: [ 16, 1 ]"),
            "contradicts the model file's shape",
        ),
    ];
    for (text, needle) in cases {
        let err = bound(&text, false).err().unwrap_or_default();
        assert!(err.contains(needle), "{needle}\n  got: {err}");
    }
}

#[test]
fn an_input_the_config_leaves_out_is_refused() {
    let file = Signature {
        inputs: vec![
            TensorSpec::new("features", DataType::F32, vec![-1, 16]),
            TensorSpec::new("mask", DataType::Bool, vec![-1, 16]),
        ],
        ..ranker_file()
    };
    let err = contract(&pbtxt(RANKER), &file, Path::new("/nonexistent"), false)
        .err()
        .unwrap_or_default();
    assert!(err.contains("does not declare input 'mask'"), "{err}");
}

#[test]
fn batching_needs_a_dynamic_first_dimension() {
    let file = Signature {
        inputs: vec![TensorSpec::new("features", DataType::F32, vec![1, 16])],
        ..ranker_file()
    };
    let err = contract(&pbtxt(RANKER), &file, Path::new("/nonexistent"), false)
        .err()
        .unwrap_or_default();
    assert!(err.contains("max_batch_size above 0 needs"), "{err}");
    // max_batch_size: 0 declares the whole shape instead.
    let whole = r#"
        input [ { name: "features", data_type: TYPE_FP32, dims: [ 1, 16 ] } ]
        output [ { name: "score", data_type: TYPE_FP32, dims: [ -1, 1 ] } ]
    "#;
    let contract = contract(&pbtxt(whole), &file, Path::new("/nonexistent"), false);
    assert_eq!(contract.map(|c| c.max_batch_size), Ok(Some(0)));
}

#[test]
fn a_reshape_maps_the_clients_shape_to_the_files() -> Result<(), String> {
    let text = r#"
        max_batch_size: 8
        input [ { name: "features", data_type: TYPE_FP32, dims: [ 4, 4 ] reshape { shape: [ 16 ] } } ]
        output [ { name: "score", data_type: TYPE_FP32, dims: [ ] reshape { shape: [ 1 ] } } ]
    "#;
    let contract = bound(text, false)?;
    assert_eq!(
        contract.input_reshapes,
        vec![(
            "features".to_owned(),
            Reshape {
                batched: true,
                dims: vec![16]
            }
        )]
    );
    assert_eq!(
        contract.output_reshapes,
        vec![(
            "score".to_owned(),
            Reshape {
                batched: true,
                dims: vec![]
            }
        )]
    );
    let sig = contract.signature.ok_or("a declared signature")?;
    assert_eq!(sig.inputs[0].shape, vec![-1, 4, 4]);
    assert_eq!(sig.outputs[0].shape, vec![-1]);
    let wrong = text.replace("dims: [ 4, 4 ]", "dims: [ 4, 5 ]");
    let err = bound(&wrong, false).err().unwrap_or_default();
    assert!(err.contains("hold different numbers of elements"), "{err}");
    Ok(())
}

#[test]
fn labels_come_from_the_models_folder_only() -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("tensorport-labels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("labels.txt"), "low\nhigh\n").map_err(|e| e.to_string())?;
    let with_labels = |file: &str| {
        RANKER.replace(
            "dims: [ 1 ] }",
            &format!("dims: [ 1 ] label_filename: \"{file}\" }}"),
        )
    };
    let config = pbtxt(&with_labels("labels.txt"));
    let labels = contract(&config, &ranker_file(), &dir, false).map(|c| c.labels);
    let escaping = pbtxt(&with_labels("../labels.txt"));
    let refused = contract(&escaping, &ranker_file(), &dir, false)
        .err()
        .unwrap_or_default();
    let missing = pbtxt(&with_labels("absent.txt"));
    let unread = contract(&missing, &ranker_file(), &dir, false)
        .err()
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let labels = labels?;
    assert_eq!(labels.len(), 1);
    assert_eq!(&*labels[0].1, &["low".to_owned(), "high".to_owned()]);
    assert!(refused.contains("inside the model's folder"), "{refused}");
    assert!(unread.contains("absent.txt"), "{unread}");
    Ok(())
}

/// The security review's labels.txt -> /some/secret: the load fails instead of answering the
/// secret's lines to every classification request, and the reason names neither.
#[test]
fn a_labels_link_out_of_the_models_folder_fails_the_load() -> Result<(), String> {
    let base = std::env::temp_dir().join(format!("tensorport-labels-link-{}", std::process::id()));
    let dir = base.join("model");
    let secret = base.join("secret.txt");
    let setup = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        std::fs::write(&secret, "root:hunter2\n")?;
        std::os::unix::fs::symlink(&secret, dir.join("labels.txt"))?;
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.txt"))
    };
    let set = setup().map_err(|e| e.to_string());
    let refused = |file: &str| {
        let config = pbtxt(&RANKER.replace(
            "dims: [ 1 ] }",
            &format!("dims: [ 1 ] label_filename: \"{file}\" }}"),
        ));
        contract(&config, &ranker_file(), &dir, false)
            .err()
            .unwrap_or_default()
    };
    let (secret_link, device_link) = (refused("labels.txt"), refused("zero.txt"));
    let _ = std::fs::remove_dir_all(&base);
    set?;
    for err in [secret_link, device_link] {
        assert!(err.contains("does not lead to a file inside"), "{err}");
        assert!(
            !err.contains("hunter2") && !err.contains("secret.txt"),
            "{err}"
        );
        assert!(!err.contains("/dev/zero"), "{err}");
    }
    Ok(())
}
