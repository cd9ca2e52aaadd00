//! ONNX models on ONNX Runtime through `ort` (loaded at run time from `libonnxruntime.so`).
//!
//! Inputs reach the runtime as tensors over the request's own bytes (`TensorRef`), so a request
//! that runs alone is not copied; outputs stay in the buffers the runtime allocated and are
//! handed to the protocol encoders as `Bytes` that own them.

use std::borrow::Cow;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use bytes::Bytes;
use ort::environment::Environment;
use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::{OutputSelector, RunOptions, Session, SessionInputValue};
use ort::value::{
    DynValue, PrimitiveTensorElementType, Tensor as OrtTensor, TensorElementType, TensorRef,
    ValueType,
};

use super::onnx_raw;
use super::{
    Backend, BackendError, NamedTensor, OutputMemory, OutputTarget, RuntimeThreads, Signature,
    TensorSpec, DEFAULT_SIGNATURE,
};
use crate::tensor::{DataType, DecodeError, Element, Tensor};

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

    /// Loads the model file at `path` as `instances` sessions (at least one) and reads its
    /// signature.
    pub fn load_model(
        &self,
        path: &Path,
        threads: RuntimeThreads,
        instances: usize,
    ) -> Result<OnnxModel, BackendError> {
        let load_error = |message: String| BackendError::load(path, message);
        let first = self.session(path, threads)?;
        let signature = Signature {
            name: DEFAULT_SIGNATURE.to_owned(),
            inputs: specs(first.inputs()).map_err(load_error)?,
            outputs: specs(first.outputs()).map_err(load_error)?,
        };
        let mut sessions = Vec::with_capacity(instances.max(1));
        sessions.push(Instance::new(first));
        for _ in 1..instances {
            sessions.push(Instance::new(self.session(path, threads)?));
        }
        let reports_held = sessions.iter().any(Instance::reports);
        Ok(OnnxModel {
            sessions,
            signatures: vec![signature],
            reports_held,
        })
    }

    fn session(&self, path: &Path, threads: RuntimeThreads) -> Result<Session, BackendError> {
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
        builder
            .commit_from_file(path)
            .map_err(|err| load_error(err.to_string()))
    }
}

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

/// One instance: its session, and what its arena held when last measured.
struct Instance {
    session: Mutex<Metered>,
    /// The bytes the session's arena has taken from the system, as of the last measurement;
    /// read without the session's lock.
    held: AtomicU64,
}

/// A session and what measures its arena.
struct Metered {
    session: Session,
    meter: ArenaMeter,
}

/// Measures one session's CPU arena.
struct ArenaMeter {
    /// The session's arena; `None` where the runtime cannot report it.
    arena: Option<Allocator>,
    /// The most input elements a run of the session has had. The arena grows when a run
    /// needs more than it holds, which follows the inputs' size: it is measured again after a
    /// run larger than any before (the first one included), so that runs of sizes already
    /// seen pay nothing for the measurement.
    widest_input: usize,
}

/// An arena's statistic: the bytes it has taken from the system, in use or not.
const ARENA_TOTAL: &std::ffi::CStr = c"TotalAllocated";

impl Instance {
    fn new(session: Session) -> Self {
        let arena = MemoryInfo::new(
            AllocationDevice::CPU,
            0,
            AllocatorType::Arena,
            MemoryType::Default,
        )
        .and_then(|info| Allocator::new(&session, info))
        .ok();
        let mut meter = ArenaMeter {
            arena,
            widest_input: 0,
        };
        let held = meter.bytes();
        if held.is_none() {
            meter.arena = None;
        }
        Self {
            session: Mutex::new(Metered { session, meter }),
            held: AtomicU64::new(held.unwrap_or(0)),
        }
    }

    fn reports(&self) -> bool {
        self.session
            .lock()
            .is_ok_and(|metered| metered.meter.arena.is_some())
    }
}

impl ArenaMeter {
    /// What the arena holds now, where it reports it.
    fn bytes(&self) -> Option<u64> {
        let arena = self.arena.as_ref()?;
        onnx_raw::allocator_stat(arena, ARENA_TOTAL).ok().flatten()
    }

