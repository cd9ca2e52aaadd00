"""Triton's and TF Serving's own command lines, run through a symlink named like the peer's
binary (as a container that swaps the binary does) or the `tensorport tritonserver` /
`tensorport tensorflow_model_server` subcommands, with that peer's defaults.

The command lines are the peers' published ones:
- Triton's quickstart: `tritonserver --model-repository=/models`
  (triton-inference-server/server, docs/getting_started/quickstart.md, v2.51.0);
- Triton's explicit model control test: `--model-repository=`pwd`/models
  --model-control-mode=explicit --exit-timeout-secs=5 --strict-model-config=false
  --strict-readiness=false` (triton-inference-server/server, qa/L0_lifecycle/test.sh, v2.51.0),
  with `--load-model` from docs/user_guide/model_management.md;
- TF Serving's Docker image: `tensorflow_model_server --port=8500 --rest_api_port=8501
  --model_name=${MODEL_NAME} --model_base_path=${MODEL_BASE_PATH}/${MODEL_NAME}`
  (tensorflow/serving, tensorflow_serving/g3doc/docker.md).

Triton's fixed ports (8000-8002) cannot be bound safely on a shared machine, so its lines get
`--http-port=0 --grpc-port=0 --metrics-port=0` added (the defaults themselves are checked by the
unit tests in src/config/peers/tests.rs); TF Serving's get free ports, since its port 0 turns
an API off.
"""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import grpc
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from tensorport_server import EXAMPLE_MODELS, server_binary, start_server

METRICS_RE = re.compile(r"listening grpc=\S+ rest=\S+ metrics=(\S+)")
ANY_PORT = ["--http-port=0", "--grpc-port=0", "--metrics-port=0"]


def linked(tmp_path: Path, name: str) -> str:
    """A symlink to the binary named `name`, as a container puts it where the peer's was."""
    link = tmp_path / "bin" / name
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(server_binary())
    return str(link)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_triton_quickstart_line_serves_http_grpc_and_metrics(tmp_path):
    line = ["--model-repository=" + str(EXAMPLE_MODELS), *ANY_PORT]
    server = start_server(None, tmp_path / "log", line, program=[linked(tmp_path, "tritonserver")])
    try:
        client = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
        assert client.is_server_ready()
        assert client.is_model_ready("ranker") and client.is_model_ready("two_tower")
        metrics = METRICS_RE.search(server.log())
        assert metrics, server.log()
        scrape = requests.get(f"http://{metrics.group(1)}/metrics", timeout=10)
        assert scrape.status_code == 200 and "tensorport_" in scrape.text
        assert "accepted but not applied" not in server.log()
    finally:
        server.stop()


def test_triton_explicit_mode_loads_the_named_model_then_others_on_request(tmp_path):
    line = ["--model-repository=" + str(EXAMPLE_MODELS), "--model-control-mode=explicit",
            "--exit-timeout-secs=5", "--strict-model-config=false", "--strict-readiness=false",
            "--load-model=ranker", *ANY_PORT]
    server = start_server(None, tmp_path / "log", line,
                          program=[str(server_binary()), "tritonserver"])
    try:
        client = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
        assert client.is_model_ready("ranker")
        assert not client.is_model_ready("two_tower")
        # Listed by name alone until loaded, as Triton's index lists it in explicit mode.
        index = client.get_model_repository_index()
        assert {"name": "two_tower"} in index, index
        assert any(e["name"] == "ranker" and e.get("state") == "READY" for e in index), index
        grpc_index = grpcclient.InferenceServerClient(server.grpc_target).get_model_repository_index()
        assert [m.state for m in grpc_index.models if m.name == "two_tower"] == [""], grpc_index
        client.load_model("two_tower")
        assert client.is_model_ready("two_tower")
        # Every flag of the line is applied (--strict-model-config=false completes the
        # examples' signatures from their model files, as Triton does).
        assert "accepted but not applied" not in server.log(), server.log()
    finally:
        server.stop()


def test_tf_serving_docker_line_serves_grpc_and_rest(tmp_path):
    grpc_port, rest_port = free_port(), free_port()
    line = [f"--port={grpc_port}", f"--rest_api_port={rest_port}", "--model_name=ranker",
            "--model_base_path=" + str(EXAMPLE_MODELS / "ranker")]
    server = start_server(None, tmp_path / "log", line,
                          program=[linked(tmp_path, "tensorflow_model_server")])
    try:
        assert server.grpc_target.endswith(f":{grpc_port}")
        status = requests.get(f"http://127.0.0.1:{rest_port}/v1/models/ranker", timeout=10)
        assert status.status_code == 200, status.text
        assert status.json()["model_version_status"][0]["state"] == "AVAILABLE"
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = model_service_pb2_grpc.ModelServiceStub(channel)
            request = get_model_status_pb2.GetModelStatusRequest()
            request.model_spec.name = "ranker"
            reply = stub.GetModelStatus(request, timeout=10)
            assert reply.model_version_status[0].state == get_model_status_pb2.ModelVersionStatus.AVAILABLE
    finally:
        server.stop()


def test_tf_serving_without_rest_api_port_serves_no_rest(tmp_path):
    grpc_port = free_port()
    line = [f"--port={grpc_port}", "--model_name=ranker",
            "--model_base_path=" + str(EXAMPLE_MODELS / "ranker")]
    server = start_server(None, tmp_path / "log", line,
                          program=[str(server_binary()), "tensorflow_model_server"])
    try:
        assert server.rest_url == "http://off", server.log()
    finally:
        server.stop()


@pytest.mark.parametrize("flag, why", [
    ("--grpc-use-ssl=true", "--tls-cert"),
    ("--model-repository=/elsewhere", "one model repository"),
])
def test_triton_values_that_cannot_be_honoured_stop_the_start(tmp_path, flag, why):
    cmd = [str(server_binary()), "tritonserver", "--model-repository=" + str(EXAMPLE_MODELS), flag]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert why in done.stderr, done.stderr
