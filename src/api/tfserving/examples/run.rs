//! Examples run through a signature: which signature an operation calls, and the request
//! prepared and run like every other.

use super::set::Examples;
use crate::backend::{Backend, Signature};
use crate::error::Error;
use crate::infer::{Decoded, InferService, ModelTarget, PredictionResult};
use crate::request::RequestContext;

/// Runs `examples` through the signature `target` names (or the one the `examples` module
/// documentation picks for `method`), asking for the outputs `outputs` picks from it (an
/// operation's rule, checked before anything runs). Goes through [`InferService::prepare`] like every other
/// request, so the built inputs meet the same validation as a Predict's.
pub async fn run(
    infer: &InferService,
    target: ModelTarget<'_>,
    context: Option<&RequestContext>,
    examples: &Examples,
    method: &str,
    outputs: impl FnOnce(&Signature) -> Result<Vec<String>, Error>,
) -> Result<PredictionResult, Error> {
    let limits = infer.limits().clone();
    let model = infer
        .resolve_loading(target.model, target.version.clone(), context)
        .await?;
    let signature = route(model.backend.as_ref(), target.signature, method);
    let target = ModelTarget {
        signature: &signature,
        ..target
    };
    let prepared = infer
        .prepare(target, context, |sig| {
            let output_filter = outputs(sig)?;
            let declares_method = model.backend.signature_method(&sig.name) == Some(method);
            let inputs = if declares_method {
                examples.serialized_inputs(sig, method, &limits)?
            } else {
                examples.inputs(sig, &limits)?
            };
            // TF Serving's API has no priority, and no timeout but the transport's.
            Ok(Decoded {
                inputs,
                output_filter,
                ..Decoded::default()
            })
        })
        .await?;
    infer.run(prepared).await
}

/// The signature an operation of `method` calls when the request names `requested` (empty:
/// none), as the `examples` module documentation says.
pub(super) fn route(backend: &dyn Backend, requested: &str, method: &str) -> String {
    if !requested.is_empty() {
        return requested.to_owned();
    }
    let signatures = backend.signatures();
    let declares = |sig: &&Signature| backend.signature_method(&sig.name) == Some(method);
    match signatures.first() {
        Some(default) if !declares(&default) => signatures
            .iter()
            .find(declares)
            .map(|sig| sig.name.clone())
            .unwrap_or_default(),
        _ => String::new(),
    }
}
