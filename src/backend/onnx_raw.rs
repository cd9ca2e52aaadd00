//! The two things `ort`'s safe API cannot do, done through ONNX Runtime's C API. This is the
//! only `unsafe` in the backend.
//!
//! - String tensors as arbitrary bytes: TF Serving and KServe strings are byte strings
//!   (serialised protos, images, any encoding), while `ort` passes strings as NUL-terminated C
//!   strings in and UTF-8 `String`s out. The C API is length-based.
//! - Tensors over caller memory that the runtime writes outputs into (a client's
//!   shared-memory region): `ort` only lets a run write into tensors it allocated.
//! - An allocator's statistics (how much a session's arena holds): `ort` has no call for
//!   `OrtAllocator::GetStats`.
//! - Runs of one session from several threads at once: ONNX Runtime's C API documents
//!   `Run` as safe to call concurrently on one session (Triton's ONNX Runtime backend relies
//!   on it for `share_session_between_instances`), while `ort` runs a session through
//!   `&mut`. Instances of a version then share one copy of the weights.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};

use std::ptr::NonNull;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use ort::memory::{Allocator, MemoryInfo};
use ort::session::Session;
use ort::value::{DynTensor, DynValue, TensorElementType, Value};
use ort::AsPointer;

use super::OutputMemory;
use crate::tensor::Strings;

/// A string tensor holding exactly `strings`, NUL bytes and non-UTF-8 bytes included.
///
/// The tensor is made empty (its elements are empty `std::string`s) and each non-empty element
/// is then sized and copied in place: nothing per element is built on our side first. `ort`'s
/// own constructor would take a `&str` per element and make a NUL-terminated copy of each,
/// about 70 bytes per element at once for a tensor that then holds 32.
pub fn string_tensor(shape: Vec<i64>, strings: &Strings) -> Result<DynValue, String> {
    let elements = shape.iter().try_fold(1usize, |acc, &dim| {
        usize::try_from(dim).ok().and_then(|d| acc.checked_mul(d))
    });
    if elements != Some(strings.len()) {
        return Err(format!(
            "a string tensor of shape {shape:?} cannot hold {} elements",
            strings.len()
        ));
    }
    let mut tensor = DynTensor::new(&Allocator::default(), TensorElementType::String, shape)
        .map_err(|err| err.to_string())?;
    let api = ort::api();
    let value = tensor.ptr_mut();
    for (index, bytes) in strings.iter().enumerate() {
        if bytes.is_empty() {
            continue;
        }
        let mut buffer: *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: `value` is a live string tensor of `strings.len()` elements (checked above)
        // and `index` is below that; ONNX Runtime resizes the element to
        // `bytes.len()` bytes and returns a pointer to them, valid until the element is resized
        // again.
        let status = unsafe {
            (api.GetResizedStringTensorElementBuffer)(value, index, bytes.len(), &mut buffer)
        };
        check(status)?;
        if buffer.is_null() {
            return Err("ONNX Runtime returned no buffer for a string element".into());
        }
        // SAFETY: `buffer` points to `bytes.len()` writable bytes owned by the tensor (see
        // above), which cannot overlap `bytes`, a buffer of our own.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.cast::<u8>(), bytes.len()) };
    }
    Ok(tensor.into_dyn())
}

/// The elements of a string tensor with `count` elements, as raw bytes: one buffer with an
/// offset per element, as the runtime hands them over.
pub fn string_elements(value: &DynValue, count: usize) -> Result<Strings, String> {
    let api = ort::api();
    let mut total = 0usize;
    // SAFETY: `value` is a live tensor; ONNX Runtime writes one `usize`.
    check(unsafe { (api.GetStringTensorDataLength)(value.ptr(), &mut total) })?;
    let mut content = vec![0u8; total];
    // Room for the end offset `Strings` adds, so that it is never reallocated.
    let mut offsets = Vec::with_capacity(count + 1);
    offsets.resize(count, 0usize);
    // SAFETY: `content` has room for `total` bytes and `offsets` for `count` entries, the sizes
    // ONNX Runtime was asked to write; both outlive the call.
    check(unsafe {
        (api.GetStringTensorContent)(
            value.ptr(),
            content.as_mut_ptr().cast(),
            total,
            offsets.as_mut_ptr(),
            count,
        )
    })?;
    Strings::contiguous(Bytes::from(content), offsets)
        .map_err(|_| "ONNX Runtime returned inconsistent string offsets".into())
}

