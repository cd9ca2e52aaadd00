"""gRPC API through the official TensorFlow Serving stubs."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    predict_pb2,
)

from tfs import DTYPES, ECHO_TYPES, assert_close, echo_values, make_ndarray, make_tensor_proto, reference

TIMEOUT = 10
RNG = np.random.default_rng(4321)
RANKER_X = RNG.standard_normal((4, 16)).astype(np.float32)


def predict_request(model, inputs, *, version=None, signature=None, output_filter=()):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = model
    if version is not None:
        req.model_spec.version.value = version
    if signature is not None:
        req.model_spec.signature_name = signature
    for name, tp in inputs.items():
        req.inputs[name].CopyFrom(tp)
    req.output_filter.extend(output_filter)
    return req


def check_model_spec(resp, name, version):
    assert resp.model_spec.name == name
    assert resp.HasField("model_spec") and resp.model_spec.HasField("version")
    assert resp.model_spec.version.value == version
    assert resp.model_spec.signature_name == "serving_default"


def check_output(tp, dtype, shape):
    assert tp.dtype == dtype, (
        f"dtype {types_pb2.DataType.Name(tp.dtype)} != {types_pb2.DataType.Name(dtype)}")
    assert [d.size for d in tp.tensor_shape.dim] == list(shape)
    return make_ndarray(tp)


# --- Predict: ranker ----------------------------------------------------------------

@pytest.mark.parametrize("content", [True, False], ids=["tensor_content", "float_val"])
def test_ranker_predict(prediction_stub, content):
    req = predict_request("ranker", {"features": make_tensor_proto(RANKER_X, content=content)})
    resp = prediction_stub.Predict(req, timeout=TIMEOUT)
    check_model_spec(resp, "ranker", 2)
    assert set(resp.outputs) == {"score"}
    got = check_output(resp.outputs["score"], types_pb2.DT_FLOAT, [4, 1])
    assert_close(got, reference("ranker", 2, {"features": RANKER_X})["score"])


def test_ranker_predict_pinned_version_and_signature(prediction_stub):
    req = predict_request("ranker", {"features": make_tensor_proto(RANKER_X)}, version=2,
                          signature="serving_default")
    resp = prediction_stub.Predict(req, timeout=TIMEOUT)
    check_model_spec(resp, "ranker", 2)
    got = check_output(resp.outputs["score"], types_pb2.DT_FLOAT, [4, 1])
    assert_close(got, reference("ranker", 2, {"features": RANKER_X})["score"])


def test_ranker_version_1_not_loaded(prediction_stub):
    req = predict_request("ranker", {"features": make_tensor_proto(RANKER_X)}, version=1)
    with pytest.raises(grpc.RpcError) as err:
        prediction_stub.Predict(req, timeout=TIMEOUT)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details()


# --- Predict: two_tower and multi_dtype ---------------------------------------------

def test_two_tower_predict(prediction_stub):
    users = np.array([3, 0, 99], dtype=np.int64)
    items = np.array([17, 999, 0], dtype=np.int64)
    req = predict_request("two_tower", {
        "user_id": make_tensor_proto(users, content=False),
        "item_id": make_tensor_proto(items, content=True),
    })
    resp = prediction_stub.Predict(req, timeout=TIMEOUT)
    check_model_spec(resp, "two_tower", 1)
    got = check_output(resp.outputs["score"], types_pb2.DT_FLOAT, [3])
    assert_close(got, reference("two_tower", 1, {"user_id": users, "item_id": items})["score"])


MD = {
    "x_double": np.array([[1.5, -2.0, 0.25], [3.0, 4.5, -1.0]], dtype=np.float64),
    "x_int32": np.array([[2, 3, -4], [0, 7, 100000]], dtype=np.int32),
    "flag": np.array([[True, False, True], [True, True, False]]),
    "label": np.array([b"a", b"caf\xc3\xa9"], dtype=object),
}


@pytest.mark.parametrize("content", [True, False], ids=["tensor_content", "typed_fields"])
def test_multi_dtype_predict(prediction_stub, content):
    req = predict_request("multi_dtype", {k: make_tensor_proto(v, content=content) for k, v in MD.items()})
    resp = prediction_stub.Predict(req, timeout=TIMEOUT)
    check_model_spec(resp, "multi_dtype", 1)
    assert set(resp.outputs) == {"weighted", "count", "tag"}
    ref = reference("multi_dtype", 1, MD)
    assert_close(check_output(resp.outputs["weighted"], types_pb2.DT_DOUBLE, [2, 3]), ref["weighted"])
    count = check_output(resp.outputs["count"], types_pb2.DT_INT64, [2])
    assert count.dtype == np.int64
    assert_close(count, ref["count"])
    tag = check_output(resp.outputs["tag"], types_pb2.DT_STRING, [2])
    assert tag.tolist() == [b"a", b"caf\xc3\xa9"]


def test_output_filter(prediction_stub):
    req = predict_request("multi_dtype", {k: make_tensor_proto(v) for k, v in MD.items()},
                          output_filter=["count"])
    resp = prediction_stub.Predict(req, timeout=TIMEOUT)
    assert set(resp.outputs) == {"count"}
    assert check_output(resp.outputs["count"], types_pb2.DT_INT64, [2]).tolist() == [2, 2]


# --- Predict: every dtype through the echo models -------------------------------------

@pytest.mark.parametrize("dtype", [t for t in ECHO_TYPES if t != "string"])
def test_echo_tensor_content(prediction_stub, dtype):
    x = echo_values(dtype)
    req = predict_request(f"echo_{dtype}", {"x": make_tensor_proto(x, dtype, content=True)})
    resp = prediction_stub.Predict(req, timeout=TIMEOUT)
    check_model_spec(resp, f"echo_{dtype}", 1)
    got = check_output(resp.outputs["y"], DTYPES[dtype][0], [2, 3])
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("dtype", ECHO_TYPES)
def test_echo_typed_field(prediction_stub, dtype):
    x = echo_values(dtype)
    tp = make_tensor_proto(x, dtype, content=False)
    field = DTYPES[dtype][1]
    assert len(getattr(tp, field)) == 6 and not tp.tensor_content
    resp = prediction_stub.Predict(predict_request(f"echo_{dtype}", {"x": tp}), timeout=TIMEOUT)
    got = check_output(resp.outputs["y"], DTYPES[dtype][0], [2, 3])
    if dtype == "string":
        assert got.tolist() == x.tolist()  # raw bytes, including non-UTF-8 ones
    else:
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, x)


def test_echo_string_with_nul_bytes(prediction_stub):
    # DT_STRING holds arbitrary bytes, NUL included (not C strings).
    x = np.empty((1, 3), dtype=object)
    x[0, :] = [b"a\x00b", b"\x00", b"\x00\xff\x00"]
    resp = prediction_stub.Predict(predict_request("echo_string", {"x": make_tensor_proto(x, "string")}),
                                   timeout=TIMEOUT)
    got = check_output(resp.outputs["y"], types_pb2.DT_STRING, [1, 3])
    assert got.tolist() == x.tolist()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_echo_non_finite_floats(prediction_stub, dtype):
    x = np.array([[np.nan, np.inf, -np.inf], [-0.0, 1.0, -1.0]], dtype=dtype)
    resp = prediction_stub.Predict(predict_request(f"echo_{dtype}", {"x": make_tensor_proto(x)}),
                                   timeout=TIMEOUT)
    got = check_output(resp.outputs["y"], DTYPES[dtype][0], [2, 3])
    np.testing.assert_array_equal(got, x)
    assert np.signbit(got[1, 0])


def test_echo_empty_batch(prediction_stub):
    x = np.zeros((0, 3), dtype=np.float32)
    resp = prediction_stub.Predict(predict_request("echo_float32", {"x": make_tensor_proto(x)}),
                                   timeout=TIMEOUT)
    got = check_output(resp.outputs["y"], types_pb2.DT_FLOAT, [0, 3])
    assert got.shape == (0, 3)


# TF's rule: a typed field holding exactly one value fills the whole declared shape.
@pytest.mark.parametrize("dtype,value,field", [
    ("float32", 1.5, "float_val"),
    ("int64", -7, "int64_val"),
    ("bool", True, "bool_val"),
    ("string", b"same", "string_val"),
])
def test_scalar_broadcast(prediction_stub, dtype, value, field):
    tp = make_tensor_proto(np.array([value], dtype=object if dtype == "string" else dtype), dtype,
                           content=False, shape=[2, 3])
    assert len(getattr(tp, field)) == 1
    resp = prediction_stub.Predict(predict_request(f"echo_{dtype}", {"x": tp}), timeout=TIMEOUT)
    got = check_output(resp.outputs["y"], DTYPES[dtype][0], [2, 3])
    assert got.reshape(-1).tolist() == [value] * 6


# --- GetModelMetadata ------------------------------------------------------------------

def get_signature_defs(prediction_stub, model, version=None):
    req = get_model_metadata_pb2.GetModelMetadataRequest()
    req.model_spec.name = model
    if version is not None:
        req.model_spec.version.value = version
    req.metadata_field.append("signature_def")
    resp = prediction_stub.GetModelMetadata(req, timeout=TIMEOUT)
    assert resp.model_spec.name == model
    any_msg = resp.metadata["signature_def"]
    assert any_msg.type_url.endswith("/tensorflow.serving.SignatureDefMap"), any_msg.type_url
    sig_map = get_model_metadata_pb2.SignatureDefMap()
    assert any_msg.Unpack(sig_map)
    return resp, sig_map


def tensor_infos(infos):
    return {k: (v.dtype, [d.size for d in v.tensor_shape.dim]) for k, v in infos.items()}


@pytest.mark.parametrize("version", [None, 2])
def test_metadata_ranker(prediction_stub, version):
    resp, sig_map = get_signature_defs(prediction_stub, "ranker", version)
    assert resp.model_spec.version.value == 2
    sig = sig_map.signature_def["serving_default"]
    assert sig.method_name == "tensorflow/serving/predict"
    assert tensor_infos(sig.inputs) == {"features": (types_pb2.DT_FLOAT, [-1, 16])}
    assert tensor_infos(sig.outputs) == {"score": (types_pb2.DT_FLOAT, [-1, 1])}
    assert sig.inputs["features"].name == "features"
    assert not sig.inputs["features"].tensor_shape.unknown_rank


def test_metadata_multi_dtype(prediction_stub):
    resp, sig_map = get_signature_defs(prediction_stub, "multi_dtype")
    assert resp.model_spec.version.value == 1
    sig = sig_map.signature_def["serving_default"]
    assert tensor_infos(sig.inputs) == {
        "x_double": (types_pb2.DT_DOUBLE, [-1, 3]),
        "x_int32": (types_pb2.DT_INT32, [-1, 3]),
        "flag": (types_pb2.DT_BOOL, [-1, 3]),
        "label": (types_pb2.DT_STRING, [-1]),
    }
    assert tensor_infos(sig.outputs) == {
        "weighted": (types_pb2.DT_DOUBLE, [-1, 3]),
        "count": (types_pb2.DT_INT64, [-1]),
        "tag": (types_pb2.DT_STRING, [-1]),
    }


@pytest.mark.parametrize("dtype", ECHO_TYPES)
def test_metadata_echo_dtypes(prediction_stub, dtype):
    _resp, sig_map = get_signature_defs(prediction_stub, f"echo_{dtype}")
    sig = sig_map.signature_def["serving_default"]
    tf_dtype = DTYPES[dtype][0]
    assert tensor_infos(sig.inputs) == {"x": (tf_dtype, [-1, -1])}
    assert tensor_infos(sig.outputs) == {"y": (tf_dtype, [-1, -1])}


# --- ModelService.GetModelStatus ----------------------------------------------------------

@pytest.mark.parametrize("version", [None, 2])
def test_get_model_status(model_stub, version):
    req = get_model_status_pb2.GetModelStatusRequest()
    req.model_spec.name = "ranker"
    if version is not None:
        req.model_spec.version.value = version
    resp = model_stub.GetModelStatus(req, timeout=TIMEOUT)
    assert len(resp.model_version_status) == 1
    mvs = resp.model_version_status[0]
    assert mvs.version == 2
    assert mvs.state == get_model_status_pb2.ModelVersionStatus.AVAILABLE == 30
    assert mvs.status.error_code == 0  # tensorflow.error.OK
    assert mvs.status.error_message == ""


# Classify / Regress / MultiInference: see test_tfserving_examples.py.
