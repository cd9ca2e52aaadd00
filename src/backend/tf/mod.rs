//! TensorFlow SavedModels (`saved_model.pb` + `variables/`) through the TensorFlow C API.
//!
//! The model is loaded with the `serve` tag; every signature def it carries is served
//! (`serving_default` first, so it is the default). Runs go through one `Session`, which
//! TensorFlow allows to run from several threads at once.

mod byte_strings;
mod session_config;
mod signatures;
mod tensors;

use std::path::Path;

use tensorflow::{Code, Graph, SavedModelBundle, Session, SessionOptions, SessionRunArgs, Status};

use super::{Backend, BackendError, NamedTensor, RuntimeThreads, Signature};
use byte_strings::Decoder;
use signatures::Binding;
use tensors::Feed;

/// The tag set TF Serving loads.
const SERVE_TAG: &str = "serve";

/// Triton's platform name for SavedModels.
const PLATFORM: &str = "tensorflow_savedmodel";

/// One loaded SavedModel version.
pub struct TfModel {
    session: Session,
    /// The session runs this graph; kept with it for the operations the bindings name.
    _graph: Graph,
    signatures: Vec<Signature>,
    /// Parallel to `signatures`.
    bindings: Vec<Binding>,
    /// Makes string inputs that are not UTF-8.
    decoder: Decoder,
}

impl TfModel {
    /// Loads the SavedModel in `dir` with `threads` (0: TensorFlow's choice). Blocks.
    pub fn load(dir: &Path, threads: RuntimeThreads) -> Result<Self, BackendError> {
        let load_error = |message: String| BackendError::load(dir, message);
        let mut options = SessionOptions::new();
        options
            .set_config(&session_config::thread_config(
                threads.intra_op,
                threads.inter_op,
            ))
            .map_err(|status| load_error(status.to_string()))?;
        let mut graph = Graph::new();
        let bundle = SavedModelBundle::load(&options, [SERVE_TAG], &mut graph, dir)
            .map_err(|status| load_error(status.to_string()))?;
        let signatures::Found { served, skipped } =
            signatures::read(bundle.meta_graph_def(), &graph).map_err(load_error)?;
        for skip in &skipped {
            tracing::warn!(path = %dir.display(), signature = %skip.signature, reason = %skip.reason, "signature not served");
        }
        if served.is_empty() {
            return Err(load_error(format!(
                "the SavedModel has no signature this server can serve (tag '{SERVE_TAG}')"
            )));
        }
        let (signatures, mut bindings): (Vec<Signature>, Vec<Binding>) = served.into_iter().unzip();
        byte_strings::encode_string_outputs(&mut graph, &signatures, &mut bindings)
            .map_err(load_error)?;
        let decoder = Decoder::add_to(&mut graph).map_err(load_error)?;
        Ok(Self {
            session: bundle.session,
            _graph: graph,
            signatures,
            bindings,
            decoder,
        })
    }
}

impl Backend for TfModel {
    fn platform(&self) -> &'static str {
        PLATFORM
    }

    fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    fn signature_method(&self, signature: &str) -> Option<&str> {
        self.signatures
            .iter()
            .position(|sig| sig.name == signature)
            .and_then(|i| self.bindings.get(i))
            .map(|binding| binding.method.as_str())
    }

    fn run(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        let binding = self
            .signatures
            .iter()
            .position(|sig| sig.name == signature.name)
            .and_then(|i| self.bindings.get(i))
            .ok_or_else(|| {
                BackendError::runtime(format!("no signature '{}' in this model", signature.name))
            })?;
        let feeds = inputs
            .iter()
            .map(|(name, tensor)| {
                let endpoint = binding.inputs.get(name).ok_or_else(|| {
                    BackendError::invalid_input(format!("unknown input '{name}'"))
                })?;
                let binary = |dims: &[u64], elements: &[bytes::Bytes]| {
                    self.decoder.decode(&self.session, dims, elements)
                };
                let feed = Feed::new(tensor, &binary)
                    .map_err(|err| BackendError::invalid_input(format!("input '{name}': {err}")))?;
                Ok((feed, endpoint))
            })
            .collect::<Result<Vec<_>, BackendError>>()?;

        let mut args = SessionRunArgs::new();
        for (feed, endpoint) in &feeds {
            feed.feed(&mut args, endpoint);
        }
        let tokens = outputs
            .iter()
            .map(|name| {
                let endpoint = binding.outputs.get(name);
                let spec = signature.output(name);
                match (endpoint, spec) {
                    (Some(endpoint), Some(spec)) => Ok((
                        args.request_fetch(&endpoint.operation, endpoint.index),
                        spec.dtype,
                    )),
                    _ => Err(BackendError::invalid_input(format!(
                        "unknown output '{name}'"
                    ))),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.session.run(&mut args).map_err(run_error)?;
        outputs
            .iter()
            .zip(tokens)
            .map(|(name, (token, dtype))| {
                tensors::fetch(&mut args, token, dtype).map(|tensor| (name.clone(), tensor))
            })
            .collect()
    }
}

/// A failed run: TensorFlow's InvalidArgument (a shape the graph refuses, an index out of
/// range) is the client's input; anything else is the server's.
fn run_error(status: Status) -> BackendError {
    match status.code() {
        Code::InvalidArgument | Code::OutOfRange => BackendError::invalid_input(status.to_string()),
        _ => BackendError::runtime(status.to_string()),
    }
}
