"""openapi/tensorport.yaml is a valid OpenAPI document, and the server's real answers, good
and bad, to requests on every documented operation are the ones it describes."""

from __future__ import annotations

import json
import uuid
from multiprocessing import shared_memory

import numpy as np
import pytest
from openapi_spec_validator import validate

from openapi_spec import check_response, operations, spec

FEATURES = [float(i) for i in range(16)]


def test_the_document_is_valid_openapi():
    validate(spec())


def test_the_document_version_is_the_server_version(http, rest_url):
    assert http.get(f"{rest_url}/v2").json()["version"] == spec()["info"]["version"]


def _call(http, rest_url, method, template, params=None, **kwargs):
    path = template
    for key, value in (params or {}).items():
        path = path.replace("{" + key + "}", str(value))
    return http.request(method, rest_url + path, timeout=30, **kwargs)


def _infer_body(rows: int = 1, **extra):
    return {"inputs": [{"name": "features", "shape": [rows, 16], "datatype": "FP32",
                        "data": FEATURES * rows}], **extra}


RANKER = {"name": "ranker"}
RANKER_V2 = {"name": "ranker", "version": 2}
NO_MODEL = {"name": "no_such_model"}
BAD_VERSION = {"name": "ranker", "version": 99}
LABEL = {"name": "ranker", "label": "stable"}
CLASSIFIER = {"name": "example_classifier"}
REGRESSOR = {"name": "example_regressor"}

