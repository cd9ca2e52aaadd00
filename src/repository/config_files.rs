//! Reading a model's settings files into its one typed [`ModelConfig`]: `config.toml`, laid
//! over a Triton `config.pbtxt` in the same folder (see [`super::triton_config`]). Where both
//! set something, `config.toml` wins, section by section (`[batching]`, `[version_policy]`,
//! `[instances]`, `[runtime]` key by key, `[[input]]`/`[[output]]` as a whole, each top-level
//! key).

use std::path::Path;

use super::model_config::{
    ModelConfig, ResponseCacheConfig, VersionPolicyTable, MODEL_CONFIG_FILE,
};
use super::repo_file::{read_text_inside, RepoFileError, SETTINGS};
use super::triton_config::{TritonConfig, TRITON_CONFIG_FILE};

/// Why a model's settings file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ModelConfigError {
    /// Not a regular file inside the model's folder, over the cap, or unreadable.
    #[error(transparent)]
    Read(#[from] RepoFileError),
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl ModelConfig {
    /// Reads `model_dir/config.pbtxt` and `model_dir/config.toml` (which wins where both
    /// set something); a model with neither gets the defaults.
    pub fn load(model_dir: &Path) -> Result<Self, ModelConfigError> {
        let triton = Self::load_triton(model_dir)?;
        let own = Self::load_toml(model_dir)?;
        let config = match triton {
            Some(triton) => own.over(triton),
            None => own,
        };
        let shown = model_dir.display().to_string();
        config
            .check()
            .map_err(|message| ModelConfigError::Invalid {
                path: shown,
                message,
            })?;
        Ok(config)
    }

    fn load_triton(model_dir: &Path) -> Result<Option<TritonConfig>, ModelConfigError> {
        let path = model_dir.join(TRITON_CONFIG_FILE);
        let text = match read_text_inside(model_dir, Path::new(TRITON_CONFIG_FILE), SETTINGS) {
            Ok(text) => text,
            Err(err) if err.is_not_found() => return Ok(None),
            Err(err) => return Err(err.into()),
        };
        let model = model_dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        TritonConfig::parse(&model, &text)
            .map(Some)
            .map_err(|err| ModelConfigError::Invalid {
                path: path.display().to_string(),
                message: err.to_string(),
            })
    }

    /// These settings (from config.toml) over those of a `config.pbtxt`.
    fn over(self, triton: TritonConfig) -> Self {
        let base = triton.config;
        let table_set = |t: &VersionPolicyTable| *t != VersionPolicyTable::default();
        let (input, output) = if self.input.is_empty() && self.output.is_empty() {
            (base.input, base.output)
        } else {
            (self.input, self.output)
        };
        Self {
            batching: self.batching.or(base.batching),
            version_policy: if table_set(&self.version_policy) {
                self.version_policy
            } else {
                base.version_policy
            },
            version_labels: self.version_labels,
            warmup: self.warmup.or(base.warmup),
            runtime: self.runtime.over(base.runtime),
            input,
            output,
            instances: match (self.instances, base.instances) {
                (Some(own), Some(base)) => Some(own.over(base)),
                (own, base) => own.or(base),
            },
            lifecycle: self.lifecycle,
            response_cache: ResponseCacheConfig {
                enable: self.response_cache.enable.or(base.response_cache.enable),
            },
            traffic: self.traffic,
            metrics: self.metrics,
            logging: self.logging,
            model_filename: self.model_filename.or(base.model_filename),
            platform: self.platform.or(base.platform),
            max_batch_size: self.max_batch_size.or(base.max_batch_size),
            ensemble: self.ensemble.or(base.ensemble),
            from_triton: true,
            ignored: triton.ignored,
            mlserver: self.mlserver,
        }
    }

    fn load_toml(model_dir: &Path) -> Result<Self, ModelConfigError> {
        let path = model_dir.join(MODEL_CONFIG_FILE);
        let shown = path.display().to_string();
        let text = match read_text_inside(model_dir, Path::new(MODEL_CONFIG_FILE), SETTINGS) {
            Ok(text) => text,
            Err(err) if err.is_not_found() => return Ok(Self::default()),
            Err(err) => return Err(err.into()),
        };
        let invalid = |message: String| ModelConfigError::Invalid {
            path: shown.clone(),
            message,
        };
        toml::from_str(&text).map_err(|err| invalid(err.message().to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repository::model_config::{
        InstancesConfig, LifecycleConfig, ReloadMode, VersionPolicy,
    };

    fn with_config(text: &str) -> Result<ModelConfig, String> {
        let dir = std::env::temp_dir().join(format!(
            "tensorport-model-config-{}-{}",
            std::process::id(),
            text.len()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join(MODEL_CONFIG_FILE), text).map_err(|e| e.to_string())?;
        let result = ModelConfig::load(&dir).map_err(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    #[test]
    fn a_model_without_settings_gets_defaults() -> Result<(), ModelConfigError> {
        let config = ModelConfig::load(Path::new("/nonexistent-model-folder"))?;
        assert_eq!(config, ModelConfig::default());
        assert_eq!(config.policy(), Ok(VersionPolicy::Latest(1)));
        Ok(())
    }

    #[test]
    fn reads_every_section() -> Result<(), String> {
        let config = with_config(
            "[batching]\nmax_batch_size = 32\nmax_queue_delay_us = 500\n\
             [version_policy]\nspecific = [1, 3]\n\
             [version_labels]\nstable = 1\n\
             [warmup]\nrequests = 2\nshapes = { x = [1, 4] }\n\
             [instances]\ncount = 3\n\
             [lifecycle]\npinned = true\nreload = \"unload-first\"\n",
        )?;
        assert_eq!(
            config.instances,
            Some(InstancesConfig {
                count: Some(3),
                share_session: None
            })
        );
        assert_eq!(
            config.lifecycle,
            LifecycleConfig {
                pinned: true,
                reload: ReloadMode::UnloadFirst
            }
        );
        assert_eq!(config.batching.as_ref().map(|b| b.max_batch_size), Some(32));
        assert_eq!(config.policy(), Ok(VersionPolicy::Specific(vec![1, 3])));
        assert_eq!(config.version_labels.get("stable"), Some(&1));
        let warmup = config.warmup.ok_or("warmup section")?;
        assert_eq!((warmup.requests, warmup.batch_size), (2, 1));
        assert_eq!(warmup.shapes.get("x"), Some(&vec![1, 4]));
        Ok(())
    }

    #[test]
    fn refuses_what_it_cannot_mean() {
        for (text, needle) in [
            ("[batchign]\nmax_batch_size = 32\n", "batchign"),
            ("[version_policy]\nlatest = 1\nall = true\n", "one of"),
            ("[version_policy]\nlatest = 0\n", "at least 1"),
            ("[version_labels]\nstable = 0\n", "positive"),
            ("[instances]\ncount = -1\n", "expected usize"),
            ("[instances]\nkind = \"gpu\"\n", "kind"),
            ("[instances]\ncount = 1000\n", "at most 64"),
            ("[lifecycle]\nreload = \"swap\"\n", "unload-first"),
            ("[lifecycle]\npinned = \"yes\"\n", "bool"),
        ] {
            let err = with_config(text).err().unwrap_or_default();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn config_toml_wins_over_config_pbtxt_section_by_section() -> Result<(), String> {
        let dir = std::env::temp_dir().join(format!("tensorport-both-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(
            dir.join(TRITON_CONFIG_FILE),
            "max_batch_size: 8\ndynamic_batching { }\nversion_policy { all { } }\n\
             default_model_filename: \"m.onnx\"\ninstance_group [ { count: 3 } ]\n\
             parameters { key: \"enable_mem_arena\" value { string_value: \"0\" } }\n\
             parameters { key: \"enable_mem_pattern\" value { string_value: \"0\" } }\n",
        )
        .map_err(|e| e.to_string())?;
        std::fs::write(
            dir.join(MODEL_CONFIG_FILE),
            "[batching]\nmax_batch_size = 2\n[instances]\ncount = 1\n[runtime]\ncpu_arena = true\n",
        )
        .map_err(|e| e.to_string())?;
        let config = ModelConfig::load(&dir).map_err(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        let config = config?;
        assert_eq!(config.batching.as_ref().map(|b| b.max_batch_size), Some(2));
        assert_eq!(config.instances.and_then(|i| i.count), Some(1));
        assert_eq!(config.policy(), Ok(VersionPolicy::All));
        assert_eq!(config.model_filename.as_deref(), Some("m.onnx"));
        // [runtime] key by key: config.toml's arena, config.pbtxt's memory pattern.
        assert_eq!(config.runtime.cpu_arena, Some(true));
        assert_eq!(config.runtime.memory_pattern, Some(false));
        Ok(())
    }

    #[test]
    fn config_toml_turns_off_a_response_cache_config_pbtxt_enables() -> Result<(), String> {
        let dir = std::env::temp_dir().join(format!("tensorport-cache-off-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(
            dir.join(TRITON_CONFIG_FILE),
            "max_batch_size: 0\nresponse_cache { enable: True }\n",
        )
        .map_err(|e| e.to_string())?;
        let pbtxt_only = ModelConfig::load(&dir).map_err(|e| e.to_string());
        std::fs::write(
            dir.join(MODEL_CONFIG_FILE),
            "[response_cache]\nenable = false\n",
        )
        .map_err(|e| e.to_string())?;
        let both = ModelConfig::load(&dir).map_err(|e| e.to_string());
        std::fs::write(
            dir.join(MODEL_CONFIG_FILE),
            "[batching]\nmax_batch_size = 2\n",
        )
        .map_err(|e| e.to_string())?;
        let silent_toml = ModelConfig::load(&dir).map_err(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        assert!(pbtxt_only?.response_cache.enabled());
        assert!(!both?.response_cache.enabled());
        assert!(silent_toml?.response_cache.enabled());
        Ok(())
    }
}
