"""Malformed KServe v2 requests over HTTP and gRPC, the shared-memory extension included.

Every case checks the exact HTTP status / gRPC code and that the error message is non-empty
and names the problem (it must contain, case-insensitively, one of the case's keywords).
Where Triton answers with a specific code, the case expects that code; a deviation fails
here rather than being papered over. After the table, the server must still answer
correct requests.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from typing import Callable

import grpc
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2

from kserve_util import ShmRegions, TIMEOUT, unique
from tfs import assert_close, reference

BAD = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
EXISTS = grpc.StatusCode.ALREADY_EXISTS

X2 = np.arange(32, dtype=np.float32).reshape(2, 16) / 32.0
X2_BYTES = X2.nbytes  # 128
OBJECT_BYTES = 4096   # size of the /dev/shm object behind the registered region
REGION_BYTES = 1024   # the registered region (offset 0 of the object)
U64_MAX = 2**64 - 1


@dataclass
class Ctx:
    region: str       # registered, REGION_BYTES long, holds X2 at offset 0
    key: str          # its /dev/shm key
    missing_key: str  # a key with no /dev/shm object behind it


@dataclass(frozen=True)
class Http:
    method: str
    path: str | Callable[[Ctx], str]
    body: object = None                      # dict -> JSON; bytes/str as is; callable(ctx) -> either
    status: int = 400
    keywords: tuple = ()
    headers: dict | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Grpc:
    rpc: str
    build: Callable[[Ctx], object] = field(compare=False)
    code: grpc.StatusCode = BAD
    keywords: tuple = ()


# ---------------------------------------------------------------- request builders (HTTP)

def shm_params(region, byte_size, offset=None):
    p = {"shared_memory_region": region, "shared_memory_byte_size": byte_size}
    if offset is not None:
        p["shared_memory_offset"] = offset
    return p


def ranker_shm_body(region, byte_size=X2_BYTES, offset=None, output_params=None, shape=(2, 16)):
    body = {"inputs": [{"name": "features", "shape": list(shape), "datatype": "FP32",
                        "parameters": shm_params(region, byte_size, offset)}]}
    if output_params is not None:
        body["outputs"] = [{"name": "score", "parameters": output_params}]
    return body


def ranker_json(data=None, shape=(2, 16), datatype="FP32"):
    data = X2.reshape(-1).tolist() if data is None else data
    return {"inputs": [{"name": "features", "shape": list(shape), "datatype": datatype, "data": data}]}


@dataclass(frozen=True)
class Binary:
    """A binary-extension body: JSON header, then tensor data."""
    data: bytes
    header_length: int


def binary_body(header: dict, blob: bytes) -> Binary:
    h = json.dumps(header).encode()
    return Binary(h + blob, len(h))


def bytes_overrun() -> bytes:
    """BYTES raw data whose single element claims 100 bytes but only 3 follow."""
    return struct.pack("<I", 100) + b"abc"


def register_body(key, byte_size=64, offset=0):
    return {"key": key, "offset": offset, "byte_size": byte_size}


# ---------------------------------------------------------------- request builders (gRPC)

def infer_request(model="ranker", version="", inputs=(), outputs=(), raw=()):
    req = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for spec in inputs:
        t = req.inputs.add(name=spec["name"], datatype=spec["datatype"], shape=spec["shape"])
        for k, v in spec.get("params", {}).items():
            if isinstance(v, str):
                t.parameters[k].string_param = v
            elif v < 0:
                t.parameters[k].int64_param = v
            elif v > 2**63 - 1:
                t.parameters[k].uint64_param = v
            else:
                t.parameters[k].int64_param = v
        for fname, values in spec.get("contents", {}).items():
            getattr(t.contents, fname).extend(values)
    for o in outputs:
        out = req.outputs.add(name=o["name"])
        for k, v in o.get("params", {}).items():
            if isinstance(v, str):
                out.parameters[k].string_param = v
            else:
                out.parameters[k].int64_param = v
    req.raw_input_contents.extend(raw)
    return req


def features(params=None, shape=(2, 16), datatype="FP32", contents=None):
    spec = {"name": "features", "datatype": datatype, "shape": list(shape)}
    if params:
        spec["params"] = params
    if contents:
        spec["contents"] = contents
    return spec


RAW_X2 = X2.tobytes()
R = "/v2/models/ranker/infer"
SHM = "/v2/systemsharedmemory/region"

CASES = [
    # ================================================================ HTTP: shared memory
    # A request naming an unregistered region is a bad request (400 / INVALID_ARGUMENT, as the
    # project's contract says); asking for that region's status is NOT_FOUND.
    pytest.param(Http("POST", R, lambda c: ranker_shm_body("no_such_region_zz"), 400, ("no_such_region_zz",)),
                 id="http-shm-wrong-region"),
    pytest.param(Http("POST", R, lambda c: ranker_shm_body(c.region, byte_size=100), 400,
                      ("shared_memory_byte_size", "byte size", "100")), id="http-shm-byte-size-mismatch"),
    pytest.param(Http("POST", R, lambda c: ranker_shm_body(c.region, offset=REGION_BYTES - 64), 400,
                      ("past the end",)), id="http-shm-offset-past-end"),
    pytest.param(Http("POST", R, lambda c: ranker_shm_body(c.region, offset=-8), 400,
                      ("negative", "shared_memory_offset", "-8")), id="http-shm-negative-offset"),
    pytest.param(Http("POST", R, lambda c: ranker_shm_body(c.region, offset=U64_MAX - 8), 400,
                      ("overflow", "offset", "past")), id="http-shm-u64-offset-overflows"),
    pytest.param(Http("POST", R, lambda c: ranker_shm_body(c.region, offset=2**64), 400,
                      ("shared_memory_offset", "integer")), id="http-shm-offset-beyond-u64"),
    pytest.param(Http("POST", R, lambda c: ranker_shm_body(c.region, byte_size=-128), 400,
                      ("shared_memory_byte_size", "negative")), id="http-shm-negative-byte-size"),
    pytest.param(Http("POST", R, lambda c: ranker_shm_body(c.region, output_params=shm_params(c.region, 4, 512)), 400,
                      ("score", "shared_memory_byte_size")), id="http-shm-output-region-too-small"),
    pytest.param(Http("POST", R, lambda c: ranker_shm_body(c.region, output_params=shm_params(c.region, 8, REGION_BYTES - 4)),
                      400, ("past the end",)), id="http-shm-output-past-region-end"),
    pytest.param(Http("POST", R, lambda c: {"inputs": [{**ranker_json()["inputs"][0],
                                                        "parameters": shm_params(c.region, X2_BYTES)}]}, 400,
                      ("exactly one", "both", "data")), id="http-data-inline-and-in-shm"),
    pytest.param(Http("POST", lambda c: f"{SHM}/{unique('slash')}/register", register_body("/tp_a/b"), 400,
                      ("key", "/dev/shm", "/tp_a/b")), id="http-register-key-with-slash"),
    pytest.param(Http("POST", lambda c: f"{SHM}/{unique('dots')}/register", register_body("/tp_..x"), 400,
                      ("key", "..")), id="http-register-key-with-dotdot"),
    # Triton answers INTERNAL (500) here; a missing object is the caller's mistake, so 400.
    pytest.param(Http("POST", lambda c: f"{SHM}/{unique('missing')}/register", lambda c: register_body(c.missing_key),
                      400, ("open", "no such", "tp_missing")), id="http-register-missing-object"),
    pytest.param(Http("POST", lambda c: f"{SHM}/{unique('huge')}/register", lambda c: register_body(c.key, U64_MAX),
                      400, ("byte_size", "size", "overflow", "past")), id="http-register-u64-byte-size"),
    pytest.param(Http("POST", lambda c: f"{SHM}/{unique('past')}/register",
                      lambda c: register_body(c.key, 64, offset=OBJECT_BYTES), 400, ("past the end",)),
                 id="http-register-offset-past-object-end"),
    pytest.param(Http("POST", lambda c: f"{SHM}/{unique('neg')}/register", lambda c: register_body(c.key, -64),
                      400, ("byte_size", "non-negative", "negative")), id="http-register-negative-byte-size"),
    pytest.param(Http("POST", lambda c: f"{SHM}/{c.region}/register", lambda c: register_body(c.key), 409,
                      ("already",)), id="http-register-same-name-twice"),
    # Triton: GetStatus -> NOT_FOUND "Unable to find system shared memory region" (HTTP 404).
    pytest.param(Http("GET", f"{SHM}/no_such_region_zz/status", None, 404, ("no_such_region_zz",)),
                 id="http-shm-status-unknown-region"),
    # ================================================================ HTTP: binary extension and JSON
    pytest.param(Http("POST", R, binary_body(
        {"inputs": [{"name": "features", "shape": [2, 16], "datatype": "FP32",
                     "parameters": {"binary_data_size": 1000}}]}, RAW_X2), 400, ("binary_data_size",)),
        id="http-binary-data-size-past-body-end"),
    pytest.param(Http("POST", R, b'{"inputs": []}', 400, ("inference-header-content-length", "body"),
                      headers={"Inference-Header-Content-Length": "4096"}),
                 id="http-header-length-past-body-end"),
    pytest.param(Http("POST", R, b'{"inputs": []}', 400, ("inference-header-content-length",),
                      headers={"Inference-Header-Content-Length": "-5"}), id="http-header-length-negative"),
    pytest.param(Http("POST", R, ranker_json(datatype="FP8"), 400, ("fp8", "datatype")), id="http-unknown-datatype"),
    pytest.param(Http("POST", R, ranker_json(data=[0.5] * 31), 400, ("shape", "element", "31", "32")),
                 id="http-shape-data-count-mismatch"),
    pytest.param(Http("POST", "/v2/models/nosuchmodel/infer", ranker_json(), 404, ("nosuchmodel",)),
                 id="http-unknown-model"),
    pytest.param(Http("POST", "/v2/models/ranker/versions/99/infer", ranker_json(), 404, ("99",)),
                 id="http-unknown-version"),
    pytest.param(Http("POST", "/v2/models/ranker/versions/1/infer", ranker_json(), 404, ("version",)),
                 id="http-version-not-served"),
    pytest.param(Http("POST", R, b'{"inputs": [{"name": "features",', 400, ("json",)), id="http-malformed-json"),
    pytest.param(Http("POST", R, ranker_json(data=list(range(32)), datatype="INT32"), 400,
                      ("fp32", "float", "int32", "type")), id="http-wrong-dtype-for-input"),
    pytest.param(Http("POST", "/v2/models/two_tower/infer",
                      {"inputs": [{"name": "user_id", "shape": [1], "datatype": "INT64", "data": [1]}]}, 400,
                      ("item_id",)), id="http-missing-input"),
    pytest.param(Http("POST", "/v2/models/echo_string/infer", binary_body(
        {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "BYTES",
                     "parameters": {"binary_data_size": len(bytes_overrun())}}]}, bytes_overrun()), 400,
        ("bytes", "claims", "remain", "length")),
        id="http-bytes-length-prefix-past-end"),
    # ================================================================ gRPC: shared memory
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features(shm_params("no_such_region_zz", X2_BYTES))]),
                      BAD, ("no_such_region_zz",)), id="grpc-shm-wrong-region"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features(shm_params(c.region, 100))]), BAD,
                      ("shared_memory_byte_size", "100")), id="grpc-shm-byte-size-mismatch"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features(shm_params(c.region, X2_BYTES, REGION_BYTES))]),
                      BAD, ("past the end",)), id="grpc-shm-offset-past-end"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features(shm_params(c.region, X2_BYTES, -8))]),
                      BAD, ("negative", "-8")), id="grpc-shm-negative-offset"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features(shm_params(c.region, X2_BYTES, U64_MAX))]),
                      BAD, ("overflow", "offset", "past")), id="grpc-shm-u64-offset-overflows"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features(shm_params(c.region, U64_MAX))]),
                      BAD, ("shared_memory_byte_size", "size")), id="grpc-shm-u64-byte-size"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(
        inputs=[features(shm_params(c.region, X2_BYTES))],
        outputs=[{"name": "score", "params": shm_params(c.region, 4, 512)}]), BAD, ("score", "shared_memory_byte_size")),
        id="grpc-shm-output-region-too-small"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(
        inputs=[features(shm_params(c.region, X2_BYTES), contents={"fp32_contents": X2.reshape(-1).tolist()})]),
        BAD, ("both", "contents")), id="grpc-contents-and-shm"),
    pytest.param(Grpc("SystemSharedMemoryRegister", lambda c: service_pb2.SystemSharedMemoryRegisterRequest(
        name=unique("slash"), key="/tp_a/b", offset=0, byte_size=64), BAD, ("key", "/dev/shm")),
        id="grpc-register-key-with-slash"),
    pytest.param(Grpc("SystemSharedMemoryRegister", lambda c: service_pb2.SystemSharedMemoryRegisterRequest(
        name=unique("dots"), key="/../tp_x", offset=0, byte_size=64), BAD, ("key", "..")),
        id="grpc-register-key-with-dotdot"),
    pytest.param(Grpc("SystemSharedMemoryRegister", lambda c: service_pb2.SystemSharedMemoryRegisterRequest(
        name=unique("missing"), key=c.missing_key, offset=0, byte_size=64), BAD, ("open", "no such", "tp_missing")),
        id="grpc-register-missing-object"),
    pytest.param(Grpc("SystemSharedMemoryRegister", lambda c: service_pb2.SystemSharedMemoryRegisterRequest(
        name=unique("huge"), key=c.key, offset=U64_MAX, byte_size=64), BAD, ("overflow", "offset", "past")),
        id="grpc-register-u64-offset"),
    pytest.param(Grpc("SystemSharedMemoryRegister", lambda c: service_pb2.SystemSharedMemoryRegisterRequest(
        name=c.region, key=c.key, offset=0, byte_size=64), EXISTS, ("already",)),
        id="grpc-register-same-name-twice"),
    pytest.param(Grpc("SystemSharedMemoryStatus", lambda c: service_pb2.SystemSharedMemoryStatusRequest(
        name="no_such_region_zz"), NOT_FOUND, ("no_such_region_zz",)), id="grpc-shm-status-unknown-region"),
    # ================================================================ gRPC: tensors
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features(datatype="FP8")], raw=[RAW_X2]),
                      BAD, ("fp8", "datatype")), id="grpc-unknown-datatype"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features()], raw=[RAW_X2, RAW_X2]),
                      BAD, ("raw_input_contents",)), id="grpc-raw-input-contents-count-mismatch"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features()], raw=[RAW_X2[:-4]]),
                      BAD, ("shape", "bytes", "size", "124", "128")), id="grpc-raw-size-mismatch"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(
        "echo_string", inputs=[{"name": "x", "datatype": "BYTES", "shape": [1, 1]}], raw=[bytes_overrun()]),
        BAD, ("bytes", "claims", "remain", "length")), id="grpc-bytes-length-prefix-past-end"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features(contents={"fp32_contents": [0.5] * 31})]),
                      BAD, ("shape", "element", "31", "32")), id="grpc-typed-contents-count-mismatch"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request("nosuchmodel", inputs=[features()], raw=[RAW_X2]),
                      NOT_FOUND, ("nosuchmodel",)), id="grpc-unknown-model"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(version="99", inputs=[features()], raw=[RAW_X2]),
                      NOT_FOUND, ("99",)), id="grpc-unknown-version"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(version="1", inputs=[features()], raw=[RAW_X2]),
                      NOT_FOUND, ("version",)), id="grpc-version-not-served"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(version="two", inputs=[features()], raw=[RAW_X2]),
                      BAD, ("two", "version")), id="grpc-version-not-a-number"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features(datatype="INT32")], raw=[RAW_X2]),
                      BAD, ("fp32", "float", "int32", "type")), id="grpc-wrong-dtype-for-input"),
    pytest.param(Grpc("ModelInfer", lambda c: infer_request(inputs=[features()]),
                      BAD, ("features", "no data", "contents")), id="grpc-input-without-data"),
]


# ---------------------------------------------------------------- the table

@pytest.fixture(scope="module")
def ctx(triton_http):
    regions = ShmRegions()
    try:
        name, key, handle = regions.create(OBJECT_BYTES, "bad")
        shm.set_shared_memory_region(handle, [X2])
        regions.register(triton_http, name, key, REGION_BYTES)
        yield Ctx(region=name, key=key, missing_key="/" + unique("tp_missing"))
    finally:
        errors = regions.close()
        assert not errors, errors


def _check_message(message: str, keywords: tuple):
    assert isinstance(message, str) and message.strip(), f"empty error message: {message!r}"
    low = message.lower()
    assert any(k.lower() in low for k in keywords), f"error message {message!r} mentions none of {keywords}"


def _resolve(value, c):
    return value(c) if callable(value) else value


@pytest.mark.parametrize("case", CASES)
def test_bad_request(case, ctx, http, rest_url, kserve_stub):
    started = time.monotonic()
    if isinstance(case, Http):
        path = _resolve(case.path, ctx)
        body = _resolve(case.body, ctx)
        kwargs = {"timeout": TIMEOUT}
        headers = dict(case.headers or {})
        if isinstance(body, (dict, list)):
            kwargs["data"] = json.dumps(body).encode()
        elif isinstance(body, Binary):
            kwargs["data"] = body.data
            headers["Inference-Header-Content-Length"] = str(body.header_length)
        elif body is not None:
            kwargs["data"] = body
        resp = http.request(case.method, rest_url + path, headers=headers, **kwargs)
        try:
            payload = resp.json()
        except ValueError:
            payload = None
        assert resp.status_code == case.status, (
            f"HTTP {resp.status_code} (want {case.status}): {resp.text[:300]}")
        assert isinstance(payload, dict) and "error" in payload, f"error body is not {{'error': ...}}: {resp.text[:300]!r}"
        _check_message(payload["error"], case.keywords)
    else:
        with pytest.raises(grpc.RpcError) as err:
            getattr(kserve_stub, case.rpc)(case.build(ctx), timeout=TIMEOUT)
        assert err.value.code() == case.code, f"{err.value.code()} (want {case.code}): {err.value.details()}"
        _check_message(err.value.details(), case.keywords)
    assert time.monotonic() - started < 5


def test_bad_request_table_size():
    http_cases = sum(isinstance(p.values[0], Http) for p in CASES)
    grpc_cases = sum(isinstance(p.values[0], Grpc) for p in CASES)
    assert http_cases >= 10 and grpc_cases >= 10 and http_cases + grpc_cases >= 20


def test_server_still_serves_after_bad_input(server, ctx, triton_http, triton_grpc, http, rest_url):
    assert server.process.poll() is None, "server process died"
    want = reference("ranker", 2, {"features": X2})["score"]
    resp = http.post(f"{rest_url}{R}", json=ranker_json(), timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    assert_close(np.array(resp.json()["outputs"][0]["data"], dtype=np.float32).reshape(2, 1), want)
    import tritonclient.grpc as grpcclient

    i = grpcclient.InferInput("features", [2, 16], "FP32")
    i.set_data_from_numpy(X2)
    assert_close(triton_grpc.infer("ranker", [i]).as_numpy("score"), want)
    # The registered region survived every refused request and still serves.
    status = {r["name"]: r for r in triton_http.get_system_shared_memory_status()}
    assert int(status[ctx.region]["byte_size"]) == REGION_BYTES
    i = httpclient.InferInput("features", [2, 16], "FP32")
    i.set_shared_memory(ctx.region, X2_BYTES)
    assert_close(triton_http.infer("ranker", [i]).as_numpy("score"), want)
    assert server.process.poll() is None, "server process died"