    /// After a run with `elements` input elements: measures the arena again into `held` if
    /// the run was larger than any before.
    fn after_run(&mut self, elements: usize, held: &AtomicU64) {
        if elements <= self.widest_input {
            return;
        }
        self.widest_input = elements;
        if let Some(bytes) = self.bytes() {
            held.store(bytes, Ordering::Relaxed);
        }
    }
}

impl OnnxModel {
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

fn element_type(dtype: DataType) -> TensorElementType {
    match dtype {
        DataType::Bool => TensorElementType::Bool,
        DataType::U8 => TensorElementType::Uint8,
        DataType::U16 => TensorElementType::Uint16,
        DataType::U32 => TensorElementType::Uint32,
        DataType::U64 => TensorElementType::Uint64,
        DataType::I8 => TensorElementType::Int8,
        DataType::I16 => TensorElementType::Int16,
        DataType::I32 => TensorElementType::Int32,
        DataType::I64 => TensorElementType::Int64,
        DataType::F16 => TensorElementType::Float16,
        DataType::BF16 => TensorElementType::Bfloat16,
        DataType::F32 => TensorElementType::Float32,
        DataType::F64 => TensorElementType::Float64,
        DataType::String => TensorElementType::String,
    }
}

fn run_error(err: ort::Error) -> BackendError {
    match err.code() {
        ort::ErrorCode::InvalidArgument => BackendError::invalid_input(err.message().to_owned()),
        _ => BackendError::runtime(err.to_string()),
    }
}

fn specs(outlets: &[ort::value::Outlet]) -> Result<Vec<TensorSpec>, String> {
    outlets
        .iter()
        .map(|outlet| match outlet.dtype() {
            ValueType::Tensor {
                ty,
                shape,
                dimension_symbols,
            } => Ok(TensorSpec {
                name: outlet.name().to_owned(),
                dtype: data_type(*ty).ok_or_else(|| {
                    format!("'{}' has unsupported element type {ty}", outlet.name())
                })?,
                shape: shape
                    .iter()
                    .map(|&dim| if dim < 0 { -1 } else { dim })
                    .collect(),
                symbols: (0..shape.len())
                    .map(|i| dimension_symbols.get(i).cloned().unwrap_or_default())
                    .collect(),
            }),
            other => Err(format!("'{}' is a {other}, not a tensor", outlet.name())),
        })
        .collect()
}

fn data_type(ty: TensorElementType) -> Option<DataType> {
    Some(match ty {
        TensorElementType::Bool => DataType::Bool,
        TensorElementType::Uint8 => DataType::U8,
        TensorElementType::Uint16 => DataType::U16,
        TensorElementType::Uint32 => DataType::U32,
        TensorElementType::Uint64 => DataType::U64,
        TensorElementType::Int8 => DataType::I8,
        TensorElementType::Int16 => DataType::I16,
        TensorElementType::Int32 => DataType::I32,
        TensorElementType::Int64 => DataType::I64,
        TensorElementType::Float16 => DataType::F16,
        TensorElementType::Bfloat16 => DataType::BF16,
        TensorElementType::Float32 => DataType::F32,
        TensorElementType::Float64 => DataType::F64,
        TensorElementType::String => DataType::String,
        _ => return None,
    })
}

fn input_value(tensor: &Tensor) -> Result<SessionInputValue<'_>, DecodeError> {
    let shape: Vec<i64> = tensor.shape().iter().map(|&dim| dim as i64).collect();
    match tensor.dtype() {
        DataType::Bool => {
            let bytes = tensor.bytes().map(|b| &b[..]).unwrap_or_default();
            let bools: &[bool] = bytemuck::checked::try_cast_slice(bytes)
                .map_err(|_| DecodeError::Malformed("booleans must be bytes of 0 or 1".into()))?;
            ort_value(TensorRef::from_array_view((shape, bools)))
        }
        DataType::U8 => typed_input::<u8>(tensor, shape),
        DataType::U16 => typed_input::<u16>(tensor, shape),
        DataType::U32 => typed_input::<u32>(tensor, shape),
        DataType::U64 => typed_input::<u64>(tensor, shape),
        DataType::I8 => typed_input::<i8>(tensor, shape),
        DataType::I16 => typed_input::<i16>(tensor, shape),
        DataType::I32 => typed_input::<i32>(tensor, shape),
        DataType::I64 => typed_input::<i64>(tensor, shape),
        DataType::F16 => typed_input::<half::f16>(tensor, shape),
        DataType::BF16 => typed_input::<half::bf16>(tensor, shape),
        DataType::F32 => typed_input::<f32>(tensor, shape),
        DataType::F64 => typed_input::<f64>(tensor, shape),
        DataType::String => {
            onnx_raw::string_tensor(shape, tensor.string_elements().unwrap_or_default())
                .map(SessionInputValue::from)
                .map_err(DecodeError::Malformed)
        }
    }
}

