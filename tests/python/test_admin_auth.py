"""Authentication by API group and admin confinement, with the real binary and real clients
(tritonclient over HTTP and gRPC, the TF Serving gRPC stubs, requests).

Each attack is followed by an authorised request that must still succeed.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tensorflow_serving.apis import (
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tensorflow_serving.config import model_server_config_pb2
from tritonclient.utils import InferenceServerException

from tensorport_server import EXAMPLE_MODELS, read_log, server_binary, start_server
from tfs import make_tensor_proto

ADMIN = "admin-token-0123456789abcdef"
CLIENT = "client-token-0123456789abcdef"
WRONG = "wrong-token-0123456789abcdefg"
TOKENS = f"""\
# TOKEN    GROUPS               NAME
{ADMIN}    *                    operator
{CLIENT}   inference,metadata   ranking-service
"""
FEATURES = np.full((1, 16), 0.5, dtype=np.float32)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@contextlib.contextmanager
def serving(tmp_path: Path, *extra: str):
    """ranker in a model directory of copies, `extra/ranker` in an allowed root beside it."""
    models = tmp_path / "models"
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "ranker")
    shutil.copytree(EXAMPLE_MODELS / "ranker", tmp_path / "extra" / "ranker")
    shutil.copytree(EXAMPLE_MODELS / "ranker", tmp_path / "outside" / "ranker")
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(TOKENS)
    server = start_server(models, tmp_path / "server.log",
                          ["--model-poll-secs", "0", "--auth-token-file", str(tokens),
                           "--allow-model-paths", str(tmp_path / "extra"), *extra])
    try:
        yield server
    finally:
        server.stop()


def triton_inputs(module):
    tensor = module.InferInput("features", [1, 16], "FP32")
    tensor.set_data_from_numpy(FEATURES)
    return [tensor]


def assert_still_serves(server) -> None:
    client = triton_http.InferenceServerClient(server.rest_url.removeprefix("http://"))
    result = client.infer("ranker", triton_inputs(triton_http), headers=bearer(CLIENT))
    assert result.as_numpy("score").shape[0] == 1


def test_tritonclient_http_and_grpc_need_the_right_token(tmp_path):
    with serving(tmp_path) as server:
        http = triton_http.InferenceServerClient(server.rest_url.removeprefix("http://"))
        grpc_client = triton_grpc.InferenceServerClient(server.grpc_target)

        for headers in ({}, bearer(WRONG)):
            # Copies: tritonclient's HTTP client adds its own headers to the dict it is given.
            with pytest.raises(InferenceServerException) as err:
                http.infer("ranker", triton_inputs(triton_http), headers=dict(headers))
            assert "token" in str(err.value)
            with pytest.raises(InferenceServerException) as err:
                grpc_client.infer("ranker", triton_inputs(triton_grpc), headers=dict(headers))
            assert err.value.status() == "StatusCode.UNAUTHENTICATED", err.value
            assert_still_serves(server)

        # The client token may infer but not load, unload or touch shared memory.
        with pytest.raises(InferenceServerException) as err:
            http.load_model("ranker", headers=bearer(CLIENT))
        assert "model-repository" in str(err.value)
        with pytest.raises(InferenceServerException) as err:
            grpc_client.unload_model("ranker", headers=bearer(CLIENT))
        assert err.value.status() == "StatusCode.PERMISSION_DENIED", err.value
        with pytest.raises(InferenceServerException) as err:
            grpc_client.get_system_shared_memory_status(headers=bearer(CLIENT))
        assert err.value.status() == "StatusCode.PERMISSION_DENIED", err.value
        assert_still_serves(server)

        raw = requests.post(f"{server.rest_url}/v2/repository/models/ranker/unload",
                            headers=bearer(CLIENT), timeout=10)
        assert raw.status_code == 403 and "model-repository" in raw.json()["error"]
        raw = requests.get(f"{server.rest_url}/metrics", timeout=10)
        assert raw.status_code == 401 and raw.headers["www-authenticate"] == "Bearer"

        result = grpc_client.infer("ranker", triton_inputs(triton_grpc), headers=bearer(CLIENT))
        assert result.as_numpy("score").shape[0] == 1
        http.load_model("ranker", headers=bearer(ADMIN))
        # Probes are open without a token.
        assert http.is_server_ready() and grpc_client.is_server_live()
        assert_still_serves(server)

        log = read_log(server.log_path)
        assert "API group 'model-repository' is open to tokens operator" in log, log
        assert "API group 'inference' is open to tokens operator, ranking-service" in log, log
        assert "API group 'health' is open to anyone (no token needed)" in log, log
        assert CLIENT not in log and ADMIN not in log


def reload_request(*entries: tuple[str, str]):
    config = model_server_config_pb2.ModelServerConfig()
    config.model_config_list.SetInParent()
    for name, base_path in entries:
        entry = config.model_config_list.config.add()
        entry.name = name
        entry.base_path = base_path
    return model_management_pb2.ReloadConfigRequest(config=config)


def tfs_predict(channel, token: str):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "ranker"
    request.inputs["features"].CopyFrom(make_tensor_proto(FEATURES))
    return stub.Predict(request, metadata=list(bearer(token).items()), timeout=10)


def test_tf_serving_reload_config_is_confined_and_authenticated(tmp_path):
    with serving(tmp_path) as server:
        channel = grpc.insecure_channel(server.grpc_target)
        models = model_service_pb2_grpc.ModelServiceStub(channel)
        admin = list(bearer(ADMIN).items())

        def refused(request, metadata, code):
            with pytest.raises(grpc.RpcError) as err:
                models.HandleReloadConfigRequest(request, metadata=metadata, timeout=30)
            assert err.value.code() == code, err.value
            message = err.value.details()
            assert str(tmp_path) not in message and "/proc" not in message, message
            tfs_predict(channel, CLIENT)
            return message

        ranker = reload_request(("ranker", ""))
        refused(ranker, None, grpc.StatusCode.UNAUTHENTICATED)
        refused(ranker, list(bearer(CLIENT).items()), grpc.StatusCode.PERMISSION_DENIED)
        for name in ("../outside/ranker", "/etc", "a/b", ".."):
            assert "plain name" in refused(reload_request((name, "")), admin,
                                           grpc.StatusCode.INVALID_ARGUMENT)
        for base_path in ("/proc", "/proc/self/root", str(tmp_path / "outside" / "ranker"),
                          "../outside/ranker", "missing"):
            assert "base_path" in refused(reload_request(("stolen", base_path)), admin,
                                          grpc.StatusCode.PERMISSION_DENIED)
        assert "empty" in refused(reload_request(), admin, grpc.StatusCode.INVALID_ARGUMENT)
        assert requests.get(f"{server.rest_url}/v2/health/ready", timeout=5).status_code == 200

        # A folder under --allow-model-paths may be served.
        reply = models.HandleReloadConfigRequest(
            reload_request(("ranker", str(tmp_path / "extra" / "ranker"))), metadata=admin, timeout=30)
        assert reply.status.error_code == 0
        assert tfs_predict(channel, CLIENT).outputs["score"].tensor_shape.dim[0].size == 1


def test_a_bad_token_file_stops_the_start_without_showing_tokens(tmp_path):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"{CLIENT} inference,admin\n")
    models = tmp_path / "models"
    models.mkdir()
    done = subprocess.run([str(server_binary()), "serve", "--model-dir", str(models),
                           "--auth-token-file", str(tokens), "--grpc-port", "0", "--rest-port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "line 1" in done.stderr and "'admin'" in done.stderr, done.stderr
    assert CLIENT not in done.stderr


def test_the_metrics_port_applies_the_same_grants(tmp_path):
    with serving(tmp_path, "--metrics-port", "0") as server:
        match = re.search(r"listening .* metrics=(\S+)", read_log(server.log_path))
        assert match, read_log(server.log_path)
        metrics = f"http://{match.group(1)}/metrics"
        assert requests.get(metrics, timeout=10).status_code == 401
        assert requests.get(metrics, headers=bearer(CLIENT), timeout=10).status_code == 403
        assert requests.get(metrics, headers=bearer(ADMIN), timeout=10).status_code == 200
        assert requests.get(f"http://{match.group(1)}/v2/health/live", timeout=10).status_code == 200
        assert_still_serves(server)
