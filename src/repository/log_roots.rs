//! Keeps a reload-config's payload logs inside the folders the operator allows.
//!
//! TF Serving takes `logging_config.log_collector_config.filename_prefix` as written, so a
//! client of `HandleReloadConfigRequest` could have the server write its bytes anywhere it can
//! write, making folders on the way. Here a prefix that arrives over the network must name a
//! file in an existing folder under `--allow-log-paths`, or under a folder the operator's own
//! start-up `models.config` logs to (so that a client sending back the list the server started
//! with is not refused). The folder is resolved through every symlink before the check; `..`
//! is refused outright, and nothing is ever created for a client: the folder must exist. A
//! relative prefix is taken from the first `--allow-log-paths` folder.
//!
//! The operator's own `models.config` is not confined (see `confine`): its prefix is taken as
//! written, as TF Serving takes it.

use std::path::{Component, Path, PathBuf};

use super::confine::ConfineError;

/// Longest file name a prefix may end in: the server appends `.<unix-ms>-<n>.tfrecord`, and
/// file systems allow 255 bytes a name.
const MAX_PREFIX_NAME_BYTES: usize = 200;

/// A client's prefix, resolved: where the files go, and the allowed folder it lies under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfinedPrefix {
    pub prefix: PathBuf,
    pub root: PathBuf,
}

/// The folders a reload-config's `filename_prefix` may name, in canonical form.
#[derive(Debug, Clone, Default)]
pub struct LogRoots {
    /// `--allow-log-paths`, in order: relative prefixes start at the first.
    allowed: Vec<PathBuf>,
    /// The folders of the start-up `models.config`'s prefixes.
    trusted: Vec<PathBuf>,
}

impl LogRoots {
    /// Adds the folders of `--allow-log-paths`; each must exist.
    pub fn allow(&mut self, roots: &[PathBuf]) -> std::io::Result<()> {
        for root in roots {
            let canonical = std::fs::canonicalize(root).map_err(|err| {
                std::io::Error::new(
                    err.kind(),
                    format!("--allow-log-paths: {}: {err}", root.display()),
                )
            })?;
            self.allowed.push(canonical);
        }
        Ok(())
    }

    /// Adds the folders the operator's start-up prefixes write into. One that does not exist
    /// yet (the writer makes it with the first record) is left out.
    pub fn trust<'a>(&mut self, prefixes: impl IntoIterator<Item = &'a Path>) {
        for prefix in prefixes {
            let folder = match prefix.parent() {
                Some(folder) if !folder.as_os_str().is_empty() => folder,
                _ => Path::new("."),
            };
            if let Ok(canonical) = std::fs::canonicalize(folder) {
                if !self.trusted.contains(&canonical) {
                    self.trusted.push(canonical);
                }
            }
        }
    }

    /// Where model `name`'s logs go for a client's `prefix`, if it lies under a root. The
    /// refusal names the field, never the path.
    pub fn resolve(&self, name: &str, prefix: &str) -> Result<ConfinedPrefix, ConfineError> {
        let outside = || ConfineError::LogPrefixOutside(name.to_owned());
        if prefix.chars().any(char::is_control) {
            return Err(outside());
        }
        let prefix = Path::new(prefix);
        if prefix
            .components()
            .any(|part| matches!(part, Component::ParentDir))
        {
            return Err(outside());
        }
        let joined = if prefix.is_absolute() {
            prefix.to_path_buf()
        } else {
            self.allowed.first().ok_or_else(outside)?.join(prefix)
        };
        let file_name = match joined.components().next_back() {
            Some(Component::Normal(file_name)) if file_name.len() <= MAX_PREFIX_NAME_BYTES => {
                file_name
            }
            _ => return Err(outside()),
        };
        let folder = joined.parent().ok_or_else(outside)?;
        let real = std::fs::canonicalize(folder).map_err(|_| outside())?;
        let root = self
            .allowed
            .iter()
            .chain(&self.trusted)
            .find(|root| real.starts_with(root))
            .filter(|_| real.is_dir())
            .ok_or_else(outside)?;
        Ok(ConfinedPrefix {
            prefix: real.join(file_name),
            root: root.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_prefixes_stay_under_the_allowed_folders() -> Result<(), Box<dyn std::error::Error>> {
        let base = std::env::temp_dir().join(format!("tensorport-logroots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let logs = base.join("logs");
        let outside = base.join("outside");
        let served = base.join("served");
        std::fs::create_dir_all(logs.join("sub"))?;
        std::fs::create_dir_all(&outside)?;
        std::fs::create_dir_all(&served)?;
        std::os::unix::fs::symlink(&outside, logs.join("link"))?;
        let mut roots = LogRoots::default();
        let text = |path: &Path| path.display().to_string();
        let refused = |roots: &LogRoots, prefix: &str| {
            roots.resolve("m", prefix) == Err(ConfineError::LogPrefixOutside("m".into()))
        };

        // Nothing allowed: every client prefix is refused, relative ones too.
        assert!(refused(&roots, &text(&logs.join("m"))));
        assert!(refused(&roots, "m"));

        roots.allow(std::slice::from_ref(&logs))?;
        let real_logs = std::fs::canonicalize(&logs)?;
        let inside = roots.resolve("m", &text(&logs.join("sub").join("ranker")))?;
        let relative = roots.resolve("m", "sub/ranker")?;
        for prefix in [
            text(&outside.join("m")),
            format!("{}/../outside/m", logs.display()),
            format!("{}/sub/../../outside/m", logs.display()),
            text(&logs.join("link").join("m")),
            text(&logs.join("missing").join("m")),
            text(&logs.join("..")),
            format!("{}/", logs.display()),
            "/proc/self/m".into(),
            format!("{}/m\nforged", logs.display()),
            text(&logs.join("x".repeat(201))),
            String::new(),
        ] {
            assert!(refused(&roots, &prefix), "{prefix:?}");
        }

        // The operator's start-up prefix folder, and nothing beside it.
        assert!(refused(&roots, &text(&served.join("m"))));
        roots.trust([served.join("ranker_log").as_path()]);
        let trusted = roots.resolve("m", &text(&served.join("m")))?;
        std::fs::remove_dir_all(&base)?;

        assert_eq!(inside.prefix, real_logs.join("sub").join("ranker"));
        assert_eq!(inside.root, real_logs);
        assert_eq!(relative, inside);
        assert_eq!(trusted.prefix.file_name(), Some("m".as_ref()));
        Ok(())
    }

    #[test]
    fn the_refusal_names_the_field_and_not_the_path() {
        let message = LogRoots::default()
            .resolve("ranker", "/tmp/x/deep/er/pwned")
            .map_err(|err| err.to_string())
            .err()
            .unwrap_or_default();
        assert!(
            message.contains("logging_config.log_collector_config.filename_prefix"),
            "{message}"
        );
        assert!(
            message.contains("'ranker'") && !message.contains("/tmp"),
            "{message}"
        );
    }
}
