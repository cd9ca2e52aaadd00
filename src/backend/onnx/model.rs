//! One loaded ONNX model version: its sessions, and a run over them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{MutexGuard, TryLockError};

use ort::session::{OutputSelector, RunOptions};

use super::arena::{Instance, Metered};
use super::inputs::input_value;
use super::outputs::{output_tensor, run_error};
use super::types::element_type;
use crate::backend::onnx_raw;
use crate::backend::{
    Backend, BackendError, NamedTensor, OutputMemory, OutputTarget, Signature, TensorSpec,
};
use crate::tensor::{DataType, Tensor};

/// One ONNX model version.
///
/// Instances are separate sessions, not concurrent runs of one session. ONNX Runtime's C API
/// documents `Run` as safe to call concurrently, but `ort` (rc.15) runs a session through
/// `&mut` because, its documentation says, some execution providers' allocators and
/// statistics trackers are not thread-safe; sharing one session would take our own `unsafe`
/// calls to `Run` beside the two narrow ones in `onnx_raw`. Measured (debug build, 2 cores,
/// KServe HTTP, 4 clients): a 256 -> 2048 -> 2048 -> 1 MLP (19 MB of weights) takes 65 MiB
/// resident with one instance, 103 MiB with two, 183 MiB with four, i.e. about twice its
/// weights per extra session (the weights and their prepacked copy); the `spin` test model at
/// 1.8 ms a run answered 476 req/s with one instance, 999 with two, and 894 loaded as two
/// separate models. Throughput is what a shared session would also give; the memory is the
/// price of keeping every run on safe `ort` calls, paid only by models that ask for
/// instances. The batcher runs at most as many batches as there are sessions, so a run finds
/// a free session without waiting.
///
/// Each session keeps the CPU arena ONNX Runtime gives it by default: a run's buffers come
/// from memory the session already holds, instead of from `malloc` (and, for large buffers,
/// fresh pages faulted in) on every run. The arena never gives memory back while the session
/// lives and grows by powers of two, so what a version holds after serving can be several
/// times what it held at load; [`Backend::held_bytes`] reports it, and the model memory budget
/// charges it (`repository::charge`). ONNX Runtime offers no per-session bound for the CPU
/// arena (`arena_extend_strategy` and `max_mem` apply to an arena shared through the
/// environment, which would outlive an evicted version), so charging what it holds is how a
/// budget stays true; turning it off would trade that for page faults on every large run.
pub struct OnnxModel {
    /// One per instance; a run takes the first one that is free.
    sessions: Vec<Instance>,
    signatures: Vec<Signature>,
    /// Whether any session's arena reports what it holds.
    reports_held: bool,
}

impl OnnxModel {
    /// A version over `sessions` (one per instance, at least one), called through `signature`.
    pub(super) fn new(sessions: Vec<Instance>, signature: Signature) -> Self {
        let reports_held = sessions.iter().any(Instance::reports);
        Self {
            sessions,
            signatures: vec![signature],
            reports_held,
        }
    }

    /// The first free session; when every one is busy (a warmup run beside serving ones),
    /// waits for the first.
    fn session(&self) -> Result<(MutexGuard<'_, Metered>, &AtomicU64), BackendError> {
        let poisoned = || BackendError::runtime("the session lock is poisoned".into());
        for instance in &self.sessions {
            match instance.session.try_lock() {
                Ok(guard) => return Ok((guard, &instance.held)),
                Err(TryLockError::WouldBlock) => continue,
                Err(TryLockError::Poisoned(_)) => return Err(poisoned()),
            }
        }
        let first = self
            .sessions
            .first()
            .ok_or_else(|| BackendError::runtime("the model has no session".into()))?;
        let guard = first.session.lock().map_err(|_| poisoned())?;
        Ok((guard, &first.held))
    }
}

