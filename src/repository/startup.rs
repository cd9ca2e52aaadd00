//! What the server serves at start-up, from the ways users of other servers name their
//! models: a repository (`--model-dir`, Triton's `--model-repository`), TF Serving's
//! `models.config` (`--model-config-file`), one model (`--model-name` with
//! `--model-base-path`), or a `--model-dir` that turns out to be one model (a KServe storage
//! URI mounted at `/mnt/models`, a folder or a single file).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::mlserver_layout::holds_mlserver_models;
use super::repo_file::{read_text_trusted, OPERATOR_FILE};
use super::{
    check_model_name, holds_one_model, read_model_config_file, resolve_trusted, served_models,
    ConfineError, ModelConfigFileError, ModelRepository, OperatorPaths, RepositoryError,
    ServedModel,
};

/// Where the models come from, as the flags name them.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSource {
    /// The model root: relative `base_path`s start here and admin APIs are confined to it
    /// (with `--allow-model-paths`).
    pub root: PathBuf,
    pub models: ModelList,
}

/// Which models of the root serve.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelList {
    /// Every model folder under the root, found by scanning it.
    Scanned,
    /// The models a `models.config` lists, re-read from this file.
    ConfigFile(PathBuf),
    /// One model, from this folder.
    One { name: String, path: PathBuf },
}

/// Why the flags name no models.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("no models named: give --model-dir, --model-config-file or --model-base-path")]
    Nothing,
    #[error("{flag}: {path} has no folder name to name the model by; give --model-name")]
    Unnamed { flag: &'static str, path: PathBuf },
    #[error("--model-name: {0}")]
    BadName(ConfineError),
    #[error("{flag}: {source}")]
    NoFolder {
        flag: &'static str,
        #[source]
        source: ConfineError,
    },
    #[error(transparent)]
    ConfigFile(#[from] ModelConfigFileError),
    #[error("--model-config-file: {path}: {source}")]
    Listed {
        path: PathBuf,
        #[source]
        source: RepositoryError,
    },
}

impl ModelSource {
    /// The source the flags describe. A `--model-dir` holding one model, or naming a model
    /// file, is served as that model, with a log line explaining so.
    pub fn from_flags(
        model_dir: Option<&Path>,
        model_config_file: Option<&Path>,
        model_name: Option<&str>,
        model_base_path: Option<&Path>,
    ) -> Result<Self, StartupError> {
        if let Some(file) = model_config_file {
            let root = match model_dir {
                Some(dir) => dir.to_path_buf(),
                None => parent_or_here(file),
            };
            return Ok(Self {
                root,
                models: ModelList::ConfigFile(file.to_path_buf()),
            });
        }
        if let Some(base) = model_base_path {
            return one_model(model_dir, model_name, base, "--model-base-path");
        }
        let dir = model_dir.ok_or(StartupError::Nothing)?;
        // MLServer's folder (`mlserver start FOLDER`, model-settings.json files in or under
        // it) is scanned: the settings name the models.
        if dir.is_file() || (holds_one_model(dir) && !holds_mlserver_models(dir)) {
            let source = one_model(None, model_name, dir, "--model-dir")?;
            if let ModelList::One { name, .. } = &source.models {
                tracing::info!(
                    model = %name,
                    dir = %dir.display(),
                    "--model-dir holds a single model (its model file or version folders \
                     directly), not a repository of model folders: serving it as model \
                     '{name}' (set the name with --model-name; for several models use \
                     DIR/<model>/<version>/)"
                );
            }
            return Ok(source);
        }
        Ok(Self {
            root: dir.to_path_buf(),
            models: ModelList::Scanned,
        })
    }
}

impl ModelList {
    /// The models a list names (`None` for a scanned repository). These are the operator's
    /// paths, from the flags or a file on the operator's disk, so they are not confined to
    /// the roots: a flag's relative path starts at the working directory, a `models.config`
    /// `base_path` at `root` (the source's: `--model-dir`, else the file's folder).
    pub fn served(&self, root: &Path) -> Result<Option<Vec<ServedModel>>, StartupError> {
        match self {
            Self::Scanned => Ok(None),
            Self::ConfigFile(file) => {
                let list = read_model_config_file(file)?;
                served_models(list, &OperatorPaths(root))
                    .map(Some)
                    .map_err(|source| StartupError::Listed {
                        path: file.clone(),
                        source,
                    })
            }
            Self::One { name, path } => {
                // The flag's path as given: relative to the working directory.
                let path = resolve_trusted(Path::new(""), name, path).map_err(|source| {
                    StartupError::NoFolder {
                        flag: "--model-base-path",
                        source,
                    }
                })?;
                Ok(Some(vec![ServedModel {
                    name: name.clone(),
                    path,
                    policy: None,
                    labels: None,
                    logging: None,
                }]))
            }
        }
    }
}

/// Re-reads `file` every `period` and serves what it lists once it changes. A file that
/// cannot be read or applied leaves the models as they are, and is logged once.
pub async fn watch_model_config_file(
    repository: Arc<ModelRepository>,
    file: PathBuf,
    period: Duration,
) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    let list = ModelList::ConfigFile(file.clone());
    let mut last_text = text_of(&file).await;
    let mut last_error: Option<String> = None;
    loop {
        ticks.tick().await;
        let text = text_of(&file).await;
        // An unchanged file is applied again only while it failed (a base path it names may
        // have appeared since).
        if text == last_text && last_error.is_none() {
            continue;
        }
        last_text = text;
        let served = {
            let (list, root) = (list.clone(), repository.dir.clone());
            tokio::task::spawn_blocking(move || list.served(&root)).await
        };
        let applied = match served {
            Ok(Ok(models)) => repository
                .serve_only(models.unwrap_or_default())
                .await
                .map_err(|err| err.to_string()),
            Ok(Err(err)) => Err(err.to_string()),
            Err(err) => Err(format!("reading the model config file stopped: {err}")),
        };
        match applied {
            Ok(()) => {
                tracing::info!(file = %file.display(), "model config file applied");
                last_error = None;
            }
            Err(error) => {
                if last_error.as_ref() != Some(&error) {
                    tracing::error!(
                        %error,
                        "cannot apply the model config file; the models stay as they are"
                    );
                }
                last_error = Some(error);
            }
        }
    }
}

