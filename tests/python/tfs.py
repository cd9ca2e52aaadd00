"""Small helpers for the integration suite: numpy <-> TensorProto conversion
(there is no TensorFlow here, so no tf.make_tensor_proto / tf.make_ndarray),
onnxruntime reference runs, and assertions shared by several test files."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_MODELS = REPO / "examples" / "models"
TEST_MODELS = REPO / "tests" / "models"

RTOL = 1e-5
ATOL = 1e-5

# numpy dtype name -> (TF DataType, TensorProto typed field used for it)
DTYPES = {
    "float16": (types_pb2.DT_HALF, "half_val"),
    "float32": (types_pb2.DT_FLOAT, "float_val"),
    "float64": (types_pb2.DT_DOUBLE, "double_val"),
    "int8": (types_pb2.DT_INT8, "int_val"),
    "int16": (types_pb2.DT_INT16, "int_val"),
    "int32": (types_pb2.DT_INT32, "int_val"),
    "int64": (types_pb2.DT_INT64, "int64_val"),
    "uint8": (types_pb2.DT_UINT8, "int_val"),
    "uint16": (types_pb2.DT_UINT16, "int_val"),
    "uint32": (types_pb2.DT_UINT32, "uint32_val"),
    "uint64": (types_pb2.DT_UINT64, "uint64_val"),
    "bool": (types_pb2.DT_BOOL, "bool_val"),
    "string": (types_pb2.DT_STRING, "string_val"),
}
TF_TO_NP = {tf: name for name, (tf, _field) in DTYPES.items()}
ECHO_TYPES = list(DTYPES)


def np_dtype(name: str):
    return np.dtype(object) if name == "string" else np.dtype(name)


def dtype_name_of(arr: np.ndarray) -> str:
    if arr.dtype == object or arr.dtype.kind in ("S", "U"):
        return "string"
    return arr.dtype.name


def shape_proto(dims) -> tensor_shape_pb2.TensorShapeProto:
    return tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=int(d)) for d in dims]
    )


def _as_bytes(v) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, np.bytes_):
        return bytes(v)
    return str(v).encode("utf-8")


def make_tensor_proto(value, dtype: str | None = None, *, content: bool = True,
                      shape=None) -> tensor_pb2.TensorProto:
    """numpy array -> TensorProto.

    content=True puts numeric data into tensor_content (little-endian, as TF does);
    content=False uses the typed repeated field (half_val, float_val, int_val ...).
    Strings always go into string_val (TF has no tensor_content form for them).
    shape overrides the declared shape (for malformed-request tests)."""
    if dtype is None:
        arr = np.asarray(value)
        dtype = dtype_name_of(arr)
    arr = np.asarray(value, dtype=np_dtype(dtype))
    tf_dtype, field = DTYPES[dtype]
    tp = tensor_pb2.TensorProto(
        dtype=tf_dtype,
        tensor_shape=shape_proto(arr.shape if shape is None else shape),
    )
    flat = arr.reshape(-1)
    if dtype == "string":
        tp.string_val.extend(_as_bytes(v) for v in flat)
    elif content:
        tp.tensor_content = flat.astype(arr.dtype.newbyteorder("<")).tobytes()
    elif dtype == "float16":
        tp.half_val.extend(int(v) for v in flat.view(np.uint16))
    elif dtype == "bool":
        tp.bool_val.extend(bool(v) for v in flat)
    elif dtype in ("float32", "float64"):
        getattr(tp, field).extend(float(v) for v in flat)
    else:
        getattr(tp, field).extend(int(v) for v in flat)
    return tp


def make_ndarray(tp: tensor_pb2.TensorProto) -> np.ndarray:
    """TensorProto -> numpy array. Accepts tensor_content or the typed fields
    (and TF's rule that a single typed value fills the whole shape).
    Strings come back as an object array of bytes."""
    assert tp.dtype in TF_TO_NP, f"unexpected dtype {types_pb2.DataType.Name(tp.dtype)}"
    name = TF_TO_NP[tp.dtype]
    assert not tp.tensor_shape.unknown_rank, "output shape has unknown_rank"
    shape = [d.size for d in tp.tensor_shape.dim]
    assert all(d >= 0 for d in shape), f"output shape has negative dims: {shape}"
    n = int(np.prod(shape, dtype=np.int64))
    if name != "string" and tp.tensor_content:
        dt = np.dtype(name).newbyteorder("<")
        assert len(tp.tensor_content) == n * dt.itemsize, (
            f"tensor_content has {len(tp.tensor_content)} bytes, shape {shape} needs {n * dt.itemsize}")
        return np.frombuffer(tp.tensor_content, dtype=dt).astype(np.dtype(name)).reshape(shape)
    field = DTYPES[name][1]
    vals = list(getattr(tp, field))
    if name == "float16":
        arr = np.array(vals, dtype=np.int64).astype(np.uint16).view(np.float16)
    elif name == "string":
        arr = np.empty(len(vals), dtype=object)
        arr[:] = [bytes(v) for v in vals]
    else:
        arr = np.array(vals, dtype=np.dtype(name))
    if arr.size == n:
        return arr.reshape(shape)
    assert arr.size == 1 and n > 1, (
        f"{field} has {arr.size} values but shape {shape} has {n} elements")
    return np.full(shape, arr[0], dtype=arr.dtype)


@functools.lru_cache(maxsize=None)
def _session(path: str) -> ort.InferenceSession:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def model_path(name: str, version: int = 1) -> Path:
    for base in (EXAMPLE_MODELS, TEST_MODELS):
        p = base / name / str(version) / "model.onnx"
        if p.exists():
            return p
    raise FileNotFoundError(f"no model {name}/{version}")


def reference(name: str, version: int, feeds: dict) -> dict[str, np.ndarray]:
    """Run the same .onnx file with onnxruntime; returns {output name: array}."""
    sess = _session(str(model_path(name, version)))
    prepared = {}
    for inp in sess.get_inputs():
        v = feeds[inp.name]
        if inp.type == "tensor(string)":
            v = np.array([x.decode("utf-8") if isinstance(x, bytes) else x
                          for x in np.asarray(v, dtype=object).reshape(-1)],
                         dtype=object).reshape(np.shape(v))
        prepared[inp.name] = v
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, prepared)))


def assert_close(got, want, dtype_name: str | None = None):
    """Floats: allclose(rtol=1e-5, atol=1e-5); ints, bools, strings: exact.
    Strings are compared as text (bytes are decoded as UTF-8)."""
    want = np.asarray(want)
    if want.dtype == object or want.dtype.kind in ("U", "S"):
        norm = lambda a: np.array(  # noqa: E731
            [x.decode("utf-8") if isinstance(x, bytes) else x for x in np.asarray(a, dtype=object).reshape(-1)],
            dtype=object).reshape(np.shape(a))
        got_n, want_n = norm(got), norm(want)
        assert got_n.shape == want_n.shape, (got_n.shape, want_n.shape)
        assert got_n.tolist() == want_n.tolist()
        return
    got = np.asarray(got)
    assert got.shape == want.shape, f"shape {got.shape} != expected {want.shape}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=RTOL, atol=ATOL)
    else:
        np.testing.assert_array_equal(got, want)


# Values used for the echo models: every dtype, shape [2, 3], including extremes.
def echo_values(dtype: str, *, for_json: bool = False) -> np.ndarray:
    rows = {
        "float16": [[0.5, -1.25, 65504.0], [6.103515625e-05, 0.0999755859375, -2.0]],
        "float32": [[1.5, -2.25, 3.4e38], [1e-30, 0.1, -7.0]],
        "float64": [[3.141592653589793, -1e300, 5e-324], [0.1, 2.0, -7.5]],
        "int8": [[-128, 127, 0], [1, -1, 42]],
        "int16": [[-32768, 32767, 0], [1, -1, 1234]],
        "int32": [[-2147483648, 2147483647, 0], [1, -1, 123456]],
        "int64": [[-9223372036854775808, 9223372036854775807, 9007199254740993], [1, -1, 0]],
        "uint8": [[0, 255, 128], [1, 2, 3]],
        "uint16": [[0, 65535, 32768], [1, 2, 3]],
        "uint32": [[0, 4294967295, 2147483648], [1, 2, 3]],
        "uint64": [[0, 18446744073709551615, 9223372036854775808], [1, 2, 3]],
        "bool": [[True, False, True], [False, False, True]],
    }
    if dtype == "string":
        if for_json:
            vals = [["hello", "", "caf\u00e9"], ['quote"d', "tab\there", "\u65e5\u672c"]]
        else:
            vals = [[b"hello", b"", b"\xff\xfe\x01"], [b"caf\xc3\xa9", b"a b", b"\x80"]]
        arr = np.empty((2, 3), dtype=object)
        for i in range(2):
            for j in range(3):
                arr[i, j] = vals[i][j]
        return arr
    return np.array(rows[dtype], dtype=np.dtype(dtype))
