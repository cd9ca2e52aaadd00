//! Compiles every `.proto` file under `proto/` into Rust with protox (pure Rust, no `protoc`)
//! and tonic-prost-build. Byte fields decode into `bytes::Bytes`, so tensor payloads are
//! slices of the received buffer rather than copies.
//!
//! With the `tensorflow` feature, it also records where `make libtensorflow` put the TensorFlow
//! libraries in the binaries' run path, so they start without LD_LIBRARY_PATH.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new("proto");
    let mut files = Vec::new();
    collect_protos(root, &mut files)?;
    files.sort();
    println!("cargo:rerun-if-changed=proto");

    let descriptors = protox::compile(&files, [root])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .bytes(".")
        .compile_fds(descriptors)?;
    link_native_libraries();
    Ok(())
}

/// Where `make libtensorflow` puts the TensorFlow libraries, relative to the package.
const LIBTENSORFLOW_DIR: &str = ".cache/libtensorflow";

/// Adds the native libraries of the enabled features to the run path of every binary this
/// package links (the server, tests, benches).
fn link_native_libraries() {
    if std::env::var_os("CARGO_FEATURE_TENSORFLOW").is_some() {
        let root = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
        let dir = root.unwrap_or_default().join(LIBTENSORFLOW_DIR);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }
}

fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            out.push(path);
        }
    }
    Ok(())
}