/// An ONNX Runtime tensor of `shape` over `memory`, for the runtime to write an output into.
/// `None` when the memory is too small or not aligned for the element type.
pub fn tensor_over(
    memory: &dyn OutputMemory,
    element: TensorElementType,
    element_size: usize,
    shape: &[i64],
) -> Result<Option<DynValue>, String> {
    let count = shape.iter().try_fold(1usize, |acc, &dim| {
        usize::try_from(dim).ok().and_then(|d| acc.checked_mul(d))
    });
    let Some(bytes) = count.and_then(|count| count.checked_mul(element_size)) else {
        return Ok(None);
    };
    let data = memory.as_mut_ptr();
    if bytes > memory.len() || !(data as usize).is_multiple_of(element_size) {
        return Ok(None);
    }
    let info = MemoryInfo::default();
    let mut value: *mut ort::sys::OrtValue = std::ptr::null_mut();
    let api = ort::api();
    // SAFETY: `data` is valid for `memory.len() >= bytes` writable bytes, aligned for the
    // element type (checked above), and `memory` outlives the value: the caller holds it until
    // the run that writes the output has finished and the value is dropped. The tensor does
    // not own the data, so releasing it does not free the memory.
    check(unsafe {
        (api.CreateTensorWithDataAsOrtValue)(
            info.ptr(),
            data.cast(),
            bytes,
            shape.as_ptr(),
            shape.len(),
            element.into(),
            &mut value,
        )
    })?;
    let value = NonNull::new(value).ok_or("ONNX Runtime returned no tensor")?;
    // `ort` wants an allocator beside every tensor value; the default CPU one frees nothing
    // here, since the tensor does not own its data.
    let allocator = Allocator::default();
    // SAFETY: `value` is a tensor ONNX Runtime just created for us, owned by nothing else; the
    // returned `Value` releases it once.
    Ok(Some(unsafe { Value::from_ptr(value, Some(&allocator)) }))
}

/// The statistic `key` of `allocator` (such as an arena's `TotalAllocated`, the bytes it has
/// taken from the system), or `None` where the allocator keeps no such figure: only arenas
/// keep statistics, and only allocators of API version 23 on can report them.
pub fn allocator_stat(allocator: &Allocator, key: &CStr) -> Result<Option<u64>, String> {
    let raw = allocator.ptr();
    // SAFETY: `allocator` is live for this call, so `raw` points to its `OrtAllocator`, whose
    // `version` and `GetStats` fields ONNX Runtime filled in when it made the allocator; the
    // field is only read when the version says the struct has it.
    let get_stats = unsafe {
        if (*raw).version < 23 {
            return Ok(None);
        }
        (*raw).GetStats
    };
    let Some(get_stats) = get_stats else {
        return Ok(None);
    };
    let mut stats: *mut ort::sys::OrtKeyValuePairs = std::ptr::null_mut();
    // SAFETY: `raw` is the live allocator the function belongs to; on success ONNX Runtime
    // writes a key-value list that we own and release below.
    check(unsafe { get_stats(raw, &mut stats) })?;
    if stats.is_null() {
        return Ok(None);
    }
    let api = ort::api();
    // SAFETY: `stats` is the list just returned, `key` a NUL-terminated string; the value, if
    // any, is a NUL-terminated string owned by the list, copied out before the list is
    // released (exactly once).
    let value = unsafe {
        let value = (api.GetKeyValue)(stats, key.as_ptr());
        let text = (!value.is_null()).then(|| CStr::from_ptr(value).to_string_lossy().into_owned());
        (api.ReleaseKeyValuePairs)(stats);
        text
    };
    Ok(value.and_then(|text| text.trim().parse().ok()))
}

/// Why a run failed, as ONNX Runtime said it.
#[derive(Debug)]
pub struct RunFailure {
    /// ONNX Runtime blamed the inputs (a shape or type the graph does not take).
    pub invalid_input: bool,
    pub message: String,
}

/// The names a run passes: an input's or an output's name as ONNX Runtime takes it, made
/// once when the model loads rather than on every run.
pub fn c_name(name: &str) -> Result<CString, String> {
    CString::new(name).map_err(|_| format!("the model names a tensor '{name}' with a NUL byte"))
}

