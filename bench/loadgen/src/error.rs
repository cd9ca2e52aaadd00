//! What can stop a run before it starts (failures during the run are counted, not raised).

#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    #[error("invalid option: {0}")]
    Config(String),
    #[error("cannot reach {target}: {message}")]
    Connect { target: String, message: String },
    #[error("shared memory: {0}")]
    SharedMemory(String),
    #[error("ONNX Runtime: {0}")]
    Runtime(String),
}