fn typed_input<T>(tensor: &Tensor, shape: Vec<i64>) -> Result<SessionInputValue<'_>, DecodeError>
where
    T: Element + PrimitiveTensorElementType + std::fmt::Debug,
{
    match tensor.view::<T>()? {
        Cow::Borrowed(slice) => ort_value(TensorRef::from_array_view((shape, slice))),
        Cow::Owned(values) => ort_value(OrtTensor::from_array((shape, values))),
    }
}

fn ort_value<'v, V: Into<SessionInputValue<'v>>>(
    value: ort::Result<V>,
) -> Result<SessionInputValue<'v>, DecodeError> {
    value
        .map(Into::into)
        .map_err(|err| DecodeError::Malformed(err.to_string()))
}

fn output_tensor(value: DynValue) -> Result<Tensor, BackendError> {
    let ValueType::Tensor { ty, shape, .. } = value.dtype() else {
        return Err(BackendError::runtime("an output is not a tensor".into()));
    };
    let dtype = data_type(*ty)
        .ok_or_else(|| BackendError::runtime(format!("unsupported output element type {ty}")))?;
    let shape = shape
        .iter()
        .map(|&dim| usize::try_from(dim))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| BackendError::runtime("an output has a negative dimension".into()))?;
    let tensor = if dtype == DataType::String {
        let count = crate::tensor::element_count(&shape)
            .map_err(|err| BackendError::runtime(err.to_string()))?;
        let strings = onnx_raw::string_elements(&value, count).map_err(BackendError::runtime)?;
        Tensor::from_strings(shape, strings)
    } else {
        Tensor::dense(
            dtype,
            shape,
            Bytes::from_owner(OutputBuffer { value, dtype }),
        )
    };
    tensor.map_err(|err| BackendError::runtime(err.to_string()))
}

/// Keeps a runtime-allocated output alive for as long as its bytes are referenced.
struct OutputBuffer {
    value: DynValue,
    dtype: DataType,
}

impl AsRef<[u8]> for OutputBuffer {
    fn as_ref(&self) -> &[u8] {
        fn bytes<T: PrimitiveTensorElementType + bytemuck::NoUninit>(value: &DynValue) -> &[u8] {
            // The element type was read from the value itself, so extraction cannot fail; an
            // empty slice would be caught by `Tensor::dense`'s length check.
            value
                .try_extract_tensor::<T>()
                .map(|(_, data)| bytemuck::cast_slice(data))
                .unwrap_or_default()
        }
        match self.dtype {
            DataType::Bool => bytes::<bool>(&self.value),
            DataType::U8 => bytes::<u8>(&self.value),
            DataType::U16 => bytes::<u16>(&self.value),
            DataType::U32 => bytes::<u32>(&self.value),
            DataType::U64 => bytes::<u64>(&self.value),
            DataType::I8 => bytes::<i8>(&self.value),
            DataType::I16 => bytes::<i16>(&self.value),
            DataType::I32 => bytes::<i32>(&self.value),
            DataType::I64 => bytes::<i64>(&self.value),
            DataType::F16 => bytes::<half::f16>(&self.value),
            DataType::BF16 => bytes::<half::bf16>(&self.value),
            DataType::F32 => bytes::<f32>(&self.value),
            DataType::F64 => bytes::<f64>(&self.value),
            DataType::String => &[],
        }
    }
}
