//! Reads the model directory layout: `DIR/<name>/<version>/<model file>`.

use std::path::{Path, PathBuf};

/// The model file names a version folder may hold, in the order they are looked for.
pub const ONNX_MODEL_FILE: &str = "model.onnx";
/// A TorchScript module (`torch.jit.save`); its signature comes from config.toml.
pub const TORCH_MODEL_FILE: &str = "model.pt";
/// A TensorFlow SavedModel: this file, its `variables/` folder and optional `assets*/`.
pub const SAVED_MODEL_FILE: &str = "saved_model.pb";

#[derive(Debug, Clone, PartialEq)]
pub struct VersionFolder {
    pub version: u64,
    pub path: PathBuf,
}

/// Why the model directory itself could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("cannot read model directory {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The blocking thread that reads the directory ended without an answer (it panicked, or
    /// the runtime is shutting down).
    #[error("reading the model directory stopped: {0}")]
    Stopped(String),
}

/// The numeric version folders of one model folder, ascending by version number. A folder
/// without any that holds the model file itself (the MLServer and KServe layout) is its own
/// version 1.
pub fn scan_model(path: &Path) -> Result<Vec<VersionFolder>, ScanError> {
    let mut versions: Vec<VersionFolder> = subfolders(path)?
        .into_iter()
        .filter_map(|(entry, path)| {
            parse_version(&entry).map(|version| VersionFolder { version, path })
        })
        .collect();
    if versions.is_empty() && model_file_in(path).is_some() {
        return Ok(vec![VersionFolder {
            version: FLAT_VERSION,
            path: path.to_path_buf(),
        }]);
    }
    versions.sort_by_key(|v| v.version);
    Ok(versions)
}

/// The version a flat model folder (model file directly inside) is served as.
pub const FLAT_VERSION: u64 = 1;

/// Whether `version`'s folder is its model's folder itself rather than a version folder.
pub fn is_flat(version: &VersionFolder) -> bool {
    version.version == FLAT_VERSION
        && version
            .path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(parse_version)
            != Some(FLAT_VERSION)
}

/// Folder name Triton gives a SavedModel inside a version folder.
pub const TRITON_SAVED_MODEL_DIR: &str = "model.savedmodel";

/// File name endings of models looked for when no default name is present.
const MODEL_EXTENSIONS: [&str; 4] = ["onnx", "pt", "pth", "torchscript"];

/// The model `folder` holds directly: a default name (`model.onnx`, `model.pt`,
/// `saved_model.pb`, `model.savedmodel/`), else the one file ending in `.onnx`, `.pt`,
/// `.pth` or `.torchscript` (none when there are several: which one to serve is not ours to
/// guess).
pub fn model_file_in(folder: &Path) -> Option<PathBuf> {
    for name in [ONNX_MODEL_FILE, TORCH_MODEL_FILE] {
        let path = folder.join(name);
        if path.is_file() {
            return Some(path);
        }
    }
    for dir in [folder.to_path_buf(), folder.join(TRITON_SAVED_MODEL_DIR)] {
        if dir.join(SAVED_MODEL_FILE).is_file() {
            return Some(dir);
        }
    }
    let mut found = std::fs::read_dir(folder)
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_file() && has_model_extension(path));
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// Whether `path`'s name ends like a model file's (`.onnx`, `.pt`, `.pth`, `.torchscript`).
pub fn has_model_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| MODEL_EXTENSIONS.contains(&e))
}

/// Whether `dir` is one model rather than a repository of models: its only subfolders are
/// version folders, or it holds the model file directly and no subfolder is a model folder
/// (so a stray file beside model folders leaves a repository a repository).
pub fn holds_one_model(dir: &Path) -> bool {
    let Ok(folders) = subfolders(dir) else {
        return false;
    };
    let versions_only = !folders.is_empty()
        && folders
            .iter()
            .all(|(name, _)| parse_version(name).is_some());
    let is_model_folder = |path: &Path| {
        model_file_in(path).is_some()
            || subfolders(path)
                .is_ok_and(|inner| inner.iter().any(|(name, _)| parse_version(name).is_some()))
    };
    versions_only
        || (model_file_in(dir).is_some() && !folders.iter().any(|(_, path)| is_model_folder(path)))
}

/// Version folder names are positive integers, compared as numbers (`10` is after `9`).
pub fn parse_version(name: &str) -> Option<u64> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok().filter(|&v| v > 0)
}

/// Folders a file system creates by itself: never a model or a version.
const SYSTEM_FOLDERS: [&str; 1] = ["lost+found"];

/// The layout a model folder must have, for messages that tell an operator what to fix.
pub const EXPECTED_LAYOUT: &str = "expected <model-dir>/<model>/<version>/model.onnx (or \
     model.pt, or saved_model.pb with variables/), where <version> is a positive integer \
     such as 1";

