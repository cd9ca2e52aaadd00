//! The ONNX Runtime library, loaded once per process, and the sessions built from a model file.

use std::path::Path;

use ort::environment::Environment;
use ort::session::Session;

use super::arena::Instance;
use super::model::OnnxModel;
use super::options::OnnxSessionOptions;
use super::types::specs;
use crate::backend::{BackendError, RuntimeThreads, Signature, DEFAULT_SIGNATURE};

/// The loaded ONNX Runtime library and its environment. ONNX Runtime allows one environment
/// per process: create this once (in `main`, or once per test binary) and clone it.
#[derive(Clone)]
pub struct OnnxRuntime {
    env: Environment,
}

impl OnnxRuntime {
    /// Loads `libonnxruntime` from `library` and creates the process's environment. A second
    /// call in the same process fails.
    pub fn load(library: &Path) -> Result<Self, BackendError> {
        let env = ort::init_from(library)
            .map_err(|err| BackendError::library(err.to_string()))?
            .with_name("tensorport")
            .with_telemetry(false)
            .build()
            .map_err(|err| BackendError::library(err.to_string()))?;
        Ok(Self { env })
    }

    /// Loads the model file at `path` for `instances` instances (at least one): one session
    /// they all run when `shared`, else a session each; and reads its signature.
    pub fn load_model(
        &self,
        path: &Path,
        threads: RuntimeThreads,
        options: &OnnxSessionOptions,
        instances: usize,
        shared: bool,
    ) -> Result<OnnxModel, BackendError> {
        let load_error = |message: String| BackendError::load(path, message);
        let first = self.session(path, threads, options)?;
        let signature = Signature {
            name: DEFAULT_SIGNATURE.to_owned(),
            inputs: specs(first.inputs()).map_err(load_error)?,
            outputs: specs(first.outputs()).map_err(load_error)?,
        };
        let sessions = if shared { 1 } else { instances.max(1) };
        let mut loaded = Vec::with_capacity(sessions);
        loaded.push(Instance::new(first).map_err(load_error)?);
        for _ in 1..sessions {
            loaded.push(Instance::new(self.session(path, threads, options)?).map_err(load_error)?);
        }
        OnnxModel::new(loaded, shared, signature).map_err(load_error)
    }

    fn session(
        &self,
        path: &Path,
        threads: RuntimeThreads,
        options: &OnnxSessionOptions,
    ) -> Result<Session, BackendError> {
        let load_error = |message: String| BackendError::load(path, message);
        let mut builder = Session::builder(&self.env).map_err(|err| load_error(err.to_string()))?;
        if threads.intra_op > 0 {
            builder = builder
                .with_intra_threads(threads.intra_op)
                .map_err(|err| load_error(err.to_string()))?;
        }
        if threads.inter_op > 0 {
            builder = builder
                .with_inter_threads(threads.inter_op)
                .map_err(|err| load_error(err.to_string()))?;
        }
        builder = options.apply(builder).map_err(load_error)?;
        builder
            .commit_from_file(path)
            .map_err(|err| load_error(err.to_string()))
    }
}
