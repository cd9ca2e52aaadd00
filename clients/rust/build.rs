//! Compiles the client side of the services the server speaks from the repository's `proto/`
//! (the same files the server compiles), with protox: no `protoc` needed.

use std::path::Path;

const SERVICES: [&str; 3] = [
    "tensorflow_serving/apis/prediction_service.proto",
    "tensorflow_serving/apis/model_service.proto",
    "kserve/grpc_service.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new("../../proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let files: Vec<_> = SERVICES.iter().map(|f| root.join(f)).collect();
    let descriptors = protox::compile(&files, [root])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        // Tensor payloads stay `Bytes`: a response's raw outputs are slices of its buffer.
        .bytes(".")
        .compile_fds(descriptors)?;
    Ok(())
}
