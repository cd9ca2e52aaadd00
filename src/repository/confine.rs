//! Keeps the admin APIs inside the model roots.
//!
//! Model names arrive from clients (KServe repository load / unload, TF Serving's reload-config
//! list) and are joined onto `--model-dir`, so a name must be a plain name: one path component,
//! never `.` or `..`, no separator, no NUL. A reload-config `base_path` is resolved with
//! [`std::fs::canonicalize`] (so `..` and symlinks are followed to where they really lead) and
//! must then lie under `--model-dir` or a root named by `--allow-model-paths`.
//!
//! Paths the operator names (the start-up flags, the `base_path`s of the `models.config` the
//! server was started with, on every re-read of that file) are not confined: they come from
//! the operator's own command line and disk, so [`resolve_trusted`] only makes them absolute
//! (a relative path starts at the working directory, as it does for every other tool) and
//! checks the folder exists. Those folders then become roots of their own, so that a reload
//! naming a folder the operator already served is not refused.
//!
//! Clients never see the server's absolute paths: a refused `base_path` is not echoed, a missing
//! one is refused with the same words as one outside the roots (no probing which files exist),
//! and [`ModelRoots::redact`] rewrites the roots in load errors before they reach a status
//! answer.

use std::path::{Component, Path, PathBuf};

/// Longest model name accepted; file systems allow 255 bytes per component.
pub const MAX_MODEL_NAME_BYTES: usize = 255;

/// Why a model name or `base_path` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    #[error("a model name must not be empty")]
    EmptyName,
    #[error("model name is {0} bytes long; the limit is {MAX_MODEL_NAME_BYTES}")]
    NameTooLong(usize),
    #[error(
        "model name '{0}' is not a plain name: it must not be '.' or '..' nor contain '/', '\\' \
         or NUL"
    )]
    NotPlain(String),
    /// Holds the name escaped (`\n`, `\u{1b}`): a name that reaches a log or a message raw
    /// could forge lines of its own or drive the reader's terminal.
    #[error("model name \"{0}\" is not a plain name: it contains a control character")]
    ControlCharacter(String),
    #[error(
        "model '{0}': base_path is not an existing folder under the model directory or under a \
         root allowed by --allow-model-paths"
    )]
    OutsideRoots(String),
    /// An operator's path, shown whole: it is the operator who reads this, at start-up.
    #[error("model '{name}': {path} is not an existing folder")]
    NoFolder { name: String, path: PathBuf },
    /// A reload-config's payload-log prefix outside the log folders (see `log_roots`); the
    /// prefix is not echoed, as a refused `base_path` is not.
    #[error(
        "model '{0}': logging_config.log_collector_config.filename_prefix must name a file in \
         an existing folder under --allow-log-paths (or one the start-up models.config logs \
         to), without '..'"
    )]
    LogPrefixOutside(String),
}

/// The folder an operator's `base_path` names (empty: `root`'s folder named `name`): relative
/// paths start at `root`, which itself may be relative to the working directory. The result is
/// absolute but symlinks are kept, so a mounted volume swapped behind a link is followed.
pub fn resolve_trusted(root: &Path, name: &str, base_path: &Path) -> Result<PathBuf, ConfineError> {
    check_model_name(name)?;
    let joined = if base_path.as_os_str().is_empty() {
        root.join(name)
    } else {
        root.join(base_path)
    };
    let no_folder = || ConfineError::NoFolder {
        name: name.to_owned(),
        path: joined.clone(),
    };
    let absolute = std::path::absolute(&joined).map_err(|_| no_folder())?;
    if absolute.is_dir() {
        Ok(absolute)
    } else {
        Err(no_folder())
    }
}

/// A name as it may be joined onto a model root.
pub fn check_model_name(name: &str) -> Result<(), ConfineError> {
    if name.is_empty() {
        return Err(ConfineError::EmptyName);
    }
    if name.len() > MAX_MODEL_NAME_BYTES {
        return Err(ConfineError::NameTooLong(name.len()));
    }
    refuse_control_characters(name)?;
    let plain = name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && matches!(
            Path::new(name).components().collect::<Vec<_>>().as_slice(),
            [Component::Normal(_)]
        );
    if plain {
        Ok(())
    } else {
        Err(ConfineError::NotPlain(name.to_owned()))
    }
}

/// Refuses a name (a model's, a label's: anything a client names) that carries a control
/// character, with the name escaped in the refusal.
pub fn refuse_control_characters(name: &str) -> Result<(), ConfineError> {
    if name.chars().any(char::is_control) {
        return Err(ConfineError::ControlCharacter(
            name.escape_default().to_string(),
        ));
    }
    Ok(())
}

