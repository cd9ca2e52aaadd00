//! TF Serving's model list (`ModelServerConfig`'s `model_config_list`) in the repository's
//! terms: read from `--model-config-file` at start-up and on its poll, and sent at run time
//! through the `HandleReloadConfigRequest` RPC. Both go through [`served_models`], so the file
//! and the RPC accept exactly the same lists; what differs is how their paths are taken
//! ([`ListPaths`]): the operator's file as written, a client's `base_path` and payload-log
//! `filename_prefix` confined.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use crate::proto::tensorflow::serving::file_system_storage_path_source_config::servable_version_policy::PolicyChoice;
use crate::proto::tensorflow::serving::{
    model_server_config, LoggingConfig, ModelConfig as TfsModelConfig, ModelConfigList,
    ModelServerConfig,
};
use crate::payload_log::LoggingTable;
use crate::textproto;

use super::repo_file::{read_text_trusted, RepoFileError, OPERATOR_FILE};
use super::{
    check_model_name, resolve_trusted, ConfineError, RepositoryError, ServedModel, VersionPolicy,
};

/// Platforms a list entry may name (TF Serving's own, and ONNX).
const PLATFORMS: [&str; 3] = ["tensorflow", "onnx", "pytorch"];

/// Why `--model-config-file` was refused.
#[derive(Debug, thiserror::Error)]
pub enum ModelConfigFileError {
    /// Not a regular file, over the cap, or unreadable; the error names the file.
    #[error("--model-config-file: {0}")]
    Read(#[source] RepoFileError),
    #[error("--model-config-file: {path} is not a ModelServerConfig text proto: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: textproto::TextProtoError,
    },
    #[error("--model-config-file: {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The model list of a `models.config` file, checked to be a non-empty `model_config_list`.
pub fn read_model_config_file(path: &Path) -> Result<ModelConfigList, ModelConfigFileError> {
    let text = read_text_trusted(path, OPERATOR_FILE).map_err(ModelConfigFileError::Read)?;
    let invalid = |message: &str| ModelConfigFileError::Invalid {
        path: path.to_path_buf(),
        message: message.to_owned(),
    };
    let config =
        textproto::parse::<ModelServerConfig>("tensorflow.serving.ModelServerConfig", &text)
            .map_err(|source| ModelConfigFileError::Parse {
                path: path.to_path_buf(),
                source,
            })?;
    match config.config {
        Some(model_server_config::Config::ModelConfigList(list)) if !list.config.is_empty() => {
            Ok(list)
        }
        Some(model_server_config::Config::ModelConfigList(_)) => {
            Err(invalid("model_config_list lists no model"))
        }
        Some(model_server_config::Config::CustomModelConfig(_)) => Err(invalid(
            "custom_model_config is not supported; write a model_config_list",
        )),
        None => Err(invalid("the file has no model_config_list")),
    }
}

/// How a model list's paths are taken: the operator's as written, a client's confined.
pub trait ListPaths {
    /// The folder of model `name`'s versions that `base_path` names.
    fn base_path(&self, name: &str, base_path: &str) -> Result<PathBuf, ConfineError>;
    /// Where model `name`'s payload logs go for a `filename_prefix` (never empty), with the
    /// folder the prefix is confined to, when it is.
    fn log_prefix(
        &self,
        name: &str,
        prefix: &str,
    ) -> Result<(PathBuf, Option<PathBuf>), ConfineError>;
}

/// The operator's own `models.config`: a relative `base_path` starts at the folder this
/// holds, and a `filename_prefix` is taken as written, as TF Serving takes it.
pub struct OperatorPaths<'a>(pub &'a Path);

impl ListPaths for OperatorPaths<'_> {
    fn base_path(&self, name: &str, base_path: &str) -> Result<PathBuf, ConfineError> {
        resolve_trusted(self.0, name, Path::new(base_path))
    }

    fn log_prefix(
        &self,
        _name: &str,
        prefix: &str,
    ) -> Result<(PathBuf, Option<PathBuf>), ConfineError> {
        Ok((PathBuf::from(prefix), None))
    }
}

