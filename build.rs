//! Compiles every `.proto` file under `proto/` into Rust with protox (pure Rust, no `protoc`)
//! and tonic-prost-build. Byte fields decode into `bytes::Bytes`, so tensor payloads are
//! slices of the received buffer rather than copies.
//!
//! With the `torch` feature it also records LibTorch's library folder as the run-time search
//! path of every binary it links (server, tests, benches), so they start without
//! `LD_LIBRARY_PATH`; with the `tensorflow` feature, likewise the folder `make libtensorflow`
//! fills.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new("proto");
    let mut files = Vec::new();
    collect_protos(root, &mut files)?;
    files.sort();
    println!("cargo:rerun-if-changed=proto");

    let descriptors = protox::compile(&files, [root])?;
    // The descriptors themselves, so that text-format files (Triton's config.pbtxt, TF
    // Serving's models.config) can be read at run time against the same messages.
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    std::fs::write(
        out_dir.join("descriptors.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .bytes(".")
        .compile_fds(descriptors)?;
    link_libtorch_rpath();
    link_libtensorflow_rpath();
    Ok(())
}

/// `LIBTORCH` is set by `.cargo/config.toml` (to `.cache/libtorch`, made absolute) or by the
/// user; torch-sys links against `$LIBTORCH/lib`, and the loader must find the same folder.
fn link_libtorch_rpath() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    if let Some(libtorch) = std::env::var_os("LIBTORCH") {
        let lib = Path::new(&libtorch).join("lib");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
}

/// Where `make libtensorflow` puts the TensorFlow libraries, relative to the package (and
/// where `.cargo/config.toml` points pkg-config, through which tensorflow-sys links them).
const LIBTENSORFLOW_DIR: &str = ".cache/libtensorflow";

fn link_libtensorflow_rpath() {
    if std::env::var_os("CARGO_FEATURE_TENSORFLOW").is_none() {
        return;
    }
    let root = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    let dir = root.unwrap_or_default().join(LIBTENSORFLOW_DIR);
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
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
