//! `[runtime]` in a model's config.toml: its runtime's threads and, for an ONNX model, ONNX
//! Runtime's session options.
//!
//! ```toml
//! [runtime]
//! intra_op_threads = 2             # default: --intra-op-threads
//! inter_op_threads = 1             # default: --inter-op-threads
//! # ONNX models only; a key left out keeps ONNX Runtime's own default
//! graph_optimization = "basic"     # "disable", "basic", "extended" or "all" (default)
//! optimized_model_file = "optimized.onnx"  # the optimized graph, written at every load
//! memory_pattern = false           # default true
//! cpu_arena = false                # default true
//! intra_op_spinning = false        # default true: idle pool threads spin before they sleep
//! inter_op_spinning = false        # default true
//! execution_mode = "parallel"      # "sequential" (default) or "parallel"
//! device_allocator_for_initializers = true  # weights outside the arena (default false)
//! ```
//!
//! `optimized_model_file` is a path inside the version folder (each version's optimized graph
//! is its own; in the flat layout, the model's folder): no `..`, not absolute, and its folder
//! must exist. ONNX Runtime replaces the file each time the version loads. A value of the
//! wrong kind is refused naming the key and the value; a TorchScript or TensorFlow model that
//! sets an ONNX option loads without it, with a warning (config.pbtxt's `optimization` means
//! something to Triton's TensorFlow backend too, and such a repository should still serve).

use std::path::{Component, Path};

use serde::Deserialize;

use super::repo_file::output_inside;
use super::scan::{has_model_extension, ONNX_MODEL_FILE};
use crate::backend::onnx::{ExecutionMode, GraphOptimization, OnnxSessionOptions};
use crate::backend::RuntimeThreads;

/// `[runtime]`: absent keys take the server flags (threads) or ONNX Runtime's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RuntimeTable")]
pub struct RuntimeConfig {
    pub intra_op_threads: Option<usize>,
    pub inter_op_threads: Option<usize>,
    pub graph_optimization: Option<GraphOptimization>,
    /// As written: a relative path inside the version folder (checked when parsed).
    pub optimized_model_file: Option<String>,
    pub memory_pattern: Option<bool>,
    pub cpu_arena: Option<bool>,
    pub intra_op_spinning: Option<bool>,
    pub inter_op_spinning: Option<bool>,
    pub execution_mode: Option<ExecutionMode>,
    pub device_allocator_for_initializers: Option<bool>,
}

/// `[runtime]` as written: the values of a kind serde would refuse without naming the key are
/// taken as any TOML value and checked in [`RuntimeConfig::try_from`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuntimeTable {
    intra_op_threads: Option<usize>,
    inter_op_threads: Option<usize>,
    graph_optimization: Option<toml::Value>,
    optimized_model_file: Option<toml::Value>,
    memory_pattern: Option<toml::Value>,
    cpu_arena: Option<toml::Value>,
    intra_op_spinning: Option<toml::Value>,
    inter_op_spinning: Option<toml::Value>,
    execution_mode: Option<toml::Value>,
    device_allocator_for_initializers: Option<toml::Value>,
}

impl TryFrom<RuntimeTable> for RuntimeConfig {
    type Error = String;

    fn try_from(table: RuntimeTable) -> Result<Self, String> {
        let flag = |key: &str, value: Option<toml::Value>| {
            value
                .map(|value| match value {
                    toml::Value::Boolean(flag) => Ok(flag),
                    other => Err(format!("[runtime] {key}: {other} is not true or false")),
                })
                .transpose()
        };
        let optimized_model_file = match table.optimized_model_file {
            Some(toml::Value::String(path)) => {
                check_optimized_model_file(&path)
                    .map_err(|err| format!("[runtime] optimized_model_file {err}"))?;
                Some(path)
            }
            Some(other) => {
                return Err(format!(
                    "[runtime] optimized_model_file: {other} is not a path"
                ))
            }
            None => None,
        };
        Ok(Self {
            intra_op_threads: table.intra_op_threads,
            inter_op_threads: table.inter_op_threads,
            graph_optimization: named(
                "graph_optimization",
                table.graph_optimization,
                &GraphOptimization::NAMES,
                GraphOptimization::from_name,
            )?,
            optimized_model_file,
            memory_pattern: flag("memory_pattern", table.memory_pattern)?,
            cpu_arena: flag("cpu_arena", table.cpu_arena)?,
            intra_op_spinning: flag("intra_op_spinning", table.intra_op_spinning)?,
            inter_op_spinning: flag("inter_op_spinning", table.inter_op_spinning)?,
            execution_mode: named(
                "execution_mode",
                table.execution_mode,
                &ExecutionMode::NAMES,
                ExecutionMode::from_name,
            )?,
            device_allocator_for_initializers: flag(
                "device_allocator_for_initializers",
                table.device_allocator_for_initializers,
            )?,
        })
    }
}