/// Every entry of `list` as a [`ServedModel`], its paths taken by `paths`. Names must be
/// plain and listed once.
pub fn served_models(
    list: ModelConfigList,
    paths: &impl ListPaths,
) -> Result<Vec<ServedModel>, RepositoryError> {
    let mut seen = HashSet::new();
    list.config
        .into_iter()
        .map(|model| {
            if !seen.insert(model.name.clone()) {
                return Err(RepositoryError::ListedTwice(model.name));
            }
            served_model(model, paths)
        })
        .collect()
}

/// One entry of a model list in the repository's terms.
fn served_model(
    model: TfsModelConfig,
    paths: &impl ListPaths,
) -> Result<ServedModel, RepositoryError> {
    // First, since later messages repeat the name.
    check_model_name(&model.name)?;
    if !model.model_platform.is_empty() && !PLATFORMS.contains(&model.model_platform.as_str()) {
        return Err(RepositoryError::UnknownPlatform {
            model: model.name,
            platform: model.model_platform,
            served: &PLATFORMS,
        });
    }
    let policy = match model.model_version_policy.and_then(|p| p.policy_choice) {
        None => None,
        Some(PolicyChoice::Latest(latest)) => {
            Some(VersionPolicy::Latest(latest.num_versions.max(1) as usize))
        }
        Some(PolicyChoice::All(_)) => Some(VersionPolicy::All),
        Some(PolicyChoice::Specific(specific)) => {
            let versions = specific
                .versions
                .iter()
                .map(|&v| u64::try_from(v).ok().filter(|&v| v > 0))
                .collect::<Option<Vec<u64>>>()
                .ok_or_else(|| RepositoryError::VersionsNotPositive(model.name.clone()))?;
            Some(VersionPolicy::Specific(versions))
        }
    };
    let labels = if model.version_labels.is_empty() {
        None
    } else {
        let labels: BTreeMap<String, u64> = model
            .version_labels
            .into_iter()
            .map(|(label, v)| u64::try_from(v).ok().filter(|&v| v > 0).map(|v| (label, v)))
            .collect::<Option<_>>()
            .ok_or_else(|| RepositoryError::LabelsNotPositive(model.name.clone()))?;
        Some(labels)
    };
    let path = paths.base_path(&model.name, &model.base_path)?;
    let logging = model
        .logging_config
        .map(|config| logging_table(&model.name, config, paths))
        .transpose()?;
    Ok(ServedModel {
        logging,
        name: model.name,
        path,
        policy,
        labels,
    })
}

