//! Warmup: requests a new version runs before it serves, so that its first real request does
//! not pay for the runtime's lazy initialisation (allocations, kernel selection).

use bytes::Bytes;

use super::WarmupConfig;
use crate::backend::{Backend, Signature};
use crate::tensor::Tensor;

/// Runs the configured (or default) warmup on `backend`. Blocks.
pub fn run(backend: &dyn Backend, config: &WarmupConfig) -> Result<(), String> {
    if config.requests == 0 {
        return Ok(());
    }
    let sig = backend
        .signatures()
        .first()
        .ok_or("the model has no signature to warm up")?;
    let outputs: Vec<String> = sig.outputs.iter().map(|o| o.name.clone()).collect();
    for _ in 0..config.requests {
        let inputs = generated_inputs(sig, config)?;
        backend
            .run(sig, inputs, &outputs)
            .map_err(|err| format!("warmup request failed: {err}"))?;
    }
    Ok(())
}

/// Zero-valued inputs (empty strings for string inputs): dynamic first dimensions take the
/// configured batch size, other dynamic dimensions 1, unless `shapes` gives the full shape.
fn generated_inputs(
    sig: &Signature,
    config: &WarmupConfig,
) -> Result<Vec<(String, Tensor)>, String> {
    sig.inputs
        .iter()
        .map(|spec| {
            let shape: Vec<usize> = match config.shapes.get(&spec.name) {
                Some(shape) => shape.clone(),
                None => spec
                    .shape
                    .iter()
                    .enumerate()
                    .map(|(i, &dim)| match (i, usize::try_from(dim)) {
                        (_, Ok(fixed)) => fixed,
                        (0, Err(_)) => config.batch_size,
                        (_, Err(_)) => 1,
                    })
                    .collect(),
            };
            // Shapes come from the model's settings: checked, so a typo fails the load cleanly.
            let count = crate::tensor::element_count(&shape)
                .map_err(|err| format!("warmup input '{}': {err}", spec.name))?;
            let tensor = match spec.dtype.size() {
                Some(size) => {
                    let bytes = count.checked_mul(size).ok_or_else(|| {
                        format!("warmup input '{}': shape {shape:?} is too large", spec.name)
                    })?;
                    Tensor::dense(spec.dtype, shape, Bytes::from(vec![0u8; bytes]))
                }
                None => Tensor::strings(shape, vec![Bytes::new(); count]),
            }
            .map_err(|err| format!("warmup input '{}': {err}", spec.name))?;
            Ok((spec.name.clone(), tensor))
        })
        .collect()
}
