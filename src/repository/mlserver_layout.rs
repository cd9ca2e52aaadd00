//! Which folders of a scanned model directory are models, where MLServer's layout may be
//! among them: a folder holding `model-settings.json` is one model, named by that file,
//! wherever it sits (MLServer finds them with `**/model-settings.json`; here up to
//! [`MAX_SETTINGS_DEPTH`] folders down, and not inside a model folder of this server's own
//! layout); the directory itself may be one. Any other folder directly under the directory is a model folder of this
//! server's own layout, named by the folder.
//!
//! A name claimed twice (two settings files, or a settings file and a folder) serves neither:
//! which one a client meant is not ours to guess, so the name reports an error naming both.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::mlserver_settings::{
    self, claimed_name, folder_name, MlserverModel, MLSERVER_SETTINGS_FILE,
};
use super::scan::{scan_model, subfolders, ScanError};

/// How deep under a top-level folder settings files are looked for: MLServer's examples nest
/// them two levels down (`models/<name>/model-settings.json`, or Triton's
/// `<name>/<version>/model-settings.json`), and a bound keeps each poll's walk short.
const MAX_SETTINGS_DEPTH: usize = 3;

/// One model folder of the directory.
pub(super) struct ModelFolder {
    pub(super) name: String,
    pub(super) path: PathBuf,
    /// `None` for a folder of this server's own layout; else what its `model-settings.json`
    /// came to, the error already written out for the repository index.
    pub(super) mlserver: Option<Result<MlserverModel, String>>,
}

/// Whether `dir` holds MLServer's model folders (or is one): then it is scanned as a
/// repository, whatever else sits beside them.
pub fn holds_mlserver_models(dir: &Path) -> bool {
    let mut found = Vec::new();
    settings_folders(dir, 0, &mut found);
    !found.is_empty()
}

/// The model folders of `root`, sorted by name.
pub(super) fn model_folders(root: &Path) -> Result<Vec<ModelFolder>, ScanError> {
    if root.join(MLSERVER_SETTINGS_FILE).is_file() {
        return Ok(vec![settings_folder(root.to_path_buf())]);
    }
    let mut found = Vec::new();
    for (name, path) in subfolders(root)? {
        let mut nested = Vec::new();
        // A model folder of this server's layout (version folders, or its model file) is
        // not searched: polls stay as cheap as before for repositories without MLServer's.
        if path.join(MLSERVER_SETTINGS_FILE).is_file() || !is_model_folder(&path) {
            settings_folders(&path, 0, &mut nested);
        }
        if nested.is_empty() {
            found.push(ModelFolder {
                name,
                path,
                mlserver: None,
            });
        } else {
            found.extend(nested.into_iter().map(settings_folder));
        }
    }
    Ok(claimed_once(found))
}

fn is_model_folder(path: &Path) -> bool {
    scan_model(path).is_ok_and(|versions| !versions.is_empty())
}

/// The folders at or under `dir` holding a settings file; a folder that holds one is a model,
/// so nothing under it is looked at.
fn settings_folders(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if dir.join(MLSERVER_SETTINGS_FILE).is_file() {
        out.push(dir.to_path_buf());
        return;
    }
    if depth >= MAX_SETTINGS_DEPTH {
        return;
    }
    // An unreadable folder holds no model we could serve; the scan of its model reports it.
    let Ok(folders) = subfolders(dir) else {
        return;
    };
    for (_, path) in folders {
        settings_folders(&path, depth + 1, out);
    }
}

fn settings_folder(path: PathBuf) -> ModelFolder {
    match mlserver_settings::read(&path) {
        Ok(Some(model)) => ModelFolder {
            name: model.name.clone(),
            path,
            mlserver: Some(Ok(model)),
        },
        // Gone between the two looks: the next poll sees the folder as it is then.
        Ok(None) => ModelFolder {
            name: folder_name(&path),
            path,
            mlserver: None,
        },
        Err(err) => ModelFolder {
            name: claimed_name(&path).unwrap_or_else(|| folder_name(&path)),
            path,
            mlserver: Some(Err(err.to_string())),
        },
    }
}

