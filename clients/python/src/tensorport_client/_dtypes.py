"""numpy dtypes and the two protocols' names for them, and the raw byte layout of tensors."""

from __future__ import annotations

import struct

import numpy as np

# KServe datatype -> numpy dtype. BYTES arrays are object arrays of bytes.
_KSERVE_TO_NUMPY = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}
_NUMPY_TO_KSERVE = {dtype: name for name, dtype in _KSERVE_TO_NUMPY.items()}

# KServe datatype -> TF DataType name.
KSERVE_TO_TF = {
    "BOOL": "DT_BOOL", "UINT8": "DT_UINT8", "UINT16": "DT_UINT16", "UINT32": "DT_UINT32",
    "UINT64": "DT_UINT64", "INT8": "DT_INT8", "INT16": "DT_INT16", "INT32": "DT_INT32",
    "INT64": "DT_INT64", "FP16": "DT_HALF", "BF16": "DT_BFLOAT16", "FP32": "DT_FLOAT",
    "FP64": "DT_DOUBLE", "BYTES": "DT_STRING",
}
TF_TO_KSERVE = {tf: kserve for kserve, tf in KSERVE_TO_TF.items()}


def numpy_dtype(datatype: str) -> np.dtype:
    if datatype == "BF16":
        # numpy has no bfloat16; such outputs are widened to float32 on arrival.
        return np.dtype(np.float32)
    try:
        return _KSERVE_TO_NUMPY[datatype]
    except KeyError:
        raise ValueError(f"unknown datatype {datatype!r}") from None


def kserve_datatype(array: np.ndarray) -> str:
    """The KServe datatype of an array; str/bytes arrays are BYTES."""
    if array.dtype.kind in ("O", "S", "U"):
        return "BYTES"
    try:
        return _NUMPY_TO_KSERVE[array.dtype]
    except KeyError:
        raise TypeError(f"numpy dtype {array.dtype} has no KServe datatype") from None


def as_array(value) -> np.ndarray:
    """numpy in: any array-like becomes an ndarray; a str becomes a BYTES element."""
    array = np.asarray(value)
    if array.dtype.kind == "U":
        array = np.vectorize(lambda s: s.encode("utf-8"), otypes=[object])(array)
    elif array.dtype.kind == "S":
        array = array.astype(object)
    return array


def _element_bytes(element) -> bytes:
    if isinstance(element, bytes):
        return element
    if isinstance(element, str):
        return element.encode("utf-8")
    return str(element).encode("utf-8")


def to_raw(array: np.ndarray) -> bytes:
    """Row-major bytes: little-endian values, or for BYTES each element as a 4-byte
    little-endian length and its bytes (the KServe raw layout)."""
    if kserve_datatype(array) == "BYTES":
        parts = []
        for element in array.reshape(-1):
            data = _element_bytes(element)
            parts.append(struct.pack("<I", len(data)))
            parts.append(data)
        return b"".join(parts)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def from_raw(raw, datatype: str, shape) -> np.ndarray:
    """The inverse of to_raw; the result owns its memory."""
    shape = tuple(int(d) for d in shape)
    if datatype == "BYTES":
        items, offset, view = [], 0, memoryview(raw)
        while offset < len(view):
            (length,) = struct.unpack_from("<I", view, offset)
            offset += 4
            items.append(bytes(view[offset:offset + length]))
            offset += length
        return np.array(items, dtype=object).reshape(shape)
    if datatype == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    dtype = numpy_dtype(datatype).newbyteorder("<")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="), copy=True)


def raw_size(datatype: str, shape) -> int:
    """Bytes of a fixed-size tensor; BYTES has no fixed size."""
    if datatype == "BYTES":
        raise ValueError("BYTES tensors have no fixed size")
    count = 1
    for dim in shape:
        count *= int(dim)
    return count * (2 if datatype == "BF16" else numpy_dtype(datatype).itemsize)
