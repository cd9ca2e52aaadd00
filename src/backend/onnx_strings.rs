//! String tensors as arbitrary bytes.
//!
//! TF Serving and KServe strings are byte strings (serialised protos, images, any encoding),
//! while `ort`'s safe API passes strings as NUL-terminated C strings in and as UTF-8 `String`s
//! out. ONNX Runtime's C API itself is length-based, so this module calls it directly. It is the
//! only `unsafe` in the backend.
#![allow(unsafe_code)]

use std::ffi::CStr;

use bytes::Bytes;
use ort::value::{DynValue, Tensor as OrtTensor};
use ort::AsPointer;

/// A string tensor holding exactly `strings`, NUL bytes and non-UTF-8 bytes included.
pub fn string_tensor(shape: Vec<i64>, strings: &[Bytes]) -> Result<DynValue, String> {
    // The safe constructor makes a tensor of the right shape (and owns its release); its
    // elements are then resized and filled with the real bytes.
    let placeholders = vec![""; strings.len()];
    let mut tensor = OrtTensor::from_string_array((shape, &placeholders[..]))
        .map_err(|err| err.to_string())?
        .into_dyn();
    let api = ort::api();
    let value = tensor.ptr_mut();
    for (index, bytes) in strings.iter().enumerate() {
        let mut buffer: *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: `value` is a live string tensor with `strings.len()` elements and `index` is
        // below that; ONNX Runtime resizes the element to `bytes.len()` bytes and returns a
        // pointer to them, valid until the element is resized again.
        let status = unsafe {
            (api.GetResizedStringTensorElementBuffer)(value, index, bytes.len(), &mut buffer)
        };
        check(status)?;
        if bytes.is_empty() {
            continue;
        }
        if buffer.is_null() {
            return Err("ONNX Runtime returned no buffer for a string element".into());
        }
        // SAFETY: `buffer` points to `bytes.len()` writable bytes owned by the tensor (see
        // above), which cannot overlap `bytes`, a buffer of our own.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.cast::<u8>(), bytes.len()) };
    }
    Ok(tensor)
}

/// The elements of a string tensor with `count` elements, as raw bytes.
pub fn string_elements(value: &DynValue, count: usize) -> Result<Vec<Bytes>, String> {
    let api = ort::api();
    let mut total = 0usize;
    // SAFETY: `value` is a live tensor; ONNX Runtime writes one `usize`.
    check(unsafe { (api.GetStringTensorDataLength)(value.ptr(), &mut total) })?;
    let mut content = vec![0u8; total];
    let mut offsets = vec![0usize; count];
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
    let content = Bytes::from(content);
    let mut elements = Vec::with_capacity(count);
    for (i, &start) in offsets.iter().enumerate() {
        let end = offsets.get(i + 1).copied().unwrap_or(total);
        if start > end || end > total {
            return Err("ONNX Runtime returned inconsistent string offsets".into());
        }
        elements.push(content.slice(start..end));
    }
    Ok(elements)
}

/// Turns an ONNX Runtime status into a result, releasing the status.
fn check(status: ort::sys::OrtStatusPtr) -> Result<(), String> {
    if status.0.is_null() {
        return Ok(());
    }
    let api = ort::api();
    // SAFETY: a non-null status owns a NUL-terminated message until it is released, which
    // happens right after the message is copied.
    let message = unsafe {
        let text = CStr::from_ptr((api.GetErrorMessage)(status.0))
            .to_string_lossy()
            .into_owned();
        (api.ReleaseStatus)(status.0);
        text
    };
    Err(message)
}