/// The folders model versions may be loaded from: `--model-dir` and `--allow-model-paths`.
#[derive(Debug, Clone)]
pub struct ModelRoots {
    /// `--model-dir` as given, which is where models are looked up by name.
    model_dir: PathBuf,
    /// Every root in canonical form, `--model-dir` first.
    canonical: Vec<PathBuf>,
}

impl ModelRoots {
    /// Roots of `model_dir` alone. A directory that cannot be canonicalised (it will fail to
    /// scan anyway) is kept as given.
    pub fn new(model_dir: &Path) -> Self {
        let canonical = std::fs::canonicalize(model_dir).unwrap_or_else(|_| model_dir.into());
        Self {
            model_dir: model_dir.to_path_buf(),
            canonical: vec![canonical],
        }
    }

    /// Adds the roots of `--allow-model-paths`; each must exist.
    pub fn allow(&mut self, roots: &[PathBuf]) -> std::io::Result<()> {
        for root in roots {
            let canonical = std::fs::canonicalize(root).map_err(|err| {
                std::io::Error::new(
                    err.kind(),
                    format!("--allow-model-paths: {}: {err}", root.display()),
                )
            })?;
            self.canonical.push(canonical);
        }
        Ok(())
    }

    /// Adds the folders the operator's start-up flags and `models.config` serve from, so that a
    /// reload naming one of them again stays allowed. A folder that cannot be canonicalised
    /// (gone since) is left out: a reload could not load from it anyway.
    pub fn trust<'a>(&mut self, folders: impl IntoIterator<Item = &'a Path>) {
        for folder in folders {
            if let Ok(canonical) = std::fs::canonicalize(folder) {
                if !self.canonical.contains(&canonical) {
                    self.canonical.push(canonical);
                }
            }
        }
    }

    /// Where the versions of model `name` live by default.
    pub fn default_path(&self, name: &str) -> Result<PathBuf, ConfineError> {
        check_model_name(name)?;
        Ok(self.model_dir.join(name))
    }

    /// The folder a reload-config entry names: its `base_path` (relative paths are taken from
    /// the model directory) resolved through every symlink and `..`, if it lies under a root.
    pub fn resolve(&self, name: &str, base_path: &str) -> Result<PathBuf, ConfineError> {
        check_model_name(name)?;
        if base_path.is_empty() {
            return self.default_path(name);
        }
        let outside = || ConfineError::OutsideRoots(name.to_owned());
        if base_path.contains('\0') {
            return Err(outside());
        }
        let resolved =
            std::fs::canonicalize(self.model_dir.join(base_path)).map_err(|_| outside())?;
        let inside = self.canonical.iter().any(|root| resolved.starts_with(root));
        if inside && resolved.is_dir() {
            Ok(resolved)
        } else {
            Err(outside())
        }
    }

    /// `message` with every root replaced by a placeholder, for answers to clients: a path
    /// under `--model-dir` reads `<model-dir>/name/1/model.onnx`.
    pub fn redact(&self, message: &str) -> String {
        let mut named: Vec<(String, String)> = vec![(
            self.model_dir.display().to_string(),
            "<model-dir>".to_owned(),
        )];
        for (i, root) in self.canonical.iter().enumerate() {
            let placeholder = if i == 0 {
                "<model-dir>".to_owned()
            } else {
                format!("<allowed-root-{i}>")
            };
            named.push((root.display().to_string(), placeholder));
        }
        // Longest first, so that a root inside another is replaced whole.
        named.sort_by_key(|(root, _)| std::cmp::Reverse(root.len()));
        let mut out = message.to_owned();
        for (root, placeholder) in named {
            if root.len() > 1 {
                out = out.replace(&root, &placeholder);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_pass() {
        for good in ["resnet", "my-model_2", "a.b", "..a", "名前"] {
            assert_eq!(check_model_name(good), Ok(()), "{good}");
        }
        for bad in [
            "", ".", "..", "../x", "a/b", "/etc", "a\\b", "a\0b", "x/..", "./x",
        ] {
            assert!(check_model_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            check_model_name(&"a".repeat(256)),
            Err(ConfineError::NameTooLong(256))
        );
    }

    /// A name that would forge a log line (a newline and a timestamp) or drive a terminal
    /// (ESC) is refused, and the refusal carries it escaped.
    #[test]
    fn names_with_control_characters_are_refused_escaped() {
        for (bad, shown) in [
            (
                "m\n2026-12-01T00:00:00Z ERROR forged",
                "m\\n2026-12-01T00:00:00Z ERROR forged",
            ),
            ("m\u{1b}[2J", "m\\u{1b}[2J"),
            ("m\r", "m\\r"),
            ("m\u{7f}", "m\\u{7f}"),
            ("m\u{85}", "m\\u{85}"),
            ("a\0b", "a\\u{0}b"),
        ] {
            let err = check_model_name(bad);
            assert_eq!(
                err,
                Err(ConfineError::ControlCharacter(shown.to_owned())),
                "{bad:?}"
            );
            let message = err.map_err(|e| e.to_string()).err().unwrap_or_default();
            assert!(!message.chars().any(char::is_control), "{message:?}");
        }
    }

    #[test]
    fn base_paths_stay_under_the_roots() -> Result<(), Box<dyn std::error::Error>> {
        let base = std::env::temp_dir().join(format!("tensorport-confine-{}", std::process::id()));
        let models = base.join("models");
        let other = base.join("other");
        std::fs::create_dir_all(models.join("m"))?;
        std::fs::create_dir_all(other.join("n"))?;
        #[cfg(unix)]
        std::os::unix::fs::symlink(&other, models.join("link"))?;
        let mut roots = ModelRoots::new(&models);
        let canonical_models = std::fs::canonicalize(&models)?;

        assert_eq!(roots.resolve("m", "")?, models.join("m"));
        assert_eq!(roots.resolve("m", "m")?, canonical_models.join("m"));
        let outside = |name: &str| Err(ConfineError::OutsideRoots(name.to_owned()));
        assert_eq!(roots.resolve("x", "/proc"), outside("x"));
        assert_eq!(roots.resolve("x", "../other/n"), outside("x"));
        assert_eq!(roots.resolve("x", "missing"), outside("x"));
        #[cfg(unix)]
        assert_eq!(roots.resolve("x", "link/n"), outside("x"));
        assert!(matches!(
            roots.resolve("../x", "m"),
            Err(ConfineError::NotPlain(_))
        ));

        roots.allow(std::slice::from_ref(&other))?;
        assert_eq!(
            roots.resolve("n", &other.join("n").display().to_string())?,
            std::fs::canonicalize(other.join("n"))?
        );
        let message = format!(
            "cannot load {}",
            canonical_models.join("m/1/model.onnx").display()
        );
        assert_eq!(
            roots.redact(&message),
            "cannot load <model-dir>/m/1/model.onnx"
        );
        std::fs::remove_dir_all(&base)?;
        Ok(())
    }

    /// An operator's relative path starts at the working directory (the package root under
    /// `cargo test`), an absolute one anywhere; only a missing folder or a bad name is refused.
    #[test]
    fn operator_paths_resolve_from_the_working_directory() -> Result<(), Box<dyn std::error::Error>>
    {
        let here = std::env::current_dir()?;
        let relative = Path::new("examples/models/ranker");
        assert_eq!(
            resolve_trusted(Path::new(""), "ranker", relative)?,
            here.join(relative)
        );
        assert_eq!(
            resolve_trusted(Path::new("examples/models"), "ranker", Path::new(""))?,
            here.join(relative)
        );
        assert_eq!(
            resolve_trusted(Path::new("examples"), "ranker", Path::new("models/ranker"))?,
            here.join(relative)
        );
        let elsewhere = std::env::temp_dir();
        assert_eq!(
            resolve_trusted(Path::new("examples"), "m", &elsewhere)?,
            elsewhere
        );
        assert!(matches!(
            resolve_trusted(Path::new(""), "m", Path::new("no/such/folder")),
            Err(ConfineError::NoFolder { .. })
        ));
        assert!(matches!(
            resolve_trusted(Path::new(""), "..", relative),
            Err(ConfineError::NotPlain(_))
        ));
        Ok(())
    }

    /// A folder the operator served at start-up may be named by a reload; its neighbours not.
    #[test]
    fn trusted_folders_become_roots_and_nothing_more() -> Result<(), Box<dyn std::error::Error>> {
        let base = std::env::temp_dir().join(format!("tensorport-trust-{}", std::process::id()));
        let models = base.join("models");
        let served = base.join("elsewhere").join("ranker");
        let neighbour = base.join("elsewhere").join("other");
        std::fs::create_dir_all(&models)?;
        std::fs::create_dir_all(&served)?;
        std::fs::create_dir_all(&neighbour)?;
        let mut roots = ModelRoots::new(&models);
        let served_text = served.display().to_string();
        let outside = |name: &str| Err(ConfineError::OutsideRoots(name.to_owned()));
        assert_eq!(roots.resolve("ranker", &served_text), outside("ranker"));
        roots.trust([served.as_path()]);
        let resolved = roots.resolve("ranker", &served_text);
        let refused = roots.resolve("other", &neighbour.display().to_string());
        let escaped = roots.resolve("x", &format!("{served_text}/../other"));
        let canonical = std::fs::canonicalize(&served)?;
        std::fs::remove_dir_all(&base)?;
        assert_eq!(resolved?, canonical);
        assert_eq!(refused, outside("other"));
        assert_eq!(escaped, outside("x"));
        Ok(())
    }
}
