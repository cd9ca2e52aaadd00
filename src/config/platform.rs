//! TF Serving's `--platform_config_file` (a PlatformConfigMap text proto): the "tensorflow"
//! platform's SessionBundleConfig, mapped onto what tensorport has. Its session threads
//! (`session_config.intra_op_parallelism_threads`, `inter_op_parallelism_threads`) become the
//! runtime threads, and its `batching_parameters` turn batching on as
//! `--batching-parameters-file` would (TF Serving ignores `--enable_batching` then, and so
//! does this). Every other field the file sets is named in a warning at start-up.

use std::path::Path;

use prost_reflect::{DynamicMessage, ReflectMessage, Value};

use super::error::ConfigError;
use crate::proto::tensorflow::serving::{
    BatchingParameters, PlatformConfigMap, SessionBundleConfig,
};
use crate::repository::{read_text_trusted, OPERATOR_FILE};
use crate::textproto;

const FLAG: &str = "platform-config-file";

/// What a platform config file comes to.
#[derive(Debug, Default, PartialEq)]
pub struct PlatformSettings {
    /// From `session_config`, when set (0, TensorFlow's "choose for me", leaves ours).
    pub intra_op_threads: Option<usize>,
    pub inter_op_threads: Option<usize>,
    /// `batching_parameters`: batching on with these.
    pub batching: Option<BatchingParameters>,
    /// The fields set that are not applied, as paths (`session_config.gpu_options.allow_growth`).
    pub not_applied: Vec<String>,
}

/// Reads `file`; an unreadable or malformed one is refused naming it.
pub fn read(file: &Path) -> Result<PlatformSettings, ConfigError> {
    let refuse = |why: String| ConfigError::PeerFile {
        flag: FLAG,
        path: file.to_path_buf(),
        why,
    };
    // A regular file within a cap: a FIFO or a device named here stops nothing.
    let text = read_text_trusted(file, OPERATOR_FILE).map_err(|err| refuse(err.to_string()))?;
    from_text(&text).map_err(refuse)
}

/// The source adapter configs that hold a SessionBundleConfig.
const SAVED_MODEL: &str = "tensorflow.serving.SavedModelBundleSourceAdapterConfig";
const SESSION_BUNDLE: &str = "tensorflow.serving.SessionBundleSourceAdapterConfig";

fn from_text(text: &str) -> Result<PlatformSettings, String> {
    let map: PlatformConfigMap = textproto::parse("tensorflow.serving.PlatformConfigMap", text)
        .map_err(|err| format!("not a PlatformConfigMap text proto: {err}"))?;
    let mut settings = PlatformSettings::default();
    for (platform, config) in map.platform_configs {
        let Some(any) = config.source_adapter_config else {
            continue;
        };
        if platform != "tensorflow" {
            settings.not_applied.push(format!(
                "platform_configs[\"{platform}\"] (a model's format comes from its files)"
            ));
            continue;
        }
        let type_name = any.type_url.rsplit('/').next().unwrap_or_default();
        let field = match type_name {
            SAVED_MODEL => "legacy_config",
            SESSION_BUNDLE => "config",
            other => {
                return Err(format!(
                    "source_adapter_config holds {other}, not a TensorFlow source adapter config"
                ))
            }
        };
        let adapter = textproto::decode_dynamic(type_name, &any.value)
            .map_err(|err| format!("source_adapter_config: {err}"))?;
        let Some(Value::Message(dynamic)) =
            adapter.get_field_by_name(field).map(|v| v.into_owned())
        else {
            continue;
        };
        let session: SessionBundleConfig = dynamic
            .transcode_to()
            .map_err(|err| format!("source_adapter_config.{field}: {err}"))?;
        apply(&session, &mut settings);
        let mut set = Vec::new();
        set_fields(&dynamic, "", &mut set);
        settings
            .not_applied
            .extend(set.into_iter().filter(|path| !applied(path)));
    }
    Ok(settings)
}

fn apply(session: &SessionBundleConfig, settings: &mut PlatformSettings) {
    let threads = |n: i32| usize::try_from(n).ok().filter(|&n| n > 0);
    if let Some(config) = &session.session_config {
        settings.intra_op_threads = threads(config.intra_op_parallelism_threads);
        settings.inter_op_threads = threads(config.inter_op_parallelism_threads);
    }
    settings.batching = session.batching_parameters.clone();
}

/// Whether the field at `path` is one [`apply`] maps.
fn applied(path: &str) -> bool {
    matches!(
        path,
        "session_config.intra_op_parallelism_threads"
            | "session_config.inter_op_parallelism_threads"
    ) || path.starts_with("batching_parameters")
}

/// The paths of the leaf fields `message` sets, under `prefix`.
fn set_fields(message: &DynamicMessage, prefix: &str, out: &mut Vec<String>) {
    for (field, value) in message.fields() {
        let path = format!("{prefix}{}", field.name());
        match value {
            // Batching parameters are read whole (their own unapplied fields are named by the
            // batching reader); wrappers are leaves.
            Value::Message(inner)
                if !path.starts_with("batching_parameters")
                    && !inner
                        .descriptor()
                        .full_name()
                        .starts_with("google.protobuf.") =>
            {
                set_fields(inner, &format!("{path}."), out)
            }
            _ => out.push(path),
        }
    }
}

#[cfg(test)]
mod tests;