/// Runs `session` once with `inputs`, returning `outputs` in order. An output whose slot in
/// `preallocated` holds a tensor is written into it (and that tensor comes back); the others
/// come back in buffers the session allocates, kept alive by `output_allocator` (a handle on
/// the session's own CPU allocator) for as long as any output lives, even past the session.
///
/// Takes the session by shared reference: several threads may run one session at once.
pub fn run(
    session: &Session,
    inputs: &[(&CStr, &DynValue)],
    outputs: &[&CStr],
    mut preallocated: Vec<Option<DynValue>>,
    output_allocator: &Mutex<Allocator>,
) -> Result<Vec<DynValue>, RunFailure> {
    let failure = |message: String| RunFailure {
        invalid_input: false,
        message,
    };
    if preallocated.len() != outputs.len() {
        return Err(failure(format!(
            "{} output slots for {} outputs",
            preallocated.len(),
            outputs.len()
        )));
    }
    let input_names: Vec<*const std::ffi::c_char> =
        inputs.iter().map(|(name, _)| name.as_ptr()).collect();
    let input_values: Vec<*const ort::sys::OrtValue> =
        inputs.iter().map(|(_, value)| value.ptr()).collect();
    let output_names: Vec<*const std::ffi::c_char> =
        outputs.iter().map(|name| name.as_ptr()).collect();
    let mut output_values: Vec<*mut ort::sys::OrtValue> = preallocated
        .iter_mut()
        .map(|slot| slot.as_mut().map_or(std::ptr::null_mut(), |v| v.ptr_mut()))
        .collect();
    let api = ort::api();
    // SAFETY: the session is live for the call and ONNX Runtime allows concurrent `Run`s on
    // one session (see the module's documentation); the name and value arrays have the
    // lengths passed, their strings are NUL-terminated and their values live tensors, all
    // borrowed for the whole call. Each output slot is either null (ONNX Runtime allocates
    // the output and hands us its ownership) or a tensor of ours it writes into.
    let status = unsafe {
        (api.Run)(
            session.ptr().cast_mut(),
            std::ptr::null(),
            input_names.as_ptr(),
            input_values.as_ptr(),
            input_values.len(),
            output_names.as_ptr(),
            output_names.len(),
            output_values.as_mut_ptr(),
        )
    };
    status_result(status)?;
    // Locked only now: concurrent runs take turns for the outputs' handles, not for `Run`.
    let output_allocator = output_allocator
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let mut values = Vec::with_capacity(outputs.len());
    let mut missing = false;
    for (raw, slot) in output_values.into_iter().zip(preallocated) {
        match (slot, NonNull::new(raw)) {
            (Some(value), _) => values.push(value),
            // SAFETY: a non-null output ONNX Runtime allocated for this run is a live value
            // owned by nothing else; the returned `Value` releases it once.
            (None, Some(raw)) => {
                values.push(unsafe { Value::from_ptr(raw, Some(&output_allocator)) })
            }
            (None, None) => missing = true,
        }
    }
    if missing {
        return Err(failure("the runtime returned an empty output".into()));
    }
    Ok(values)
}

/// Turns an ONNX Runtime status into a result, releasing the status.
fn check(status: ort::sys::OrtStatusPtr) -> Result<(), String> {
    status_result(status).map_err(|failure| failure.message)
}

/// A status as a result that keeps whether ONNX Runtime blamed the arguments.
fn status_result(status: ort::sys::OrtStatusPtr) -> Result<(), RunFailure> {
    if status.0.is_null() {
        return Ok(());
    }
    let api = ort::api();
    // SAFETY: a non-null status owns a NUL-terminated message until it is released, which
    // happens right after the message and the code are copied.
    let (code, message) = unsafe {
        let code = (api.GetErrorCode)(status.0);
        let text = CStr::from_ptr((api.GetErrorMessage)(status.0))
            .to_string_lossy()
            .into_owned();
        (api.ReleaseStatus)(status.0);
        (code, text)
    };
    Err(RunFailure {
        invalid_input: code == ort::sys::OrtErrorCode::ORT_INVALID_ARGUMENT,
        message,
    })
}
