"""What only TensorFlow SavedModels (`--features tensorflow`) have, end to end on
tests/models/ranker_tf (the ranking MLP of examples/models/ranker rebuilt in TensorFlow by
scripts/make_tf_fixtures.py; test_conformance.py checks it over every API like the other formats):
several signature defs, listed in the metadata and selectable with `signature_name` over gRPC and
REST, with outputs equal to TensorFlow's own (reference.json) to 1e-5; an unknown signature, a
wrong dtype or shape are INVALID_ARGUMENT / 400; the warmup file in assets.extra is replayed at
load, and a corrupt one fails that version's load while the serving version keeps serving.
tests/models/tf_echo carries one identity signature per dtype and a lookup that TensorFlow
itself refuses for an id out of range: that error answers its request only."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
from tensorflow_serving.apis import get_model_metadata_pb2, predict_pb2

from tensorport_server import TEST_MODELS, read_log, start_server
from tfs import ECHO_TYPES, assert_close, echo_values, make_ndarray, make_tensor_proto

MODEL = "ranker_tf"
SOURCE = TEST_MODELS / MODEL
REFERENCE = json.loads((SOURCE / "reference.json").read_text())


def committed(entry: dict) -> np.ndarray:
    return np.array(entry["data"], dtype=entry["dtype"]).reshape(entry["shape"])


FEATURES = committed(REFERENCE["inputs"]["features"])
SCORE = committed(REFERENCE["outputs"]["score"])
LOGIT = committed(REFERENCE["outputs"]["logit"])
TOL = dict(rtol=1e-5, atol=1e-5)
WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"


def grpc_predict(stub, signature: str = "", features=FEATURES):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = MODEL
    request.model_spec.signature_name = signature
    request.inputs["features"].CopyFrom(make_tensor_proto(features))
    return stub.Predict(request, timeout=10)


def rest_predict(url: str, body: dict) -> requests.Response:
    return requests.post(f"{url}/v1/models/{MODEL}:predict", json=body, timeout=10)


# ------------------------------------------------------------------ TF Serving gRPC and REST

def test_grpc_predict_matches_tensorflow(prediction_stub):
    reply = grpc_predict(prediction_stub)
    np.testing.assert_allclose(make_ndarray(reply.outputs["score"]), SCORE, **TOL)
    assert reply.model_spec.signature_name == "serving_default"
    assert reply.model_spec.version.value == 1


def test_grpc_signature_name_selects_the_logits_signature(prediction_stub):
    reply = grpc_predict(prediction_stub, "logits")
    assert list(reply.outputs) == ["logit"]
    np.testing.assert_allclose(make_ndarray(reply.outputs["logit"]), LOGIT, **TOL)
    assert reply.model_spec.signature_name == "logits"


def test_rest_predict_matches_tensorflow(rest_url):
    rows = rest_predict(rest_url, {"instances": FEATURES.tolist()})
    assert rows.status_code == 200, rows.text
    np.testing.assert_allclose(np.array(rows.json()["predictions"], dtype=np.float32), SCORE, **TOL)
    columns = rest_predict(rest_url, {"signature_name": "logits", "inputs": {"features": FEATURES.tolist()}})
    assert columns.status_code == 200, columns.text
    np.testing.assert_allclose(np.array(columns.json()["outputs"], dtype=np.float32), LOGIT, **TOL)


def test_metadata_lists_both_signatures(prediction_stub, rest_url):
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = MODEL
    reply = prediction_stub.GetModelMetadata(request, timeout=10)
    defs = get_model_metadata_pb2.SignatureDefMap()
    assert reply.metadata["signature_def"].Unpack(defs)
    assert set(defs.signature_def) == {"serving_default", "logits"}
    assert set(defs.signature_def["serving_default"].outputs) == {"score"}
    assert set(defs.signature_def["logits"].outputs) == {"logit"}
    features = defs.signature_def["logits"].inputs["features"]
    assert [d.size for d in features.tensor_shape.dim] == [-1, 16]

    body = requests.get(f"{rest_url}/v1/models/{MODEL}/metadata", timeout=10).json()
    rest_defs = body["metadata"]["signature_def"]["signature_def"]
    assert set(rest_defs) == {"serving_default", "logits"}
    assert rest_defs["serving_default"]["outputs"]["score"]["dtype"] == "DT_FLOAT"

    kserve = requests.get(f"{rest_url}/v2/models/{MODEL}", timeout=10).json()
    assert kserve["platform"] == "tensorflow_savedmodel"
    assert [(t["name"], t["datatype"], t["shape"]) for t in kserve["inputs"]] == [("features", "FP32", [-1, 16])]
    assert [(t["name"], t["datatype"], t["shape"]) for t in kserve["outputs"]] == [("score", "FP32", [-1, 1])]


def test_unknown_signature_is_invalid_argument_naming_the_signatures(prediction_stub, rest_url):
    with pytest.raises(grpc.RpcError) as err:
        grpc_predict(prediction_stub, "no_such_signature")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "no_such_signature" in err.value.details()
    assert "serving_default" in err.value.details() and "logits" in err.value.details()

    response = rest_predict(rest_url, {"signature_name": "no_such_signature", "instances": FEATURES.tolist()})
    assert response.status_code == 400
    assert "no_such_signature" in response.json()["error"]


def test_wrong_dtype_or_shape_is_invalid_argument(prediction_stub, rest_url):
    with pytest.raises(grpc.RpcError) as err:
        grpc_predict(prediction_stub, features=FEATURES.astype(np.float64))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "dtype" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        grpc_predict(prediction_stub, features=FEATURES[:, :15])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "shape" in err.value.details()

    response = rest_predict(rest_url, {"instances": FEATURES[:, :15].tolist()})
    assert response.status_code == 400
    assert "features" in response.json()["error"]


# ------------------------------------------------------------------ dtypes and run-time errors

def echo(stub, signature: str, name: str, value, dtype: str | None = None):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "tf_echo"
    request.model_spec.signature_name = signature
    request.inputs[name].CopyFrom(make_tensor_proto(value, dtype))
    return stub.Predict(request, timeout=10)


@pytest.mark.parametrize("dtype", ECHO_TYPES)
def test_every_dtype_round_trips(prediction_stub, dtype):
    # Strings here are text; binary ones have the next test.
    values = echo_values(dtype, for_json=True) if dtype == "string" else echo_values(dtype)
    reply = echo(prediction_stub, f"echo_{dtype}", "x", values, dtype)
    assert_close(make_ndarray(reply.outputs["y"]), values, dtype)


def test_binary_strings_round_trip_byte_for_byte(prediction_stub):
    # Bytes that are not UTF-8 (b"\xff\xfe\x01", b"\x80") reach TensorFlow and come back as sent.
    values = echo_values("string")
    reply = echo(prediction_stub, "echo_string", "x", values, "string")
    assert list(reply.outputs["y"].string_val) == list(values.reshape(-1))
    assert make_ndarray(reply.outputs["y"]).shape == values.shape


def test_a_runtime_error_fails_only_its_request(prediction_stub):
    ids = np.array([1, 9], dtype=np.int64)
    reply = echo(prediction_stub, "lookup", "ids", ids)
    np.testing.assert_array_equal(make_ndarray(reply.outputs["values"]), ids.astype(np.float32) * 1.5)
    with pytest.raises(grpc.RpcError) as err:
        echo(prediction_stub, "lookup", "ids", np.array([3, 42], dtype=np.int64))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "42" in err.value.details()
    reply = echo(prediction_stub, "lookup", "ids", ids)
    np.testing.assert_array_equal(make_ndarray(reply.outputs["values"]), ids.astype(np.float32) * 1.5)


# ------------------------------------------------------------------ servers of their own

def copy_model(models: Path, version: int = 1) -> Path:
    target = models / MODEL / str(version)
    shutil.copytree(SOURCE / "1", target)
    return target


def test_the_warmup_file_is_replayed_at_load(tmp_path):
    models = tmp_path / "models"
    copy_model(models)
    server = start_server(models, tmp_path / "server.log")
    try:
        log = server.log()
        line = next((l for l in log.splitlines() if "replayed the warmup file" in l), "")
        assert f"requests={REFERENCE['warmup_requests']}" in line, log
        # Warmup runs before the version serves, outside the request statistics.
        stats = requests.get(f"{server.rest_url}/v2/models/{MODEL}/stats", timeout=5).json()["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] == 0
    finally:
        server.stop()


def test_a_corrupt_warmup_file_fails_that_version_only(tmp_path):
    models = tmp_path / "models"
    copy_model(models)
    server = start_server(models, tmp_path / "server.log", ["--model-poll-secs", "1"])
    try:
        status_url = f"{server.rest_url}/v1/models/{MODEL}"
        version_two = copy_model(tmp_path / "staging", 2)
        damaged = bytearray((version_two / WARMUP_FILE).read_bytes())
        damaged[20] ^= 0xFF  # inside the first record's data: its checksum no longer matches
        (version_two / WARMUP_FILE).write_bytes(bytes(damaged))
        version_two.rename(models / MODEL / "2")

        status = {}
        for _ in range(300):
            status = {row["version"]: row for row in requests.get(status_url, timeout=5).json()["model_version_status"]}
            if status.get("2", {}).get("state") == "END":
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"version 2 never failed: {status}\n{read_log(server.log_path)[-3000:]}")
        message = status["2"]["status"]["error_message"]
        assert "warmup" in message and "checksum" in message, message
        assert status["1"]["state"] == "AVAILABLE"
        response = rest_predict(server.rest_url, {"instances": FEATURES.tolist()})
        assert response.status_code == 200, response.text
        np.testing.assert_allclose(np.array(response.json()["predictions"], dtype=np.float32), SCORE, **TOL)
    finally:
        server.stop()