/// `logging_config { log_collector_config { filename_prefix } sampling_config { sampling_rate } }`
/// as a `[logging]` table, its prefix taken by `paths`; the repository checks the rest with
/// the model's other settings. An empty prefix names no file: config.toml's `path` applies.
fn logging_table(
    name: &str,
    config: LoggingConfig,
    paths: &impl ListPaths,
) -> Result<LoggingTable, ConfineError> {
    let prefix = config
        .log_collector_config
        .map(|collector| collector.filename_prefix)
        .filter(|prefix| !prefix.is_empty());
    let (filename_prefix, prefix_root) = match prefix {
        Some(prefix) => {
            let (path, root) = paths.log_prefix(name, &prefix)?;
            (Some(path), root)
        }
        None => (None, None),
    };
    Ok(LoggingTable {
        path: None,
        sample: config.sampling_config.map_or(0.0, |s| s.sampling_rate),
        format: None,
        max_file_bytes: None,
        shadow: false,
        filename_prefix,
        prefix_root,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> Result<ModelConfigList, String> {
        let dir = std::env::temp_dir().join(format!(
            "tensorport-tfsconfig-{}-{}",
            std::process::id(),
            text.len()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let file = dir.join("models.config");
        std::fs::write(&file, text).map_err(|e| e.to_string())?;
        let read = read_model_config_file(&file).map_err(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        read
    }

    /// Base paths under `/models`, `/elsewhere` refused; prefixes under `/logs` confined there.
    struct TestPaths;

    impl ListPaths for TestPaths {
        fn base_path(&self, name: &str, base: &str) -> Result<PathBuf, ConfineError> {
            match base {
                "/elsewhere" => Err(ConfineError::OutsideRoots(name.to_owned())),
                base => Ok(PathBuf::from("/models").join(base)),
            }
        }

        fn log_prefix(
            &self,
            name: &str,
            prefix: &str,
        ) -> Result<(PathBuf, Option<PathBuf>), ConfineError> {
            match prefix.strip_prefix("/logs/") {
                Some(_) => Ok((PathBuf::from(prefix), Some(PathBuf::from("/logs")))),
                None => Err(ConfineError::LogPrefixOutside(name.to_owned())),
            }
        }
    }

    #[test]
    fn a_models_config_becomes_served_models() -> Result<(), String> {
        let parsed = list(
            r#"model_config_list {
                 config {
                   name: "ranker"
                   base_path: "ranker"
                   model_platform: "onnx"
                   model_version_policy { specific { versions: 1 versions: 2 } }
                   version_labels { key: "stable" value: 1 }
                 }
                 config { name: "other" base_path: "/elsewhere" }
               }"#,
        )?;
        let served = served_models(parsed, &TestPaths);
        let err = served.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("model 'other'"), "{err}");

        let parsed = list(
            r#"model_config_list { config { name: "ranker" base_path: "ranker"
                 model_version_policy { specific { versions: 1 versions: 2 } }
                 version_labels { key: "stable" value: 1 } } }"#,
        )?;
        let served = served_models(parsed, &TestPaths).map_err(|e| e.to_string())?;
        assert_eq!(
            served,
            vec![ServedModel {
                name: "ranker".into(),
                path: PathBuf::from("/models/ranker"),
                policy: Some(VersionPolicy::Specific(vec![1, 2])),
                labels: Some(BTreeMap::from([("stable".to_owned(), 1)])),
                logging: None,
            }]
        );
        Ok(())
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        for (text, needle) in [
            ("", "no model_config_list"),
            ("model_config_list {}", "lists no model"),
            ("model_config_list { config { nmae: \"x\" } }", "nmae"),
        ] {
            let err = list(text).err().unwrap_or_default();
            assert!(err.contains(needle), "{text}: {err}");
        }
        let twice = list("model_config_list { config { name: \"a\" } config { name: \"a\" } }")
            .map_err(|e| e.to_string())
            .and_then(|l| served_models(l, &TestPaths).map_err(|e| e.to_string()));
        assert!(twice
            .err()
            .unwrap_or_default()
            .contains("listed more than once"));
    }

    #[test]
    fn a_logging_prefix_is_taken_by_the_paths() -> Result<(), String> {
        let entry = |prefix: &str| {
            format!(
                r#"model_config_list {{ config {{ name: "ranker" base_path: "ranker"
                     logging_config {{ log_collector_config {{ filename_prefix: "{prefix}" }}
                                       sampling_config {{ sampling_rate: 0.5 }} }} }} }}"#
            )
        };
        let refused = served_models(list(&entry("/tmp/x/deep/er/pwned"))?, &TestPaths)
            .err()
            .ok_or("a prefix outside was taken")?;
        assert_eq!(
            refused.kind(),
            crate::error_kind::ErrorKind::InvalidArgument
        );
        let message = refused.to_string();
        assert!(message.contains("filename_prefix") && !message.contains("/tmp"));

        let served =
            served_models(list(&entry("/logs/ranker"))?, &TestPaths).map_err(|e| e.to_string())?;
        let logging = served.first().and_then(|m| m.logging.clone());
        let logging = logging.ok_or("no logging")?;
        assert_eq!(logging.filename_prefix, Some(PathBuf::from("/logs/ranker")));
        assert_eq!(logging.prefix_root, Some(PathBuf::from("/logs")));
        assert_eq!(logging.sample, 0.5);

        // The operator's file: as written, unconfined.
        let operator = served_models(
            list(&entry("/anywhere/ranker"))?,
            &OperatorPaths(Path::new("examples/models")),
        )
        .map_err(|e| e.to_string())?;
        let logging = operator.first().and_then(|m| m.logging.clone());
        let logging = logging.ok_or("no logging")?;
        assert_eq!(
            logging.filename_prefix,
            Some(PathBuf::from("/anywhere/ranker"))
        );
        assert_eq!(logging.prefix_root, None);

        // An empty prefix names nothing: the model's own [logging] path applies.
        let empty = served_models(list(&entry(""))?, &TestPaths).map_err(|e| e.to_string())?;
        let logging = empty.first().and_then(|m| m.logging.clone());
        assert_eq!(logging.and_then(|l| l.filename_prefix), None);
        Ok(())
    }
}
