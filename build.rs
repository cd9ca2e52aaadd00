//! Compiles every `.proto` file under `proto/` into Rust with protox (pure Rust, no `protoc`)
//! and tonic-prost-build. Byte fields decode into `bytes::Bytes`, so tensor payloads are
//! slices of the received buffer rather than copies.

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
    Ok(())
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