impl Backend for OnnxModel {
    fn platform(&self) -> &'static str {
        "onnxruntime_onnx"
    }

    fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    /// What the sessions' arenas hold, as last measured; `None` when none can report it.
    fn held_bytes(&self) -> Option<u64> {
        self.reports_held.then(|| {
            self.sessions
                .iter()
                .map(|instance| instance.held.load(Ordering::Relaxed))
                .fold(0u64, u64::saturating_add)
        })
    }

    fn run(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        self.run_into(signature, inputs, outputs, &[])
    }

    /// Outputs with a target whose shape is known before the run (fixed dimensions, or named
    /// dimensions shared with an input) are preallocated over the target's memory, so the
    /// runtime writes them there; the others come back in the runtime's own buffers.
    fn run_into(
        &self,
        signature: &Signature,
        inputs: Vec<NamedTensor>,
        outputs: &[String],
        targets: &[OutputTarget],
    ) -> Result<Vec<NamedTensor>, BackendError> {
        let values = inputs
            .iter()
            .map(|(name, tensor)| {
                input_value(tensor)
                    .map(|value| (name.as_str(), value))
                    .map_err(|err| BackendError::invalid_input(err.in_input(name).to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;

        let mut selector = OutputSelector::default();
        let mut placed: Vec<Option<InPlace<'_>>> = vec![None; outputs.len()];
        for (i, name) in outputs.iter().enumerate() {
            let (Some(Some(target)), Some(spec)) = (targets.get(i), signature.output(name)) else {
                continue;
            };
            let (Some(size), Some(shape)) =
                (spec.dtype.size(), known_shape(spec, signature, &inputs))
            else {
                continue;
            };
            let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            let tensor =
                onnx_raw::tensor_over(target.as_ref(), element_type(spec.dtype), size, &dims)
                    .map_err(BackendError::runtime)?;
            if let Some(tensor) = tensor {
                selector = selector.preallocate(name.clone(), tensor);
                placed[i] = Some(InPlace {
                    dtype: spec.dtype,
                    shape,
                    target: target.as_ref(),
                });
            }
        }
        // Run options cost an allocation per run: only made when an output is preallocated.
        let options = if placed.iter().any(Option::is_some) {
            let options =
                RunOptions::new().map_err(|err| BackendError::runtime(err.to_string()))?;
            Some(options.with_outputs(selector))
        } else {
            None
        };

        let elements = inputs
            .iter()
            .map(|(_, tensor)| tensor.element_count())
            .fold(0usize, usize::saturating_add);
        let (mut metered, held) = self.session()?;
        let metered = &mut *metered;
        let results = match &options {
            Some(options) => metered.session.run_with_options(values, options),
            None => metered.session.run(values),
        };
        // A run that failed may have grown the arena before it did.
        metered.meter.after_run(elements, held);
        let mut results = results.map_err(run_error)?;
        outputs
            .iter()
            .zip(placed)
            .map(|(name, placed)| {
                let value = results.remove(name).ok_or_else(|| {
                    BackendError::runtime(format!("the runtime returned no output '{name}'"))
                })?;
                let tensor = match placed {
                    // Written in place: the output is a view of the caller's memory.
                    Some(InPlace {
                        dtype,
                        shape,
                        target,
                    }) => {
                        let size = dtype.size().unwrap_or(1) * shape.iter().product::<usize>();
                        Tensor::dense(dtype, shape, target.view(size))
                            .map_err(|err| BackendError::runtime(err.to_string()))?
                    }
                    None => output_tensor(value)?,
                };
                Ok((name.clone(), tensor))
            })
            .collect()
    }
}

/// An output the runtime writes into the caller's memory.
#[derive(Clone)]
struct InPlace<'t> {
    dtype: DataType,
    shape: Vec<usize>,
    target: &'t dyn OutputMemory,
}

/// The shape an output will have, when the model fixes it or names each dynamic dimension
/// after one of an input's dimensions.
fn known_shape(
    spec: &TensorSpec,
    signature: &Signature,
    inputs: &[NamedTensor],
) -> Option<Vec<usize>> {
    spec.shape
        .iter()
        .zip(&spec.symbols)
        .map(|(&dim, symbol)| {
            if let Ok(fixed) = usize::try_from(dim) {
                return Some(fixed);
            }
            if symbol.is_empty() {
                return None;
            }
            inputs.iter().find_map(|(name, tensor)| {
                let input = signature.input(name)?;
                let axis = input.symbols.iter().position(|s| s == symbol)?;
                tensor.shape().get(axis).copied()
            })
        })
        .collect()
}