/// A value that must be one of `names`, as `parse` reads them.
fn named<T>(
    key: &str,
    value: Option<toml::Value>,
    names: &[&str],
    parse: fn(&str) -> Option<T>,
) -> Result<Option<T>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    let found = match &value {
        toml::Value::String(name) => parse(name),
        _ => None,
    };
    found.map(Some).ok_or_else(|| {
        let names: Vec<String> = names.iter().map(|name| format!("\"{name}\"")).collect();
        format!(
            "[runtime] {key}: {value} is not one of {}",
            names.join(", ")
        )
    })
}

/// Refuses a path that could lead out of the version folder, whatever lies on disk: only
/// plain names, joined by `/`.
pub fn check_optimized_model_file(path: &str) -> Result<(), String> {
    let plain = !path.is_empty()
        && !path.chars().any(char::is_control)
        && Path::new(path)
            .components()
            .all(|part| matches!(part, Component::Normal(_)));
    if plain {
        Ok(())
    } else {
        Err(format!(
            "\"{}\" must be a relative path inside the version folder (no '..', '.' or \
             leading '/')",
            path.escape_default()
        ))
    }
}

impl RuntimeConfig {
    /// These settings over the server's defaults.
    pub fn threads(&self, defaults: RuntimeThreads) -> RuntimeThreads {
        RuntimeThreads {
            intra_op: self.intra_op_threads.unwrap_or(defaults.intra_op),
            inter_op: self.inter_op_threads.unwrap_or(defaults.inter_op),
        }
    }

    /// These settings (config.toml's) over `base` (config.pbtxt's), key by key.
    pub fn over(self, base: Self) -> Self {
        Self {
            intra_op_threads: self.intra_op_threads.or(base.intra_op_threads),
            inter_op_threads: self.inter_op_threads.or(base.inter_op_threads),
            graph_optimization: self.graph_optimization.or(base.graph_optimization),
            optimized_model_file: self.optimized_model_file.or(base.optimized_model_file),
            memory_pattern: self.memory_pattern.or(base.memory_pattern),
            cpu_arena: self.cpu_arena.or(base.cpu_arena),
            intra_op_spinning: self.intra_op_spinning.or(base.intra_op_spinning),
            inter_op_spinning: self.inter_op_spinning.or(base.inter_op_spinning),
            execution_mode: self.execution_mode.or(base.execution_mode),
            device_allocator_for_initializers: self
                .device_allocator_for_initializers
                .or(base.device_allocator_for_initializers),
        }
    }

    /// The keys set here that only ONNX Runtime applies, for the warning a model of another
    /// format loads with.
    pub fn onnx_keys(&self) -> Vec<&'static str> {
        [
            ("graph_optimization", self.graph_optimization.is_some()),
            ("optimized_model_file", self.optimized_model_file.is_some()),
            ("memory_pattern", self.memory_pattern.is_some()),
            ("cpu_arena", self.cpu_arena.is_some()),
            ("intra_op_spinning", self.intra_op_spinning.is_some()),
            ("inter_op_spinning", self.inter_op_spinning.is_some()),
            ("execution_mode", self.execution_mode.is_some()),
            (
                "device_allocator_for_initializers",
                self.device_allocator_for_initializers.is_some(),
            ),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect()
    }

