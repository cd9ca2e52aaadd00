use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::backend::TensorSpec;
use crate::tensor::DataType;

const MNIST_SVM: &str = include_str!(
    "../../../tests/migration/mlserver/seldonio/docs/examples/mms/models/mnist-svm/model-settings.json"
);
const MUSHROOM_XGBOOST: &str = include_str!(
    "../../../tests/migration/mlserver/seldonio/docs/examples/mms/models/mushroom-xgboost/model-settings.json"
);
const SKLEARN: &str = include_str!(
    "../../../tests/migration/mlserver/seldonio/docs/examples/sklearn/model-settings.json"
);
const SUM_MODEL: &str =
    include_str!("../../../tests/migration/mlserver/seldonio/tests/testdata/model-settings.json");
const USER_PYTHON: &str = include_str!(
    "../../../tests/migration/mlserver/ashrafgt-seldon-mlserver-example/model-settings.json"
);

/// Tells apart the folders of tests running at once.
static FOLDERS: AtomicUsize = AtomicUsize::new(0);

/// A model folder named `name` holding `settings` and the files `files` (empty contents:
/// nothing here loads them), inside a root of its own. Removed when dropped.
struct Folder {
    root: PathBuf,
    model: PathBuf,
}

impl Folder {
    fn new(name: &str, settings: &str, files: &[&str]) -> std::io::Result<Self> {
        let root = std::env::temp_dir().join(format!(
            "tensorport-mls-{}-{}",
            std::process::id(),
            FOLDERS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        let model = root.join(name);
        std::fs::create_dir_all(&model)?;
        std::fs::write(model.join(MLSERVER_SETTINGS_FILE), settings)?;
        for file in files {
            let path = model.join(file);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, b"")?;
        }
        Ok(Self { root, model })
    }

    fn read(&self) -> Result<MlserverModel, String> {
        read(&self.model)
            .map_err(|err| err.to_string())?
            .ok_or_else(|| "a settings file".to_owned())
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[test]
fn mlservers_example_with_an_onnx_file_serves_under_its_version_name() -> Result<(), String> {
    let folder = Folder::new("mnist-svm", MNIST_SVM, &["model.onnx"]).map_err(|e| e.to_string())?;
    let model = folder.read()?;
    assert_eq!(model.name, "mnist-svm");
    assert_eq!(model.version.version, FLAT_VERSION);
    assert_eq!(model.version.path, folder.model);
    assert_eq!(
        model.config.version_labels.get("v0.1.0"),
        Some(&FLAT_VERSION)
    );
    assert_eq!(
        model.config.mlserver.version_name.as_deref(),
        Some("v0.1.0")
    );
    // The scikit-learn runtime is not run: the ONNX file is, and the log says so.
    assert_eq!(model.config.platform, None);
    let ignored = model.config.mlserver.ignored.join("; ");
    assert!(ignored.contains("mlserver_sklearn.SKLearnModel: the ONNX file is served instead"));
    Ok(())
}

#[test]
fn a_runtime_this_server_lacks_is_refused_naming_it() -> Result<(), String> {
    for (name, settings, files, needles) in [
        (
            "mnist-svm",
            SKLEARN,
            &["mnist-svm.joblib"][..],
            &["scikit-learn runtime", "mnist-svm.joblib is no model file"][..],
        ),
        (
            "mushroom-xgboost",
            MUSHROOM_XGBOOST,
            &["mushroom-xgboost.json"],
            &["XGBoost runtime", ". (the folder) is no model file"],
        ),
        (
            "mlserver-example",
            USER_PYTHON,
            &["model.json"],
            &["model.ExampleModel is Python code of its own"],
        ),
    ] {
        let folder = Folder::new(name, settings, files).map_err(|e| e.to_string())?;
        let error = folder.read().err().unwrap_or_default();
        assert!(error.contains(MLSERVER_SETTINGS_FILE), "{error}");
        for needle in needles {
            assert!(error.contains(needle), "{name}: {needle}: {error}");
        }
    }
    Ok(())
}

#[test]
fn batching_signature_and_unapplied_fields_of_mlservers_test_settings() -> Result<(), String> {
    let folder = Folder::new("sum-model", SUM_MODEL, &["model.onnx"]).map_err(|e| e.to_string())?;
    let model = folder.read()?;
    let batching = model.config.batching.ok_or("batching is on")?;
    assert_eq!(batching.max_batch_size, 10);
    assert_eq!(batching.max_queue_delay_us, 400_000);
    assert_eq!(
        model.config.mlserver.version_name.as_deref(),
        Some("v1.2.3")
    );
    let inputs = &model.config.mlserver.inputs;
    assert_eq!(inputs.len(), 1);
    assert_eq!(
        (inputs[0].name.as_str(), inputs[0].dtype.as_str()),
        ("input-0", "FP32")
    );
    assert_eq!(inputs[0].shape, vec![DeclaredDim::Size(128)]);
    assert!(
        model.config.input.is_empty(),
        "an ONNX file keeps its own signature"
    );
    let ignored = &model.config.mlserver.ignored;
    for field in [
        "versions",
        "platform",
        "cache_enabled",
        "inputs[].parameters",
    ] {
        assert!(ignored.iter().any(|i| i == field), "{field}: {ignored:?}");
    }
    assert!(ignored
        .iter()
        .any(|i| i.starts_with("implementation (tests.fixtures.SumModel")));
    Ok(())
}

#[test]
fn a_torchscript_file_takes_the_described_signature() -> Result<(), String> {
    let settings = r#"{"name": "t", "parameters": {"uri": "net.pt"},
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}]}"#;
    let folder = Folder::new("t", settings, &["net.pt"]).map_err(|e| e.to_string())?;
    let model = folder.read()?;
    assert_eq!(model.config.model_filename.as_deref(), Some("net.pt"));
    assert_eq!(model.config.input.len(), 1);
    assert!(model.config.signature()?.is_some());
    Ok(())
}

