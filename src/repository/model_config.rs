//! `DIR/<model>/config.toml`: per-model settings.

use std::path::Path;

use serde::Deserialize;

use crate::batcher::BatchSettings;

/// The name of the optional per-model settings file.
pub const MODEL_CONFIG_FILE: &str = "config.toml";

/// Settings of one model. Absent sections take the server-wide defaults.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Dynamic batching (`[batching]`); off unless the model or the server enables it.
    pub batching: Option<BatchSettings>,
}

/// Why a model's settings file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ModelConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl ModelConfig {
    /// Reads `model_dir/config.toml`; a model without one gets the defaults.
    pub fn load(model_dir: &Path) -> Result<Self, ModelConfigError> {
        let path = model_dir.join(MODEL_CONFIG_FILE);
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(ModelConfigError::Read {
                    path: shown,
                    source,
                })
            }
        };
        let config: Self = toml::from_str(&text).map_err(|err| ModelConfigError::Invalid {
            path: shown.clone(),
            message: err.message().to_owned(),
        })?;
        if let Some(batching) = &config.batching {
            batching
                .validate()
                .map_err(|err| ModelConfigError::Invalid {
                    path: shown,
                    message: format!("[batching]: {err}"),
                })?;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_batching_and_refuses_unknown_keys() -> Result<(), Box<dyn std::error::Error>> {
        let dir =
            std::env::temp_dir().join(format!("tensorport-model-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        assert!(ModelConfig::load(&dir)?.batching.is_none());

        std::fs::write(
            dir.join(MODEL_CONFIG_FILE),
            "[batching]\nmax_batch_size = 32\nmax_queue_delay_us = 500\n",
        )?;
        let batching = ModelConfig::load(&dir)?.batching.unwrap_or_default();
        assert_eq!(batching.max_batch_size, 32);
        assert_eq!(batching.max_queue_delay_us, 500);

        std::fs::write(
            dir.join(MODEL_CONFIG_FILE),
            "[batchign]\nmax_batch_size = 32\n",
        )?;
        let err = ModelConfig::load(&dir)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        std::fs::remove_dir_all(&dir)?;
        assert!(err.contains("batchign"), "{err}");
        Ok(())
    }
}
