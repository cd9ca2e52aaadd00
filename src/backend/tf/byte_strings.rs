//! String tensors of arbitrary bytes, in and out of TensorFlow.
//!
//! TensorFlow strings are bytes (a serialized `tf.Example`, an encoded image), but the
//! `tensorflow` crate builds string tensors only from Rust `String`s and reads them back only
//! as such, panicking on other bytes. Rather than unsafe code over the C API, the server lets
//! TensorFlow's own base64 ops carry the bytes across, added to the graph at load:
//! - **in**: strings that are not all UTF-8 are sent as web-safe base64 text, and a first run
//!   of `DecodeBase64` turns them into a string tensor TensorFlow holds; the crate passes that
//!   tensor on to the model's run without ever reading its bytes.
//! - **out**: every string output is fetched through `EncodeBase64` and decoded here, so a
//!   binary output reaches the client as the bytes the model wrote.

use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use bytes::Bytes;
use tensorflow::{
    DataType as TfType, Graph, Operation, Session, SessionRunArgs, Status, Tensor as TfTensor,
};

use super::signatures::{Binding, Endpoint};
use crate::backend::{BackendError, Signature};
use crate::tensor::DataType;

/// Where the names of the operations this module adds start.
const PREFIX: &str = "tensorport";

/// `base`, or `base_N` where the model already has an operation called `base`.
fn unused_name(graph: &Graph, base: &str) -> String {
    let taken = |name: &str| matches!(graph.operation_by_name(name), Ok(Some(_)));
    let mut name = base.to_owned();
    let mut suffix = 0;
    while taken(&name) {
        suffix += 1;
        name = format!("{base}_{suffix}");
    }
    name
}

/// Adds every string output of `signatures` an encoder, replacing its endpoint in `bindings`
/// (parallel to `signatures`) by the encoder's.
pub fn encode_string_outputs(
    graph: &mut Graph,
    signatures: &[Signature],
    bindings: &mut [Binding],
) -> Result<(), String> {
    for (signature, binding) in signatures.iter().zip(bindings) {
        for spec in &signature.outputs {
            if spec.dtype != DataType::String {
                continue;
            }
            if let Some(output) = binding.outputs.get_mut(&spec.name) {
                *output = add_encoder(graph, output)?;
            }
        }
    }
    Ok(())
}

/// The decoding ops of one graph: base64 text in, byte strings out.
pub struct Decoder {
    text: Operation,
    bytes: Operation,
}

impl Decoder {
    /// Adds `Placeholder(string) -> DecodeBase64` to `graph`.
    pub fn add_to(graph: &mut Graph) -> Result<Self, String> {
        let text = {
            let mut op = graph
                .new_operation(
                    "Placeholder",
                    &unused_name(graph, &format!("{PREFIX}/bytes_in")),
                )
                .map_err(|err| err.to_string())?;
            op.set_attr_type("dtype", TfType::String)
                .map_err(|err| err.to_string())?;
            op.finish().map_err(status_text)?
        };
        let bytes = {
            let mut op = graph
                .new_operation(
                    "DecodeBase64",
                    &unused_name(graph, &format!("{PREFIX}/bytes_decode")),
                )
                .map_err(|err| err.to_string())?;
            op.add_input(text.clone());
            op.finish().map_err(status_text)?
        };
        Ok(Self { text, bytes })
    }

    /// The byte strings `elements` as a TensorFlow string tensor of shape `dims`, made by a run
    /// of the decoding ops on `session` (the session of the graph they were added to).
    pub fn decode(
        &self,
        session: &Session,
        dims: &[u64],
        elements: &[Bytes],
    ) -> Result<TfTensor<String>, String> {
        let text: Vec<String> = elements
            .iter()
            .map(|bytes| URL_SAFE_NO_PAD.encode(bytes))
            .collect();
        let encoded = TfTensor::<String>::new(dims)
            .with_values(&text)
            .map_err(status_text)?;
        let mut args = SessionRunArgs::new();
        args.add_feed(&self.text, 0, &encoded);
        let token = args.request_fetch(&self.bytes, 0);
        session.run(&mut args).map_err(status_text)?;
        // The crate reads a fetched tensor's strings only when they are indexed; this one is
        // only fed to the next run, so its bytes are never read as UTF-8.
        args.fetch::<String>(token).map_err(status_text)
    }
}

/// Adds `EncodeBase64` over `output` to `graph` and returns its endpoint, which the server
/// fetches instead of `output`.
fn add_encoder(graph: &mut Graph, output: &Endpoint) -> Result<Endpoint, String> {
    let name = unused_name(graph, &format!("{PREFIX}/bytes_encode"));
    let mut op = graph
        .new_operation("EncodeBase64", &name)
        .map_err(|err| err.to_string())?;
    op.add_input(tensorflow::Output {
        operation: output.operation.clone(),
        index: output.index,
    });
    let operation = op.finish().map_err(status_text)?;
    Ok(Endpoint {
        operation,
        index: 0,
    })
}

/// The bytes of one element fetched through an encoder.
pub fn decode_element(text: &str) -> Result<Bytes, BackendError> {
    // EncodeBase64 writes no padding by default; padded text is accepted all the same.
    URL_SAFE_NO_PAD
        .decode(text)
        .or_else(|_| URL_SAFE.decode(text))
        .map(Bytes::from)
        .map_err(|err| BackendError::runtime(format!("a string output came back garbled: {err}")))
}

fn status_text(status: Status) -> String {
    status.to_string()
}