#[test]
fn malformed_json_names_the_file_and_the_position() -> Result<(), String> {
    let folder = Folder::new(
        "m",
        "{\n  \"name\": \"m\",\n  \"parameters\": {\"uri\": }\n}",
        &["model.onnx"],
    )
    .map_err(|e| e.to_string())?;
    let error = folder.read().err().unwrap_or_default();
    assert!(error.contains("m/model-settings.json"), "{error}");
    assert!(error.contains("line 3 column"), "{error}");
    let typed = Folder::new("n", r#"{"max_batch_size": "ten"}"#, &["model.onnx"])
        .map_err(|e| e.to_string())?;
    let error = typed.read().err().unwrap_or_default();
    assert!(
        error.contains("line 1 column") && error.contains("expected i64"),
        "{error}"
    );
    Ok(())
}

#[test]
fn a_uri_must_stay_inside_the_folder() -> Result<(), String> {
    for uri in [
        "../outside.onnx",
        "/etc/passwd",
        "inner/../../outside.onnx",
        "s3://bucket/m.onnx",
        "gone.onnx",
    ] {
        let settings = format!(r#"{{"name": "m", "parameters": {{"uri": "{uri}"}}}}"#);
        let folder = Folder::new("m", &settings, &["model.onnx"]).map_err(|e| e.to_string())?;
        std::fs::write(folder.root.join("outside.onnx"), b"").map_err(|e| e.to_string())?;
        let error = folder.read().err().unwrap_or_default();
        assert!(error.contains("parameters.uri"), "{uri}: {error}");
    }
    // Nor through a link.
    let folder = Folder::new("m", r#"{"parameters": {"uri": "link.onnx"}}"#, &[])
        .map_err(|e| e.to_string())?;
    std::fs::write(folder.root.join("outside.onnx"), b"").map_err(|e| e.to_string())?;
    std::os::unix::fs::symlink(
        folder.root.join("outside.onnx"),
        folder.model.join("link.onnx"),
    )
    .map_err(|e| e.to_string())?;
    let error = folder.read().err().unwrap_or_default();
    assert!(error.contains("inside the model folder"), "{error}");
    // A file in a subfolder is fine: that subfolder is the version's folder.
    let nested = Folder::new(
        "m",
        r#"{"parameters": {"uri": "./weights/m.onnx"}}"#,
        &["weights/m.onnx"],
    )
    .map_err(|e| e.to_string())?;
    let model = nested.read()?;
    assert!(model.version.path.ends_with("m/weights"));
    assert_eq!(model.config.model_filename.as_deref(), Some("m.onnx"));
    Ok(())
}

#[test]
fn names_and_versions_are_checked() -> Result<(), String> {
    for (settings, needle) in [
        (r#"{"name": "../escape"}"#, "not a plain name"),
        (r#"{"name": "bad\nname"}"#, "control character"),
        (
            r#"{"parameters": {"version": "0"}}"#,
            "no positive version number",
        ),
        (r#"{"parameters": {"version": "a/b"}}"#, "URL path"),
        (r#"{"max_batch_size": -1}"#, "must not be negative"),
    ] {
        let folder = Folder::new("m", settings, &["model.onnx"]).map_err(|e| e.to_string())?;
        let error = folder.read().err().unwrap_or_default();
        assert!(error.contains(needle), "{settings}: {error}");
    }
    let numbered = Folder::new("m", r#"{"parameters": {"version": "3"}}"#, &["model.onnx"])
        .map_err(|e| e.to_string())?;
    let model = numbered.read()?;
    assert_eq!(
        model.name, "m",
        "a settings file without a name names the model by its folder"
    );
    assert_eq!(model.version.version, 3);
    assert_eq!(model.config.mlserver.version_name, None);
    Ok(())
}

#[test]
fn the_model_file_must_agree_with_the_described_tensors() {
    let spec = |name: &str, shape: Vec<i64>| TensorSpec {
        name: name.into(),
        dtype: DataType::F32,
        shape,
        symbols: Vec::new(),
        any_shape: false,
    };
    let signatures = [Signature {
        name: "serving_default".into(),
        inputs: vec![spec("input-0", vec![-1, 4])],
        outputs: vec![spec("output-0", vec![-1, 1])],
    }];
    let described = |name: &str, dtype: &str, shape: Vec<i64>| MlserverExtras {
        inputs: vec![DeclaredTensor {
            name: name.into(),
            dtype: dtype.into(),
            shape: shape.into_iter().map(DeclaredDim::Size).collect(),
            reshape: None,
            label_filename: None,
        }],
        ..MlserverExtras::default()
    };
    assert_eq!(
        check_signature(&signatures, &described("input-0", "FP32", vec![1, 4])),
        Ok(())
    );
    for (extras, needle) in [
        (
            described("input-1", "FP32", vec![1, 4]),
            "has no such input (it has input-0)",
        ),
        (
            described("input-0", "INT64", vec![1, 4]),
            "as INT64, but the model file's is FP32",
        ),
        (
            described("input-0", "FP32", vec![1, 5]),
            "with shape [1, 5]",
        ),
        (described("input-0", "FP32", vec![4]), "with shape [4]"),
    ] {
        let error = check_signature(&signatures, &extras)
            .err()
            .unwrap_or_default();
        assert!(error.contains(needle), "{needle}: {error}");
    }
}