/// The text of the model config file, read off the async runtime (it may sit on a slow
/// mount, or be a FIFO someone made, which is refused rather than waited on).
async fn text_of(file: &Path) -> Option<String> {
    let file = file.to_path_buf();
    tokio::task::spawn_blocking(move || read_text_trusted(&file, OPERATOR_FILE).ok())
        .await
        .ok()
        .flatten()
}

/// One model at `base`: a folder (version folders or the model file inside) or a model file,
/// whose folder is then the model's. Named by `model_name`, else by its folder (or a file's
/// stem, as KServe names a single-file model).
fn one_model(
    model_dir: Option<&Path>,
    model_name: Option<&str>,
    base: &Path,
    flag: &'static str,
) -> Result<ModelSource, StartupError> {
    let (folder, default_name) = if base.is_file() {
        (parent_or_here(base), base.file_stem())
    } else {
        (base.to_path_buf(), base.file_name())
    };
    let name = match model_name {
        Some(name) => name.to_owned(),
        None => default_name
            .and_then(|n| n.to_str())
            .map(str::to_owned)
            .ok_or_else(|| StartupError::Unnamed {
                flag,
                path: base.to_path_buf(),
            })?,
    };
    check_model_name(&name).map_err(StartupError::BadName)?;
    Ok(ModelSource {
        root: model_dir.map_or_else(|| folder.clone(), Path::to_path_buf),
        models: ModelList::One { name, path: folder },
    })
}

/// The folder holding `file`; `.` for a bare file name.
fn parent_or_here(file: &Path) -> PathBuf {
    match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_way_of_naming_models() -> Result<(), Box<dyn std::error::Error>> {
        let base = std::env::temp_dir().join(format!("tensorport-startup-{}", std::process::id()));
        let repo = base.join("repo");
        std::fs::create_dir_all(repo.join("ranker").join("1"))?;
        std::fs::create_dir_all(base.join("flat"))?;
        std::fs::write(base.join("flat").join("net.onnx"), b"onnx")?;
        let file = base.join("flat").join("net.onnx");
        let config = repo.join("models.config");

        let scanned = ModelSource::from_flags(Some(&repo), None, None, None)?;
        let listed = ModelSource::from_flags(None, Some(&config), None, None)?;
        let one_dir = ModelSource::from_flags(Some(&repo.join("ranker")), None, None, None)?;
        let one_file = ModelSource::from_flags(None, None, Some("m"), Some(&file))?;
        let file_dir = ModelSource::from_flags(Some(&file), None, None, None)?;
        let bad = ModelSource::from_flags(None, None, Some("../x"), Some(&file));
        std::fs::remove_dir_all(&base)?;

        assert_eq!(scanned.models, ModelList::Scanned);
        assert_eq!(listed.root, repo);
        assert_eq!(listed.models, ModelList::ConfigFile(config));
        assert_eq!(
            one_dir.models,
            ModelList::One {
                name: "ranker".into(),
                path: repo.join("ranker")
            }
        );
        assert_eq!(one_file.root, base.join("flat"));
        assert_eq!(
            one_file.models,
            ModelList::One {
                name: "m".into(),
                path: base.join("flat")
            }
        );
        assert!(matches!(file_dir.models, ModelList::One { name, .. } if name == "net"));
        assert!(matches!(bad, Err(StartupError::BadName(_))));
        assert!(matches!(
            ModelSource::from_flags(None, None, None, None),
            Err(StartupError::Nothing)
        ));
        Ok(())
    }

    /// A relative `--model-base-path` (or single-model `--model-dir`) names its folder from
    /// the working directory, not from itself.
    #[test]
    fn relative_single_model_paths_serve() -> Result<(), Box<dyn std::error::Error>> {
        let here = std::env::current_dir()?;
        let ranker = Path::new("examples/models/ranker");
        for source in [
            ModelSource::from_flags(None, None, None, Some(ranker))?,
            ModelSource::from_flags(Some(ranker), None, None, None)?,
        ] {
            let served = source.models.served(&source.root)?.unwrap_or_default();
            assert_eq!(served.len(), 1);
            assert_eq!(served[0].name, "ranker");
            assert_eq!(served[0].path, here.join(ranker));
        }
        Ok(())
    }
}
