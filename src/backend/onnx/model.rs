//! One loaded ONNX model version: its sessions, and a run over them.

use std::ffi::{CStr, CString};
use std::sync::{Mutex, MutexGuard, TryLockError};

use ort::value::DynValue;

use super::arena::Instance;
use super::inputs::input_value;
use super::outputs::{output_tensor, run_failure};
use super::types::element_type;
use crate::backend::onnx_raw;
use crate::backend::{
    Backend, BackendError, NamedTensor, OutputMemory, OutputTarget, Signature, TensorSpec,
};
use crate::tensor::{DataType, Tensor};

/// One ONNX model version.
///
/// By default every instance of a version runs the same session: ONNX Runtime's C API allows
/// concurrent `Run`s on one session (`onnx_raw::run`), so N instances hold one copy of the
/// weights and of their prepacked form, where separate sessions held one each (about twice
/// the weight file per extra instance: docs/BENCHMARKS.md, "Instances sharing a session").
/// `[instances] share_session = false` (Triton's `share_session_between_instances: "0"`)
/// gives each instance a session of its own instead, with its own arena and, with more than
/// one intra-op thread, its own thread pool. The batcher runs at most as many batches as
/// there are instances, so a run of separate sessions finds a free one without waiting.
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
    /// One session shared by every instance, or one per instance.
    sessions: Vec<Instance>,
    /// For separate sessions, one lock per session that a run holds; empty when shared.
    exclusive: Vec<Mutex<()>>,
    /// The model's input and output names as the runtime takes them.
    inputs: Vec<(String, CString)>,
    outputs: Vec<(String, CString)>,
    signatures: Vec<Signature>,
    /// Whether any session's arena reports what it holds.
    reports_held: bool,
}

impl OnnxModel {
    /// A version over `sessions` (at least one), called through `signature`: one session run
    /// concurrently when `shared`, else one per instance, each running one batch at a time.
    pub(super) fn new(
        sessions: Vec<Instance>,
        shared: bool,
        signature: Signature,
    ) -> Result<Self, String> {
        let reports_held = sessions.iter().any(Instance::reports);
        let names = |specs: &[TensorSpec]| {
            specs
                .iter()
                .map(|spec| Ok((spec.name.clone(), onnx_raw::c_name(&spec.name)?)))
                .collect::<Result<Vec<_>, String>>()
        };
        let exclusive = if shared {
            Vec::new()
        } else {
            sessions.iter().map(|_| Mutex::new(())).collect()
        };
        Ok(Self {
            inputs: names(&signature.inputs)?,
            outputs: names(&signature.outputs)?,
            sessions,
            exclusive,
            signatures: vec![signature],
            reports_held,
        })
    }

    /// The session a run uses, and the lock it holds while it runs: the shared session
    /// without one, else the first free session, or, when every one is busy (a warmup run
    /// beside serving ones), the first after waiting for it.
    fn session(&self) -> Result<(&Instance, Option<MutexGuard<'_, ()>>), BackendError> {
        let poisoned = || BackendError::runtime("the session lock is poisoned".into());
        let first = self
            .sessions
            .first()
            .ok_or_else(|| BackendError::runtime("the model has no session".into()))?;
        if self.exclusive.is_empty() {
            return Ok((first, None));
        }
        for (instance, lock) in self.sessions.iter().zip(&self.exclusive) {
            match lock.try_lock() {
                Ok(guard) => return Ok((instance, Some(guard))),
                Err(TryLockError::WouldBlock) => continue,
                Err(TryLockError::Poisoned(_)) => return Err(poisoned()),
            }
        }
        let guard = self
            .exclusive
            .first()
            .ok_or_else(poisoned)?
            .lock()
            .map_err(|_| poisoned())?;
        Ok((first, Some(guard)))
    }

    /// The name of input or output `name` as the runtime takes it.
    fn c_name<'n>(names: &'n [(String, CString)], name: &str) -> Result<&'n CStr, BackendError> {
        names
            .iter()
            .find(|(known, _)| known == name)
            .map(|(_, c)| c.as_c_str())
            .ok_or_else(|| BackendError::invalid_input(format!("the model has no tensor '{name}'")))
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
                .map(Instance::held)
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
                let value = input_value(tensor)
                    .map_err(|err| BackendError::invalid_input(err.in_input(name).to_string()))?;
                Ok((Self::c_name(&self.inputs, name)?, value))
            })
            .collect::<Result<Vec<_>, BackendError>>()?;
        let output_names = outputs
            .iter()
            .map(|name| Self::c_name(&self.outputs, name))
            .collect::<Result<Vec<_>, _>>()?;

        let mut preallocated: Vec<Option<DynValue>> = Vec::with_capacity(outputs.len());
        let mut placed: Vec<Option<InPlace<'_>>> = Vec::with_capacity(outputs.len());
        for (i, name) in outputs.iter().enumerate() {
            let (tensor, in_place) = match (targets.get(i), signature.output(name)) {
                (Some(Some(target)), Some(spec)) => {
                    preallocate(spec, signature, &inputs, target.as_ref())?
                }
                _ => (None, None),
            };
            preallocated.push(tensor);
            placed.push(in_place);
        }

        let elements = inputs
            .iter()
            .map(|(_, tensor)| tensor.element_count())
            .fold(0usize, usize::saturating_add);
        let (instance, _running) = self.session()?;
        let pairs: Vec<(&CStr, &DynValue)> = values
            .iter()
            .map(|(name, value)| (*name, &**value))
            .collect();
        let results = onnx_raw::run(
            &instance.session,
            &pairs,
            &output_names,
            preallocated,
            instance.output_allocator(),
        );
        // A run that failed may have grown the arena before it did.
        instance.after_run(elements);
        let results = results.map_err(run_failure)?;
        outputs
            .iter()
            .zip(placed)
            .zip(results)
            .map(|((name, placed), value)| {
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

/// A tensor over `target` for output `spec` to be written into, when its shape is known
/// before the run and the memory fits it; `(None, None)` otherwise.
fn preallocate<'t>(
    spec: &TensorSpec,
    signature: &Signature,
    inputs: &[NamedTensor],
    target: &'t dyn OutputMemory,
) -> Result<(Option<DynValue>, Option<InPlace<'t>>), BackendError> {
    let (Some(size), Some(shape)) = (spec.dtype.size(), known_shape(spec, signature, inputs))
    else {
        return Ok((None, None));
    };
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let tensor = onnx_raw::tensor_over(target, element_type(spec.dtype), size, &dims)
        .map_err(BackendError::runtime)?;
    let in_place = tensor.is_some().then_some(InPlace {
        dtype: spec.dtype,
        shape,
        target,
    });
    Ok((tensor, in_place))
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