# (method, path template, path parameters, requests keyword arguments, expected status)
CASES = [
    # TensorFlow Serving
    ("GET", "/v1/models/{name}", RANKER, {}, 200),
    ("GET", "/v1/models/{name}", NO_MODEL, {}, 404),
    ("GET", "/v1/models/{name}", {"name": "broken"}, {}, 200),
    ("GET", "/v1/models/{name}/versions/{version}", RANKER_V2, {}, 200),
    ("GET", "/v1/models/{name}/versions/{version}", BAD_VERSION, {}, 404),
    ("GET", "/v1/models/{name}/versions/{version}", {"name": "ranker", "version": "x"}, {}, 400),
    ("GET", "/v1/models/{name}/metadata", RANKER, {}, 200),
    ("GET", "/v1/models/{name}/metadata", {"name": "multi_dtype"}, {}, 200),
    ("GET", "/v1/models/{name}/metadata", NO_MODEL, {}, 404),
    ("GET", "/v1/models/{name}/versions/{version}/metadata", RANKER_V2, {}, 200),
    ("GET", "/v1/models/{name}/versions/{version}/metadata", BAD_VERSION, {}, 404),
    ("GET", "/v1/models/{name}/labels/{label}", LABEL, {}, 400),
    ("GET", "/v1/models/{name}/labels/{label}/metadata", LABEL, {}, 400),
    ("POST", "/v1/models/{name}:predict", RANKER, {"json": {"instances": [FEATURES, FEATURES]}}, 200),
    ("POST", "/v1/models/{name}:predict", RANKER, {"json": {"inputs": {"features": [FEATURES]}}}, 200),
    ("POST", "/v1/models/{name}:predict", RANKER, {"json": {"inputs": [FEATURES]}}, 200),
    ("POST", "/v1/models/{name}:predict", {"name": "multi_dtype"},
     {"json": {"instances": [{"x_double": [1, 2, 3], "x_int32": [1, 2, 3], "flag": [True, False, True],
                              "label": "a"}]}}, 200),
    ("POST", "/v1/models/{name}:predict", {"name": "echo_string"},
     {"json": {"inputs": [[{"b64": "/wE="}, "text"]]}}, 200),
    ("POST", "/v1/models/{name}:predict", {"name": "echo_float32"},
     {"data": b'{"inputs": [[NaN, Infinity, -Infinity, 1.5]]}'}, 200),
    ("POST", "/v1/models/{name}:predict", RANKER, {"json": {"instances": []}}, 400),
    ("POST", "/v1/models/{name}:predict", RANKER, {"data": b"{not json"}, 400),
    ("POST", "/v1/models/{name}:predict", RANKER, {"json": {"instances": [[1, 2]]}}, 400),
    ("POST", "/v1/models/{name}:predict", NO_MODEL, {"json": {"instances": [FEATURES]}}, 404),
    ("POST", "/v1/models/{name}/versions/{version}:predict", RANKER_V2,
     {"json": {"instances": [FEATURES]}}, 200),
    ("POST", "/v1/models/{name}/versions/{version}:predict", BAD_VERSION,
     {"json": {"instances": [FEATURES]}}, 404),
    ("POST", "/v1/models/{name}/labels/{label}:predict", LABEL, {"json": {"instances": [FEATURES]}}, 400),
    ("POST", "/v1/models/{name}:classify", CLASSIFIER, {"json": {"examples": [{"x": [0.5, 1.5]}]}}, 200),
    ("POST", "/v1/models/{name}/versions/{version}:classify", {**CLASSIFIER, "version": 1},
     {"json": {"context": {"x": [1, 2]}, "examples": [{}, {}]}}, 200),
    ("POST", "/v1/models/{name}/labels/{label}:classify", LABEL, {"json": {"examples": [{}]}}, 400),
    ("POST", "/v1/models/{name}:classify", RANKER, {"json": {"examples": []}}, 400),
    ("POST", "/v1/models/{name}:classify", RANKER, {"json": {"examples": [{"features": [1.0]}]}}, 400),
    ("POST", "/v1/models/{name}:classify", NO_MODEL, {"json": {"examples": [{"x": [1.0]}]}}, 404),
    ("POST", "/v1/models/{name}:regress", REGRESSOR, {"json": {"examples": [{"x": [1.0, 2.0], "n": 3}]}}, 200),
    ("POST", "/v1/models/{name}/versions/{version}:regress", RANKER_V2, {"json": {}}, 400),
    ("POST", "/v1/models/{name}/labels/{label}:regress", LABEL, {"json": {"examples": [{}]}}, 400),
    # KServe v2
    ("GET", "/v2", {}, {}, 200),
    ("GET", "/v2/health/live", {}, {}, 200),
    ("GET", "/v2/health/ready", {}, {}, 200),
    ("GET", "/livez", {}, {}, 200),
    ("GET", "/readyz", {}, {}, 200),
    ("GET", "/v2/models/stats", {}, {}, 200),
    ("GET", "/v2/models/{name}", RANKER, {}, 200),
    ("GET", "/v2/models/{name}", NO_MODEL, {}, 404),
    ("GET", "/v2/models/{name}/ready", RANKER, {}, 200),
    ("GET", "/v2/models/{name}/ready", {"name": "broken"}, {}, 404),
    ("GET", "/v2/models/{name}/config", RANKER, {}, 200),
    ("GET", "/v2/models/{name}/config", NO_MODEL, {}, 404),
    ("GET", "/v2/models/{name}/stats", RANKER, {}, 200),
    ("GET", "/v2/models/{name}/stats", NO_MODEL, {}, 404),
    ("POST", "/v2/models/{name}/infer", RANKER, {"json": _infer_body(2, id="req-1")}, 200),
    ("POST", "/v2/models/{name}/infer", {"name": "echo_string"},
     {"json": {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "BYTES", "data": ["a", "b"]}]}}, 200),
    ("POST", "/v2/models/{name}/infer", RANKER,
     {"json": _infer_body(1, outputs=[{"name": "score", "parameters": {"binary_data": True}}])}, 200),
    ("POST", "/v2/models/{name}/infer", RANKER, {"json": {"inputs": "no"}}, 400),
    ("POST", "/v2/models/{name}/infer", RANKER, {"data": b"[]"}, 400),
    ("POST", "/v2/models/{name}/infer", NO_MODEL, {"json": _infer_body()}, 404),
    ("GET", "/v2/models/{name}/versions/{version}", RANKER_V2, {}, 200),
    ("GET", "/v2/models/{name}/versions/{version}", BAD_VERSION, {}, 404),
    ("GET", "/v2/models/{name}/versions/{version}/ready", RANKER_V2, {}, 200),
    ("GET", "/v2/models/{name}/versions/{version}/ready", {"name": "ranker", "version": "x"}, {}, 400),
    ("GET", "/v2/models/{name}/versions/{version}/config", RANKER_V2, {}, 200),
    ("GET", "/v2/models/{name}/versions/{version}/stats", RANKER_V2, {}, 200),
    ("POST", "/v2/models/{name}/versions/{version}/infer", RANKER_V2, {"json": _infer_body()}, 200),
    ("POST", "/v2/models/{name}/versions/{version}/infer", BAD_VERSION, {"json": _infer_body()}, 404),
    ("GET", "/v2/logging", {}, {}, 200),
    ("POST", "/v2/logging", {}, {"json": {"log_verbose_level": 0}}, 200),
    ("POST", "/v2/logging", {}, {"json": {"log_file": "/tmp/x"}}, 400),
    ("GET", "/v2/trace/setting", {}, {}, 200),
    ("POST", "/v2/trace/setting", {}, {"json": {"log_frequency": "0"}}, 200),
    ("POST", "/v2/trace/setting", {}, {"json": {"trace_level": ["LOUD"]}}, 400),
    ("GET", "/v2/models/{name}/trace/setting", RANKER, {}, 200),
    ("POST", "/v2/models/{name}/trace/setting", RANKER, {"json": {"trace_rate": None}}, 200),
    ("POST", "/v2/models/{name}/trace/setting", RANKER, {"json": {"trace_rate": "x"}}, 400),
    ("POST", "/v2/repository/index", {}, {}, 200),
    ("POST", "/v2/repository/index", {}, {"json": {"ready": True}}, 200),
    ("POST", "/v2/repository/index", {}, {"data": b"[1]"}, 400),
    # Unloading a model nothing else here uses, then loading it back.
    ("POST", "/v2/repository/models/{name}/unload", {"name": "echo_uint64"}, {}, 200),
    ("POST", "/v2/repository/models/{name}/load", {"name": "echo_uint64"}, {}, 200),
    ("POST", "/v2/repository/models/{name}/load", {"name": "echo_uint64"}, {"data": b"[1]"}, 400),
    ("POST", "/v2/repository/models/{name}/load", NO_MODEL, {}, 404),
    ("POST", "/v2/repository/models/{name}/unload", NO_MODEL, {}, 404),
    # Shared memory: status and refusals; a full round trip follows below.
    ("GET", "/v2/systemsharedmemory/status", {}, {}, 200),
    ("GET", "/v2/systemsharedmemory/region/{region}/status", {"region": "nope"}, {}, 404),
    ("POST", "/v2/systemsharedmemory/region/{region}/register", {"region": "nope"},
     {"json": {"key": "/tp_openapi_no_such_object", "byte_size": 64}}, 400),
    ("POST", "/v2/systemsharedmemory/region/{region}/register", {"region": "nope"},
     {"json": {"key": "../etc/passwd", "byte_size": 64}}, 400),
    ("POST", "/v2/systemsharedmemory/region/{region}/unregister", {"region": "nope"}, {}, 200),
    # Removes every region: harmless here, as no other test holds one between its own steps.
    ("POST", "/v2/systemsharedmemory/unregister", {}, {}, 200),
    ("GET", "/v2/cudasharedmemory/status", {}, {}, 200),
    ("GET", "/v2/cudasharedmemory/region/{region}/status", {"region": "gpu"}, {}, 404),
    ("POST", "/v2/cudasharedmemory/region/{region}/register", {"region": "gpu"},
     {"json": {"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 4}}, 400),
    ("POST", "/v2/cudasharedmemory/region/{region}/unregister", {"region": "gpu"}, {}, 200),
    ("POST", "/v2/cudasharedmemory/unregister", {}, {}, 200),
    ("GET", "/metrics", {}, {}, 200),
    ("GET", "/monitoring/prometheus/metrics", {}, {}, 200),
]


@pytest.mark.parametrize("method,template,params,kwargs,status", CASES,
                         ids=[f"{c[0]} {c[1]} {c[4]}" for c in CASES])
def test_real_responses_match_the_document(http, rest_url, method, template, params, kwargs, status):
    response = _call(http, rest_url, method, template, params, **kwargs)
    assert response.status_code == status, response.text[:500]
    check_response(method, template, response)


def test_a_shared_memory_round_trip_matches_the_document(http, rest_url):
    name = f"tp_openapi_{uuid.uuid4().hex[:8]}"
    features = np.arange(32, dtype=np.float32).reshape(2, 16)
    region = shared_memory.SharedMemory(name=name, create=True, size=features.nbytes + 8)
    steps = []
    try:
        region.buf[:features.nbytes] = features.tobytes()
        register = "/v2/systemsharedmemory/region/{region}/register"
        body = {"key": "/" + name, "offset": 0, "byte_size": features.nbytes + 8}
        steps.append(("POST", register, _call(http, rest_url, "POST", register, {"region": name}, json=body), 200))
        steps.append(("POST", register, _call(http, rest_url, "POST", register, {"region": name}, json=body), 409))
        status = "/v2/systemsharedmemory/region/{region}/status"
        steps.append(("GET", status, _call(http, rest_url, "GET", status, {"region": name}), 200))
        steps.append(("GET", "/v2/systemsharedmemory/status",
                      _call(http, rest_url, "GET", "/v2/systemsharedmemory/status"), 200))
        infer = {"inputs": [{"name": "features", "shape": [2, 16], "datatype": "FP32",
                             "parameters": {"shared_memory_region": name,
                                            "shared_memory_byte_size": features.nbytes}}],
                 "outputs": [{"name": "score",
                              "parameters": {"shared_memory_region": name, "shared_memory_offset": features.nbytes,
                                             "shared_memory_byte_size": 8}}]}
        result = _call(http, rest_url, "POST", "/v2/models/{name}/infer", RANKER, json=infer)
        steps.append(("POST", "/v2/models/{name}/infer", result, 200))
        unregister = "/v2/systemsharedmemory/region/{region}/unregister"
        steps.append(("POST", unregister, _call(http, rest_url, "POST", unregister, {"region": name}), 200))
        steps.append(("POST", "/v2/systemsharedmemory/unregister",
                      _call(http, rest_url, "POST", "/v2/systemsharedmemory/unregister"), 200))
        scores = np.frombuffer(bytes(region.buf[features.nbytes:features.nbytes + 8]), dtype=np.float32)
    finally:
        region.close()
        region.unlink()
    for method, template, response, expected in steps:
        assert response.status_code == expected, f"{method} {template}: {response.text[:300]}"
        check_response(method, template, response)
    assert result.json()["outputs"][0]["shape"] == [2, 1]
    inline = _call(http, rest_url, "POST", "/v2/models/{name}/infer", RANKER,
                   json={"inputs": [{"name": "features", "shape": [2, 16], "datatype": "FP32",
                                     "data": features.ravel().tolist()}]})
    np.testing.assert_allclose(scores, inline.json()["outputs"][0]["data"], rtol=1e-6)


def test_every_documented_operation_is_replayed():
    replayed = {(method, template) for method, template, *_ in CASES}
    assert operations() - replayed == set()


def test_an_undocumented_path_answers_the_documented_error_body(http, rest_url):
    response = http.get(f"{rest_url}/v3/nothing")
    assert response.status_code == 404
    assert set(json.loads(response.content)) == {"error"}


def test_a_wrong_method_answers_405_naming_the_right_one(http, rest_url):
    for method, path, allow in (("DELETE", "/v1/models/ranker", "GET"),
                                ("GET", "/v1/models/ranker:predict", "POST"),
                                ("PUT", "/v2/models/ranker/infer", "POST")):
        response = http.request(method, rest_url + path)
        assert response.status_code == 405, (method, path)
        assert response.headers.get("allow") == allow, (method, path)


def test_an_unknown_verb_names_no_endpoint(http, rest_url):
    response = http.get(f"{rest_url}/v1/models/ranker:explain")
    assert response.status_code == 404
    assert "no such endpoint" in response.json()["error"]
    # A ':' before further segments belongs to the model name, not to a verb.
    response = http.get(f"{rest_url}/v1/models/a:b/metadata")
    assert response.status_code == 404
    assert "model 'a:b' not found" in response.json()["error"]