/// The visible subfolders of `dir` (symlinks followed), as (name, path). Hidden folders and
/// `lost+found` (the root of many mounted volumes) are skipped.
pub fn subfolders(dir: &Path) -> Result<Vec<(String, PathBuf)>, ScanError> {
    let read_error = |source| ScanError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_error)? {
        let entry = entry.map_err(read_error)?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        // `is_dir` follows symlinks, so a linked model folder counts.
        if !name.starts_with('.') && !SYSTEM_FOLDERS.contains(&name.as_str()) && path.is_dir() {
            out.push((name, path));
        }
    }
    Ok(out)
}

/// How deep and how wide [`files_under`] looks. Links are followed (a version folder, or its
/// `variables/`, may be linked in), so a link to its own folder would make a walk endless, and
/// a few such links exponential: the bounds keep it short whatever a folder holds.
const MAX_WALK_DEPTH: usize = 16;
const MAX_WALK_ENTRIES: usize = 100_000;

/// The files at any depth under `dir` (links followed), within the bounds above, nearest
/// first: should the bounds cut a walk short, what they leave out lies deepest. Every entry
/// seen counts against the bound, folders too, since links among folders alone would
/// otherwise be walked without end. Blocks.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut entries_left = MAX_WALK_ENTRIES;
    let mut folders = std::collections::VecDeque::from([(dir.to_path_buf(), 0)]);
    while let Some((folder, depth)) = folders.pop_front() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for path in entries.filter_map(|entry| entry.ok().map(|e| e.path())) {
            let Some(left) = entries_left.checked_sub(1) else {
                return files;
            };
            entries_left = left;
            if !path.is_dir() {
                files.push(path);
            } else if depth < MAX_WALK_DEPTH {
                folders.push_back((path, depth + 1));
            }
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_positive_integers() {
        assert_eq!(parse_version("1"), Some(1));
        assert_eq!(parse_version("0010"), Some(10));
        assert_eq!(parse_version("0"), None);
        assert_eq!(parse_version("-1"), None);
        assert_eq!(parse_version("v2"), None);
        assert_eq!(parse_version(""), None);
        assert_eq!(parse_version("99999999999999999999999"), None);
    }

    #[test]
    fn scan_orders_versions_numerically() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("tensorport-scan-{}", std::process::id()));
        for version in ["2", "10", "9", "notes"] {
            std::fs::create_dir_all(dir.join("m").join(version))?;
        }
        std::fs::write(dir.join("README.md"), "not a model")?;
        std::fs::create_dir_all(dir.join("lost+found"))?;
        std::fs::create_dir_all(dir.join(".snapshot").join("1"))?;
        let models = subfolders(&dir)?;
        let versions = scan_model(&dir.join("m"))?;
        std::fs::remove_dir_all(&dir)?;
        assert_eq!(models.len(), 1);
        let versions: Vec<u64> = versions.iter().map(|v| v.version).collect();
        assert_eq!(versions, vec![2, 9, 10]);
        Ok(())
    }

    #[test]
    fn a_flat_folder_is_version_one() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("tensorport-flat-{}", std::process::id()));
        let model = dir.join("m");
        std::fs::create_dir_all(&model)?;
        std::fs::write(model.join("ranker.onnx"), b"onnx")?;
        let flat = scan_model(&model)?;
        let one_model = holds_one_model(&model);
        let repository = holds_one_model(&dir);
        std::fs::write(model.join("other.onnx"), b"onnx")?;
        let ambiguous = scan_model(&model)?;
        std::fs::create_dir_all(model.join("3"))?;
        let versioned = scan_model(&model)?;
        let versions_only = holds_one_model(&model);
        std::fs::write(dir.join("stray.onnx"), b"onnx")?;
        let stray_file_in_repository = holds_one_model(&dir);
        std::fs::remove_dir_all(&dir)?;

        assert_eq!(flat.len(), 1);
        assert!(is_flat(&flat[0]));
        assert!(one_model && !repository);
        assert!(ambiguous.is_empty());
        assert_eq!(versioned.iter().map(|v| v.version).collect::<Vec<_>>(), [3]);
        assert!(!is_flat(&versioned[0]));
        assert!(versions_only);
        assert!(!stray_file_in_repository);
        Ok(())
    }

    /// Links from a version folder to itself, a few of them: a walk that followed them
    /// without bounds would never end (each level multiplies the folders by the links).
    #[test]
    fn a_walk_through_links_to_their_own_folder_ends() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("tensorport-walk-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("model.onnx"), b"onnx")?;
        for link in ["a", "b", "c", "d"] {
            std::os::unix::fs::symlink(".", dir.join(link))?;
        }
        let files = files_under(&dir);
        std::fs::remove_dir_all(&dir)?;
        assert!(
            files.contains(&dir.join("model.onnx")),
            "{:?}",
            files.first()
        );
        assert!(files.len() < MAX_WALK_ENTRIES, "{}", files.len());
        Ok(())
    }
}