    /// The session options of the ONNX model file `model_file` in `folder`, its version folder.
    /// `named_file`: the configuration names the model file (`model_filename`), so it is not
    /// found by its ending.
    pub fn onnx_options(
        &self,
        folder: &Path,
        model_file: &Path,
        named_file: bool,
    ) -> Result<OnnxSessionOptions, String> {
        let optimized_model_file = self
            .optimized_model_file
            .as_deref()
            .map(|file| optimized_path(folder, model_file, named_file, file))
            .transpose()?;
        Ok(OnnxSessionOptions {
            graph_optimization: self.graph_optimization,
            optimized_model_file,
            memory_pattern: self.memory_pattern,
            cpu_arena: self.cpu_arena,
            intra_op_spinning: self.intra_op_spinning,
            inter_op_spinning: self.inter_op_spinning,
            execution_mode: self.execution_mode,
            device_allocator_for_initializers: self.device_allocator_for_initializers,
        })
    }
}

/// Where the optimized graph goes, refusing what would break this load or the next one.
fn optimized_path(
    folder: &Path,
    model_file: &Path,
    named_file: bool,
    file: &str,
) -> Result<std::path::PathBuf, String> {
    let at = |message: String| format!("[runtime] optimized_model_file \"{file}\": {message}");
    check_optimized_model_file(file)
        .map_err(|err| format!("[runtime] optimized_model_file {err}"))?;
    let path = folder.join(file);
    if path == model_file {
        return Err(at(
            "names the model file itself, which ONNX Runtime would overwrite".into(),
        ));
    }
    // A model file found as the folder's only `.onnx` file would have company after the first
    // load, and the next scan would find no model there.
    let beside = Path::new(file).components().count() == 1;
    let found_by_ending = !named_file
        && model_file.file_name().and_then(|name| name.to_str()) != Some(ONNX_MODEL_FILE);
    if beside && found_by_ending && has_model_extension(&path) {
        return Err(at(format!(
            "a second model file beside {}, which is found as the folder's only one: name \
             the model with model_filename, or the optimized file with another ending",
            model_file
                .file_name()
                .map(|name| name.to_string_lossy())
                .unwrap_or_default()
        )));
    }
    if path.parent().is_some_and(|parent| !parent.is_dir()) {
        return Err(at("its folder does not exist in the version folder".into()));
    }
    // ONNX Runtime writes the file wherever the path leads: through a linked folder out of the
    // version folder, through a link in its place, or into a FIFO, where it would block.
    let resolved = output_inside(folder, Path::new(file)).map_err(|err| at(err.to_string()))?;
    if std::fs::canonicalize(model_file).is_ok_and(|model| model == resolved) {
        return Err(at(
            "leads to the model file itself, which ONNX Runtime would overwrite".into(),
        ));
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Holder {
        runtime: RuntimeConfig,
    }

    fn parse(text: &str) -> Result<RuntimeConfig, String> {
        toml::from_str::<Holder>(&format!("[runtime]\n{text}\n"))
            .map(|holder| holder.runtime)
            .map_err(|err| err.message().to_owned())
    }

    #[test]
    fn every_key_reads_its_value() -> Result<(), String> {
        let config = parse(
            "intra_op_threads = 2\ngraph_optimization = \"basic\"\n\
             optimized_model_file = \"cache/optimized.onnx\"\nmemory_pattern = false\n\
             cpu_arena = false\nintra_op_spinning = false\ninter_op_spinning = true\n\
             execution_mode = \"parallel\"\ndevice_allocator_for_initializers = true",
        )?;
        assert_eq!(config.intra_op_threads, Some(2));
        assert_eq!(config.graph_optimization, Some(GraphOptimization::Basic));
        assert_eq!(
            config.optimized_model_file.as_deref(),
            Some("cache/optimized.onnx")
        );
        assert_eq!(config.memory_pattern, Some(false));
        assert_eq!(config.cpu_arena, Some(false));
        assert_eq!(config.intra_op_spinning, Some(false));
        assert_eq!(config.inter_op_spinning, Some(true));
        assert_eq!(config.execution_mode, Some(ExecutionMode::Parallel));
        assert_eq!(config.device_allocator_for_initializers, Some(true));
        assert_eq!(config.onnx_keys().len(), 8);
        assert_eq!(parse("")?, RuntimeConfig::default());
        Ok(())
    }

    #[test]
    fn a_wrong_value_is_refused_naming_the_key_and_the_value() {
        for (text, needles) in [
            (
                "graph_optimization = \"fast\"",
                &["graph_optimization", "\"fast\"", "\"extended\""][..],
            ),
            ("graph_optimization = 2", &["graph_optimization", "2"]),
            (
                "memory_pattern = 2",
                &["memory_pattern", "2 is not true or false"],
            ),
            ("cpu_arena = \"yes\"", &["cpu_arena", "\"yes\""]),
            ("execution_mode = \"both\"", &["execution_mode", "\"both\""]),
            (
                "optimized_model_file = \"../../escape.onnx\"",
                &[
                    "optimized_model_file",
                    "../../escape.onnx",
                    "inside the version folder",
                ],
            ),
            ("optimized_model_file = \"/tmp/x.onnx\"", &["/tmp/x.onnx"]),
            ("optimized_model_file = \"./x.onnx\"", &["./x.onnx"]),
            ("optimized_model_file = \"\"", &["optimized_model_file"]),
            ("optimized_model_file = 1", &["is not a path"]),
            ("intra_op_spining = true", &["intra_op_spining"]),
        ] {
            let err = parse(text).err().unwrap_or_default();
            for needle in needles {
                assert!(err.contains(needle), "{text}: {err}");
            }
        }
    }

    #[test]
    fn config_toml_wins_key_by_key() {
        let own = RuntimeConfig {
            cpu_arena: Some(true),
            ..RuntimeConfig::default()
        };
        let pbtxt = RuntimeConfig {
            cpu_arena: Some(false),
            memory_pattern: Some(false),
            intra_op_threads: Some(3),
            ..RuntimeConfig::default()
        };
        let merged = own.over(pbtxt);
        assert_eq!(merged.cpu_arena, Some(true));
        assert_eq!(merged.memory_pattern, Some(false));
        assert_eq!(merged.intra_op_threads, Some(3));
    }

    #[test]
    fn the_optimized_file_lands_in_the_version_folder_where_it_breaks_nothing() -> Result<(), String>
    {
        let folder =
            std::env::temp_dir().join(format!("tensorport-optimized-{}", std::process::id()));
        std::fs::create_dir_all(&folder).map_err(|e| e.to_string())?;
        let with_file = |file: &str| RuntimeConfig {
            optimized_model_file: Some(file.into()),
            ..RuntimeConfig::default()
        };
        let model = folder.join(ONNX_MODEL_FILE);
        let renamed = folder.join("ranker.onnx");
        let options = with_file("optimized.onnx").onnx_options(&folder, &model, false);
        let cases = [
            (
                with_file("model.onnx").onnx_options(&folder, &model, false),
                "itself",
            ),
            (
                with_file("optimized.onnx").onnx_options(&folder, &renamed, false),
                "model_filename",
            ),
            (
                with_file("missing/optimized.onnx").onnx_options(&folder, &model, false),
                "folder does not exist",
            ),
        ];
        let named = with_file("optimized.onnx").onnx_options(&folder, &renamed, true);
        // A folder linked out of the version folder, a link in the file's place, an alias of
        // the model file through a link to its own folder: ONNX Runtime would write there.
        let links = || -> std::io::Result<()> {
            std::fs::create_dir_all(folder.join("elsewhere"))?;
            std::os::unix::fs::symlink(std::env::temp_dir(), folder.join("out"))?;
            std::os::unix::fs::symlink(folder.join("elsewhere/x"), folder.join("linked.onnx"))?;
            std::os::unix::fs::symlink(".", folder.join("here"))?;
            std::fs::write(&model, b"onnx")
        };
        let linked = links().map_err(|e| e.to_string()).map(|()| {
            [
                ("out/optimized.onnx", "does not lead to a file inside"),
                ("linked.onnx", "does not lead to a file inside"),
                ("here/model.onnx", "the model file itself"),
            ]
            .map(|(file, needle)| (with_file(file).onnx_options(&folder, &model, true), needle))
        });
        let other_ending = with_file("ranker.optimized").onnx_options(&folder, &renamed, false);
        let _ = std::fs::remove_dir_all(&folder);
        assert_eq!(
            options?.optimized_model_file,
            Some(folder.join("optimized.onnx"))
        );
        assert!(named.is_ok(), "{named:?}");
        assert!(other_ending.is_ok(), "{other_ending:?}");
        for (result, needle) in cases.into_iter().chain(linked?) {
            let err = result.err().unwrap_or_default();
            assert!(err.contains(needle), "{needle}: {err}");
        }
        Ok(())
    }
}
