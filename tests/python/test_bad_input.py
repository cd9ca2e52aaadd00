"""Malformed requests over REST and gRPC.

Every case checks the exact HTTP status / gRPC code and that the error message is
non-empty and names the problem: it must contain (case-insensitively) at least one
of the case's keywords, such as the offending input name, the model name, "shape"
or "type". Where TensorFlow Serving itself answers with a different code than the
obvious one, the case accepts both and the comment says why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import grpc
import numpy as np
import pytest
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2, predict_pb2

from tfs import assert_close, make_ndarray, make_tensor_proto, reference, shape_proto

TIMEOUT = 10
BAD = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND

X2 = np.arange(32, dtype=np.float32).reshape(2, 16) / 32.0
ROW16 = [0.5] * 16
ROW15 = [0.5] * 15


@dataclass(frozen=True)
class Rest:
    method: str
    path: str
    body: object = None          # dict/list -> JSON; str/bytes -> sent as is
    status: int | tuple = 400
    keywords: tuple = ()


@dataclass(frozen=True)
class Grpc:
    rpc: str                     # Predict | GetModelMetadata | GetModelStatus
    build: Callable[[], object] = field(compare=False)
    code: grpc.StatusCode | tuple = BAD
    keywords: tuple = ()


# --- request builders ---------------------------------------------------------------

def predict(model="ranker", inputs=None, version=None, signature=None, output_filter=(),
            spec=True):
    req = predict_pb2.PredictRequest()
    if spec:
        req.model_spec.name = model
        if version is not None:
            req.model_spec.version.value = version
        if signature is not None:
            req.model_spec.signature_name = signature
    for name, tp in (inputs if inputs is not None else {"features": make_tensor_proto(X2)}).items():
        req.inputs[name].CopyFrom(tp)
    req.output_filter.extend(output_filter)
    return req


def raw_tensor(dtype, dims, content=b"", **typed):
    tp = tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape_proto(dims), tensor_content=content)
    for name, values in typed.items():
        getattr(tp, name).extend(values)
    return tp


def md_inputs():
    return {
        "x_double": make_tensor_proto(np.ones((1, 3))),
        "x_int32": make_tensor_proto(np.ones((1, 3), dtype=np.int32)),
        "flag": make_tensor_proto(np.ones((1, 3), dtype=bool)),
        "label": make_tensor_proto(np.array([b"a"], dtype=object), "string"),
    }


def metadata(model="ranker", fields=("signature_def",)):
    req = get_model_metadata_pb2.GetModelMetadataRequest()
    req.model_spec.name = model
    req.metadata_field.extend(fields)
    return req


def status(model="ranker", version=None):
    req = get_model_status_pb2.GetModelStatusRequest()
    req.model_spec.name = model
    if version is not None:
        req.model_spec.version.value = version
    return req


SIZE_WORDS = ("shape", "size", "element", "large", "limit", "exceed", "bytes", "content", "length",
              "overflow")

R = "/v1/models/ranker:predict"
TT = "/v1/models/two_tower:predict"
MDP = "/v1/models/multi_dtype:predict"

CASES = [
    # ---------------------------------------------------------------- REST
    pytest.param(Rest("POST", R, '{"instances": [[1.0, 2.0', 400, ("json", "parse", "eof", "syntax")),
                 id="rest-malformed-json"),
    pytest.param(Rest("POST", R, b"", 400, ("json", "body", "empty", "eof")), id="rest-empty-body"),
    pytest.param(Rest("POST", R, [[0.5] * 16], 400, ("object", "json")), id="rest-json-not-object"),
    pytest.param(Rest("POST", R, {"signature_name": "serving_default"}, 400, ("instances", "inputs")),
                 id="rest-neither-instances-nor-inputs"),
    pytest.param(Rest("POST", R, {"instances": [ROW16], "inputs": {"features": [ROW16]}}, 400,
                      ("instances", "inputs")), id="rest-both-instances-and-inputs"),
    pytest.param(Rest("POST", R, {"instances": []}, 400, ("instances", "empty")), id="rest-empty-instances"),
    pytest.param(Rest("POST", R, {"instances": 5}, 400, ("instances", "list", "array", "shape", "rank")),
                 id="rest-instances-not-a-list"),
    pytest.param(Rest("POST", "/v1/models/nosuchmodel:predict", {"instances": [ROW16]}, 404,
                      ("nosuchmodel",)), id="rest-unknown-model"),
    pytest.param(Rest("POST", "/v1/models/ranker/versions/99:predict", {"instances": [ROW16]}, 404,
                      ("version", "99")), id="rest-unknown-version"),
    pytest.param(Rest("POST", "/v1/models/ranker/versions/1:predict", {"instances": [ROW16]}, 404,
                      ("version", "not found", "not loaded", "ranker")), id="rest-version-not-loaded"),
    # TF Serving answers 400 "Malformed request" for a path its regex does not match;
    # 404 is also a fair answer for a URL that names no resource.
    pytest.param(Rest("POST", "/v1/models/ranker/versions/two:predict", {"instances": [ROW16]}, (400, 404),
                      ("version", "two")), id="rest-non-numeric-version"),
    pytest.param(Rest("POST", "/v1/models/ranker:frobnicate", {"instances": [ROW16]}, (400, 404),
                      ("frobnicate", "malformed", "method", "verb")), id="rest-unknown-verb"),
    pytest.param(Rest("POST", R, {"signature_name": "nosuchsig", "instances": [ROW16]}, 400, ("nosuchsig",)),
                 id="rest-unknown-signature"),
    pytest.param(Rest("POST", R, {"signature_name": 7, "instances": [ROW16]}, 400, ("signature",)),
                 id="rest-signature-name-not-string"),
    pytest.param(Rest("POST", TT, {"inputs": {"user_id": [1]}}, 400, ("item_id",)), id="rest-missing-input"),
    pytest.param(Rest("POST", TT, {"inputs": {"user_id": [1], "item_id": [2], "bogus_input": [3]}}, 400,
                      ("bogus_input",)), id="rest-unknown-input"),
    pytest.param(Rest("POST", R, {"inputs": {}}, 400, ("features", "input", "empty")), id="rest-empty-inputs"),
    pytest.param(Rest("POST", TT, {"instances": [{"user_id": 1, "item_id": 2}, {"user_id": 3}]}, 400,
                      ("item_id", "key", "missing")), id="rest-instance-missing-key"),
    pytest.param(Rest("POST", TT, {"instances": [1, 2]}, 400, ("object", "user_id", "item_id", "input")),
                 id="rest-multi-input-instances-not-objects"),
    pytest.param(Rest("POST", R, {"instances": [["a"] * 16]}, 400, ("type", "float", "number", "features")),
                 id="rest-string-for-float"),
    pytest.param(Rest("POST", TT, {"instances": [{"user_id": 1.5, "item_id": 2}]}, 400,
                      ("type", "int64", "integer", "user_id")), id="rest-float-for-int64"),
    pytest.param(Rest("POST", TT, {"inputs": {"user_id": ["x"], "item_id": [2]}}, 400,
                      ("type", "int64", "integer", "user_id")), id="rest-string-for-int64"),
    pytest.param(Rest("POST", MDP, {"instances": [{"x_double": [1, 2, 3], "x_int32": [1, 2, 3],
                                                   "flag": [1, 0, 1], "label": "a"}]}, 400,
                      ("type", "bool", "flag")), id="rest-number-for-bool"),
    pytest.param(Rest("POST", R, {"instances": [ROW16, ROW15]}, 400,
                      ("shape", "size", "ragged", "dimension", "length", "inconsistent")), id="rest-ragged-rows"),
    pytest.param(Rest("POST", R, {"instances": [ROW15, ROW15]}, 400, ("shape", "features", "16", "dim")),
                 id="rest-wrong-inner-dim"),
    pytest.param(Rest("POST", R, {"inputs": {"features": [ROW15]}}, 400, ("shape", "features", "16", "dim")),
                 id="rest-columnar-wrong-inner-dim"),
    pytest.param(Rest("POST", R, {"instances": [1.0, 2.0]}, 400, ("rank", "shape", "dim", "features")),
                 id="rest-rank-too-low"),
    pytest.param(Rest("POST", R, {"inputs": {"features": [[ROW16]]}}, 400, ("rank", "shape", "dim", "features")),
                 id="rest-rank-too-high"),
    pytest.param(Rest("POST", MDP, {"instances": [{"x_double": [1, 2, 3], "x_int32": [1, 2, 3],
                                                   "flag": [True, False, True],
                                                   "label": {"b64": "!!not base64!!"}}]}, 400,
                      ("base64", "b64")), id="rest-bad-b64"),
    pytest.param(Rest("GET", "/v1/models/nosuchmodel", None, 404, ("nosuchmodel",)), id="rest-status-unknown-model"),
    pytest.param(Rest("GET", "/v1/models/ranker/versions/1", None, 404, ("version",)),
                 id="rest-status-version-not-loaded"),
    pytest.param(Rest("GET", "/v1/models/nosuchmodel/metadata", None, 404, ("nosuchmodel",)),
                 id="rest-metadata-unknown-model"),
    # ---------------------------------------------------------------- gRPC
    pytest.param(Grpc("Predict", lambda: predict(inputs={"features": raw_tensor(
        types_pb2.DT_FLOAT, [2, 16], content=b"\0" * (31 * 4))}), BAD,
        ("content", "size", "bytes", "length", "shape")), id="grpc-tensor-content-length"),
    pytest.param(Grpc("Predict", lambda: predict(inputs={"features": raw_tensor(
        types_pb2.DT_FLOAT, [1_000_000_000, 1_000_000_000], content=b"\0" * 64)}), BAD, SIZE_WORDS),
        id="grpc-huge-shape-tensor-content"),
    # One value + a huge shape would mean "broadcast it 10^18 times": must be refused, not allocated.
    pytest.param(Grpc("Predict", lambda: predict(inputs={"features": raw_tensor(
        types_pb2.DT_FLOAT, [1_000_000_000, 1_000_000_000], float_val=[1.0])}), BAD, SIZE_WORDS),
        id="grpc-huge-shape-scalar-broadcast"),
    pytest.param(Grpc("Predict", lambda: predict(inputs={"features": raw_tensor(
        types_pb2.DT_FLOAT, [2**62, 16], float_val=[1.0])}), BAD, SIZE_WORDS),
        id="grpc-shape-product-overflows"),
    pytest.param(Grpc("Predict", lambda: predict(inputs={"features": raw_tensor(
        types_pb2.DT_FLOAT, [-1, 16], content=b"\0" * 64)}), BAD, ("shape", "dim", "negative", "-1")),
        id="grpc-negative-dim"),
    pytest.param(Grpc("Predict", lambda: predict(inputs={"features": make_tensor_proto(
        np.ones((2, 16), dtype=np.int32))}), BAD, ("type", "features", "float", "int32")),
        id="grpc-dtype-mismatch"),
    pytest.param(Grpc("Predict", lambda: predict(inputs={"features": raw_tensor(
        types_pb2.DT_INVALID, [2, 16], content=b"\0" * 128)}), BAD, ("type", "invalid")),
        id="grpc-dt-invalid"),
    pytest.param(Grpc("Predict", lambda: predict("echo_float32", inputs={"x": raw_tensor(
        types_pb2.DT_FLOAT, [2, 2], float_val=[1.0, 2.0, 3.0])}), BAD,
        ("shape", "size", "element", "count", "values", "float_val", "number")), id="grpc-typed-count-mismatch"),
    pytest.param(Grpc("Predict", lambda: predict(inputs={"features": raw_tensor(
        types_pb2.DT_FLOAT, [2, 15], content=b"\0" * (30 * 4))}), BAD, ("shape", "features", "16", "dim")),
        id="grpc-wrong-inner-dim"),
    pytest.param(Grpc("Predict", lambda: predict(inputs={"features": raw_tensor(
        types_pb2.DT_FLOAT, [32], content=b"\0" * (32 * 4))}), BAD, ("rank", "shape", "dim", "features")),
        id="grpc-rank-mismatch"),
    pytest.param(Grpc("Predict", lambda: predict(spec=False), BAD, ("model",)), id="grpc-missing-model-spec"),
    # TF Serving looks an empty name up like any other (NOT_FOUND); INVALID_ARGUMENT is also fair.
    pytest.param(Grpc("Predict", lambda: predict(model=""), (BAD, NOT_FOUND),
                      ("name", "model", "servable", "not found")),
                 id="grpc-empty-model-name"),
    pytest.param(Grpc("Predict", lambda: predict(model="nosuchmodel"), NOT_FOUND, ("nosuchmodel",)),
                 id="grpc-unknown-model"),
    pytest.param(Grpc("Predict", lambda: predict(version=99), NOT_FOUND, ("version", "99")),
                 id="grpc-unknown-version"),
    pytest.param(Grpc("Predict", lambda: predict(version=1), NOT_FOUND,
                      ("version", "not found", "not loaded", "ranker")), id="grpc-version-not-loaded"),
    # TF Serving answers FAILED_PRECONDITION ("Serving signature key ... not found") here.
    pytest.param(Grpc("Predict", lambda: predict(signature="nosuchsig"),
                      (BAD, grpc.StatusCode.FAILED_PRECONDITION), ("nosuchsig",)), id="grpc-unknown-signature"),
    pytest.param(Grpc("Predict", lambda: predict("two_tower", inputs={
        "user_id": make_tensor_proto(np.array([1], dtype=np.int64))}), BAD, ("item_id",)),
        id="grpc-missing-input"),
    pytest.param(Grpc("Predict", lambda: predict("two_tower", inputs={
        "user_id": make_tensor_proto(np.array([1], dtype=np.int64)),
        "item_id": make_tensor_proto(np.array([1], dtype=np.int64)),
        "bogus_input": make_tensor_proto(np.array([1], dtype=np.int64))}), BAD, ("bogus_input",)),
        id="grpc-unknown-input"),
    pytest.param(Grpc("Predict", lambda: predict(inputs={}), BAD, ("features", "input")), id="grpc-no-inputs"),
    pytest.param(Grpc("Predict", lambda: predict("multi_dtype", inputs=md_inputs(), output_filter=["bogus_output"]),
                      BAD, ("bogus_output",)), id="grpc-unknown-output-filter"),
    pytest.param(Grpc("Predict", lambda: predict("multi_dtype", inputs=md_inputs(),
                                                 output_filter=["count", "count"]),
                      BAD, ("duplicate", "count")), id="grpc-duplicate-output-filter"),
    pytest.param(Grpc("GetModelMetadata", lambda: metadata(fields=()), BAD, ("metadata",)),
                 id="grpc-metadata-no-field"),
    pytest.param(Grpc("GetModelMetadata", lambda: metadata(fields=("frobnicate",)), BAD, ("frobnicate",)),
                 id="grpc-metadata-unknown-field"),
    pytest.param(Grpc("GetModelMetadata", lambda: metadata(model="nosuchmodel"), NOT_FOUND, ("nosuchmodel",)),
                 id="grpc-metadata-unknown-model"),
    pytest.param(Grpc("GetModelStatus", lambda: status(model="nosuchmodel"), NOT_FOUND, ("nosuchmodel",)),
                 id="grpc-status-unknown-model"),
    pytest.param(Grpc("GetModelStatus", lambda: status(version=1), NOT_FOUND, ("version",)),
                 id="grpc-status-version-not-loaded"),
]


def _check_message(message: str, keywords: tuple):
    assert isinstance(message, str) and message.strip(), f"empty error message: {message!r}"
    low = message.lower()
    assert any(k.lower() in low for k in keywords), (
        f"error message {message!r} mentions none of {keywords}")


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


@pytest.mark.parametrize("case", CASES)
def test_bad_request(case, http, rest_url, prediction_stub, model_stub):
    started = time.monotonic()
    if isinstance(case, Rest):
        kwargs = {"timeout": TIMEOUT}
        if isinstance(case.body, (dict, list)):
            kwargs["json"] = case.body
        elif case.body is not None:
            kwargs["data"] = case.body
            kwargs["headers"] = {"Content-Type": "application/json"}
        resp = http.request(case.method, rest_url + case.path, **kwargs)
        assert resp.status_code in _as_tuple(case.status), (
            f"HTTP {resp.status_code} (want {case.status}): {resp.text[:300]}")
        try:
            body = resp.json()
        except ValueError:
            pytest.fail(f"error body is not JSON: {resp.text[:300]!r}")
        assert isinstance(body, dict) and "error" in body, f"no 'error' key in {body!r}"
        _check_message(body["error"], case.keywords)
    else:
        stub = model_stub if case.rpc == "GetModelStatus" else prediction_stub
        with pytest.raises(grpc.RpcError) as err:
            getattr(stub, case.rpc)(case.build(), timeout=TIMEOUT)
        assert err.value.code() in _as_tuple(case.code), (
            f"{err.value.code()} (want {case.code}): {err.value.details()}")
        _check_message(err.value.details(), case.keywords)
    # Refusing a request must be cheap: nothing here should take the server long.
    assert time.monotonic() - started < 5


def test_bad_request_table_size():
    rest = sum(isinstance(p.values[0], Rest) for p in CASES)
    grpc_cases = sum(isinstance(p.values[0], Grpc) for p in CASES)
    assert rest + grpc_cases >= 25 and rest >= 10 and grpc_cases >= 10


def test_server_still_serves_after_bad_input(server, http, rest_url, prediction_stub):
    assert server.process.poll() is None, "server process died"
    want = reference("ranker", 2, {"features": X2})["score"]
    resp = http.post(f"{rest_url}{R}", json={"instances": X2.tolist()}, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    assert_close(np.array(resp.json()["predictions"], dtype=np.float32), want)
    out = prediction_stub.Predict(predict(), timeout=TIMEOUT).outputs["score"]
    assert_close(make_ndarray(out), want)
    assert server.process.poll() is None, "server process died"
