"""The server's log against a hostile world, with the real binary.

- stderr on a pipe whose reader goes away (a log shipper restarting, `| tee` killed): every
  log write fails with EPIPE from then on. The server must keep doing everything it did
  before, not lose the threads that logged: new version folders still load, the reload RPC
  still answers, readiness holds, SIGTERM still exits cleanly, and the lines it could not
  write are counted in /metrics.
- Names from clients carrying line breaks and terminal escapes: refused on every API that
  takes a model name, and never written raw to the log, so a client cannot forge log lines.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as triton_grpc
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tensorflow_serving.config import model_server_config_pb2

from tensorport_server import LISTENING_RE, SETTLED_RE, read_log, server_binary, start_server
from tfs import EXAMPLE_MODELS, make_tensor_proto

FEATURES = np.full((1, 16), 0.5, dtype=np.float32)
# Generous bounds for conditions the test waits on (never how long something takes).
WAIT_S = 60


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting until {what}")


def copy_version(models: Path, version: int) -> None:
    shutil.copytree(EXAMPLE_MODELS / "ranker" / str(version), models / "ranker" / str(version))


def version_ready(rest: str, version: int) -> bool:
    response = requests.get(f"{rest}/v2/models/ranker/versions/{version}/ready", timeout=5)
    return response.status_code == 200


def dropped_lines(rest: str) -> float:
    text = requests.get(f"{rest}/metrics", timeout=5).text
    match = re.search(r"^tensorport_log_lines_dropped_total (\S+)$", text, re.MULTILINE)
    assert match, "tensorport_log_lines_dropped_total is not exported"
    return float(match.group(1))


def reload_request(name: str, base_path: Path) -> model_management_pb2.ReloadConfigRequest:
    """TF Serving's reload: serve `name` from `base_path` only."""
    config = model_server_config_pb2.ModelServerConfig()
    entry = config.model_config_list.config.add()
    entry.name, entry.base_path, entry.model_platform = name, str(base_path), "onnx"
    return model_management_pb2.ReloadConfigRequest(config=config)


def reload_ranker(grpc_target: str, models: Path):
    with grpc.insecure_channel(grpc_target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        return stub.HandleReloadConfigRequest(reload_request("ranker", models / "ranker"),
                                              timeout=30)


def test_a_closed_stderr_pipe_stops_nothing(tmp_path):
    models = tmp_path / "models"
    (models / "ranker").mkdir(parents=True)
    copy_version(models, 1)
    cmd = [str(server_binary()), "serve", "--model-dir", str(models), "--host", "127.0.0.1",
           "--grpc-port", "0", "--rest-port", "0", "--model-poll-secs", "1"]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        # Read the log until the server listens and has loaded, as a log shipper would...
        seen = ""
        listening = None
        deadline = time.monotonic() + WAIT_S
        while not (listening and SETTLED_RE.search(seen)) and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen += line.decode(errors="replace")
            listening = listening or LISTENING_RE.search(seen)
        assert listening and SETTLED_RE.search(seen), f"server did not start:\n{seen}"
        grpc_target, rest = listening.group(1), f"http://{listening.group(2)}"
        # ...then the shipper goes away: every later write to stderr fails with EPIPE.
        proc.stderr.close()

        # Work that logs on every thread that matters: a load that fails (the load API), a
        # new version found by the directory watch, a reload RPC.
        missing = requests.post(f"{rest}/v2/repository/models/nope/load", timeout=10)
        assert missing.status_code == 404, missing.text
        copy_version(models, 2)
        wait_until(lambda: version_ready(rest, 2), "version 2, added after the pipe closed, serves")
        reply = reload_ranker(grpc_target, models)
        assert reply.status.error_code == 0, reply.status
        with grpc.insecure_channel(grpc_target) as channel:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "ranker"
            request.inputs["features"].CopyFrom(make_tensor_proto(FEATURES))
            answer = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
                request, timeout=10)
            assert answer.model_spec.version.value == 2
        # The server still says it is ready, rightly: everything above still works.
        assert requests.get(f"{rest}/v2/health/ready", timeout=5).status_code == 200
        assert dropped_lines(rest) > 0
        assert proc.poll() is None, "the server died"

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


FORGED = "ranker\n2026-12-01T00:00:00.000000Z ERROR tensorport: forged line\x1b[2J"


def test_names_with_control_characters_are_refused_and_never_logged_raw(tmp_path):
    models = tmp_path / "models"
    (models / "ranker").mkdir(parents=True)
    copy_version(models, 1)
    log = tmp_path / "server.log"
    server = start_server(models, log, ["--model-poll-secs", "0"])
    try:
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = model_service_pb2_grpc.ModelServiceStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.HandleReloadConfigRequest(reload_request(FORGED, models / "ranker"),
                                               timeout=30)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "control character" in refused.value.details()

            with pytest.raises(grpc.RpcError) as refused:
                stub.GetModelStatus(get_model_status_pb2.GetModelStatusRequest(
                    model_spec={"name": FORGED}), timeout=5)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT

            request = predict_pb2.PredictRequest()
            request.model_spec.name = FORGED
            request.inputs["features"].CopyFrom(make_tensor_proto(FEATURES))
            with pytest.raises(grpc.RpcError) as refused:
                prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
                    request, timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        kserve = triton_grpc.InferenceServerClient(server.grpc_target)
        with pytest.raises(triton_grpc.InferenceServerException) as refused:
            kserve.get_model_metadata(FORGED)
        assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
        kserve_body = {"inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP32",
                                   "data": [0.5] * 16}]}
        for method, path, body in [
            ("POST", "/v2/repository/models/ranker%0Aforged/load", None),
            ("POST", "/v2/models/ranker%0Aforged/infer", kserve_body),
            ("GET", "/v2/models/ranker%1B%5B2J", None),
            ("GET", "/v2/models/ranker%0D/ready", None),
            ("POST", "/v1/models/ranker%0Aforged:predict", {"instances": [[0.5] * 16]}),
            ("GET", "/v1/models/ranker%1B%5B2J/metadata", None),
        ]:
            response = requests.request(method, f"{server.rest_url}{path}", json=body, timeout=10)
            assert response.status_code == 400, f"{path}: {response.text}"
            assert "control character" in response.json()["error"], response.text
        # The server still serves, and the log has no line the client wrote.
        assert requests.get(f"{server.rest_url}/v1/models/ranker", timeout=5).status_code == 200
    finally:
        server.stop()
    text = log.read_text(errors="replace")
    assert "\x1b[2J" not in text
    assert not any(line.startswith("2026-12-01T00:00:00.000000Z") for line in text.splitlines())