/// Each name once: a name claimed by several folders becomes one entry whose settings are the
/// error naming them all.
fn claimed_once(found: Vec<ModelFolder>) -> Vec<ModelFolder> {
    let mut by_name: BTreeMap<String, Vec<ModelFolder>> = BTreeMap::new();
    for folder in found {
        by_name.entry(folder.name.clone()).or_default().push(folder);
    }
    by_name
        .into_iter()
        .filter_map(|(name, mut folders)| {
            if folders.len() == 1 {
                return folders.pop();
            }
            folders.sort_by(|a, b| a.path.cmp(&b.path));
            let claimants: Vec<String> = folders
                .iter()
                .map(|folder| claimant(folder).display().to_string())
                .collect();
            let path = folders.first().map(|folder| folder.path.clone())?;
            let fix = if are_versions(&folders) {
                "they are versions of one model, of which this server serves one folder: keep \
                 the folder of the version to serve"
            } else {
                "neither serves until one is renamed (the name field of model-settings.json, \
                 or the folder's name)"
            };
            Some(ModelFolder {
                mlserver: Some(Err(format!(
                    "model name '{name}' is claimed by {}: {fix}",
                    claimants.join(" and ")
                ))),
                name,
                path,
            })
        })
        .collect()
}

/// Whether the folders are MLServer's versions of one model (Triton's layout,
/// `<name>/<version>/model-settings.json`): each reads, with its own `parameters.version`.
fn are_versions(folders: &[ModelFolder]) -> bool {
    let mut versions = Vec::new();
    for folder in folders {
        let Some(Ok(model)) = &folder.mlserver else {
            return false;
        };
        let version = match &model.config.mlserver.version_name {
            Some(name) => name.clone(),
            None => model.version.version.to_string(),
        };
        if versions.contains(&version) {
            return false;
        }
        versions.push(version);
    }
    true
}

/// What claims a folder's name: its settings file, or the folder itself.
fn claimant(folder: &ModelFolder) -> PathBuf {
    match folder.mlserver {
        Some(_) => folder.path.join(MLSERVER_SETTINGS_FILE),
        None => folder.path.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) -> std::io::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)
    }

    #[test]
    fn settings_files_name_models_at_any_depth_and_a_name_claimed_twice_serves_neither(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let root =
            std::env::temp_dir().join(format!("tensorport-mls-layout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        write(&root.join("plain/1/model.onnx"), "onnx")?;
        write(
            &root.join("plain/1/extra/model-settings.json"),
            r#"{"name": "hidden"}"#,
        )?;
        write(
            &root.join("models/deep/iris/model-settings.json"),
            r#"{"name": "iris-v2", "implementation": "mlserver_onnx.OnnxModel"}"#,
        )?;
        write(&root.join("models/deep/iris/model.onnx"), "onnx")?;
        for folder in ["a", "b"] {
            let dir = root.join("twins").join(folder);
            write(&dir.join("model-settings.json"), r#"{"name": "twin"}"#)?;
            write(&dir.join("model.onnx"), "onnx")?;
        }
        write(
            &root.join("clash/model-settings.json"),
            r#"{"name": "plain"}"#,
        )?;
        write(&root.join("clash/model.onnx"), "onnx")?;
        for version in ["v1", "v2"] {
            let dir = root.join("versioned").join(version);
            write(
                &dir.join("model-settings.json"),
                &format!(r#"{{"name": "versioned", "parameters": {{"version": "{version}"}}}}"#),
            )?;
            write(&dir.join("model.onnx"), "onnx")?;
        }
        let found = model_folders(&root);
        std::fs::remove_dir_all(&root)?;
        let found = found?;

        let names: Vec<&str> = found.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["iris-v2", "plain", "twin", "versioned"]);
        let iris = found[0].mlserver.as_ref().ok_or("iris has settings")?;
        let iris = iris.as_ref().map_err(|e| e.clone())?;
        assert!(iris.version.path.ends_with("models/deep/iris"));
        for clashed in &found[1..] {
            let Some(Err(error)) = &clashed.mlserver else {
                return Err(format!("{} should be refused", clashed.name).into());
            };
            assert!(error.contains("is claimed by"), "{error}");
            assert_eq!(error.matches(" and ").count(), 1, "{error}");
            let versions = clashed.name == "versioned";
            assert_eq!(error.contains("versions of one model"), versions, "{error}");
        }
        let Some(Err(plain)) = &found[1].mlserver else {
            return Err("plain is refused".into());
        };
        assert!(plain.contains("clash/model-settings.json") && plain.contains("plain"));
        Ok(())
    }

    #[test]
    fn a_directory_with_its_own_settings_file_is_one_model(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let root = std::env::temp_dir().join(format!("tensorport-mls-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        write(&root.join("model-settings.json"), r#"{"name": "solo"}"#)?;
        write(&root.join("solo.onnx"), "onnx")?;
        write(&root.join("other/model.onnx"), "onnx")?;
        let found = model_folders(&root);
        std::fs::remove_dir_all(&root)?;
        let found = found?;
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "solo");
        Ok(())
    }
}
