//! Finding `libonnxruntime.so` without help from the user: an explicit path, then
//! `ORT_DYLIB_PATH`, then the project's `.venv` (the test environment, `make venv`) or
//! `.cache/runtime-venv` (the onnxruntime wheel alone, `make runtime`, which `make serve` uses).

use std::path::{Path, PathBuf};

/// What to say when the library cannot be found, on one line.
pub const HOW_TO_GET_IT: &str = "cannot find the ONNX Runtime library: run `make runtime` (installs the onnxruntime==1.31.1 wheel alone into .cache/runtime-venv), or set ORT_DYLIB_PATH to a libonnxruntime.so";

/// The environments, relative to a search root, that may hold the onnxruntime wheel.
const VENVS: [&str; 2] = [".venv", ".cache/runtime-venv"];

/// The library to load. `explicit` is the `--ort-library` flag, `env_path` the value of
/// `ORT_DYLIB_PATH`; `search_roots` are folders whose `.venv` may hold the wheel.
pub fn find(
    explicit: Option<&Path>,
    env_path: Option<&Path>,
    search_roots: &[PathBuf],
) -> Option<PathBuf> {
    if let Some(path) = explicit.or(env_path) {
        return Some(path.to_path_buf());
    }
    search_roots
        .iter()
        .find_map(|root| VENVS.iter().find_map(|venv| in_venv(&root.join(venv))))
}

/// Folders to look for the environments in: the working directory and every ancestor of the executable
/// (so `target/release/tensorport` finds the checkout's `.venv`).
pub fn default_search_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(cwd);
    }
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    roots
}

fn in_venv(venv: &Path) -> Option<PathBuf> {
    let lib = venv.join("lib");
    let mut pythons: Vec<PathBuf> = std::fs::read_dir(&lib)
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("python"))
        })
        .collect();
    pythons.sort();
    pythons.into_iter().rev().find_map(|python| {
        let capi = python.join("site-packages/onnxruntime/capi");
        let mut libraries: Vec<PathBuf> = std::fs::read_dir(&capi)
            .ok()?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| {
                path.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("libonnxruntime.so"))
            })
            .collect();
        libraries.sort();
        libraries.pop()
    })
}
