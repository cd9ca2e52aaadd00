//! One validated request on one model version: answered from the response cache where the
//! model has a share of it, else run through the version's batcher (and the answer stored).

use std::sync::Arc;
use std::time::Instant;

use crate::backend::NamedTensor;
use crate::batcher::ValidRequest;
use crate::cache::KeyParts;
use crate::error::Error;
use crate::repository::LoadedModel;

/// Runs a validated request on `model`: answered from the response cache where the model has
/// a share of it and the same request was answered before, else through its batcher (and the
/// answer stored). Every way into a model's runs goes through here, an ensemble's steps too,
/// so that each is counted and cached alike.
///
/// A request that may be cached runs on the key's copy of its inputs, never on a client's
/// shared memory directly, and returns its outputs in the runtime's buffers rather than
/// writing them into the client's regions: the client could rewrite either while the model
/// runs, and the stored answer would then not be the answer to its key. The protocol copies
/// outputs into the regions afterwards, for a hit and a miss alike.
pub async fn run_validated(
    model: &Arc<LoadedModel>,
    request: ValidRequest,
) -> Result<Vec<NamedTensor>, Error> {
    let arrived = Instant::now();
    let Some(scope) = &model.response_cache else {
        return submit(model, request, arrived).await;
    };
    let parts = KeyParts {
        model: &model.name,
        load: scope.id(),
        signature: request.signature(),
        inputs: request.inputs(),
        outputs: request.outputs(),
    };
    let Some((key, copied_inputs)) = scope.store().key(&parts) else {
        return submit(model, request, arrived).await;
    };
    if let Some(answer) = scope.store().get(&key) {
        let outputs = answer.to_vec();
        model
            .stats
            .record_cache_hit(request.inferences(), arrived.elapsed());
        return Ok(outputs);
    }
    let looked_up = arrived.elapsed();
    let outputs = submit(model, request.over_copied_inputs(copied_inputs), arrived).await?;
    let storing = Instant::now();
    scope.store().insert(scope.id(), key, &outputs);
    model.stats.cache_miss.record(looked_up + storing.elapsed());
    Ok(outputs)
}

/// Runs `request` through `model`'s batcher, counting its success or failure since `arrived`.
async fn submit(
    model: &LoadedModel,
    request: ValidRequest,
    arrived: Instant,
) -> Result<Vec<NamedTensor>, Error> {
    match model.batcher.submit(request).await {
        Ok(outputs) => {
            model.stats.success.record(arrived.elapsed());
            Ok(outputs)
        }
        Err(err) => {
            model.stats.fail.record(arrived.elapsed());
            Err(err.into())
        }
    }
}
