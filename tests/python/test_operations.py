"""What an operator meets, against the real binary: a port conflict fails before any model
loads, repository problems are logged once and say what layout is expected, the CLI names the
backends it was built with and hints at `serve`, the example configuration files are accepted,
and `make serve` and the test harness find the binary wherever cargo builds it.

(Readiness before and after the load at start-up is tested in tests/operations.rs, where the
test decides when the load happens.)"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tensorport_server import EXAMPLE_MODELS, REPO, read_log, server_binary, start_server

STARTUP_TIMEOUT_S = 60


def run_binary(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(server_binary()), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, stdin=subprocess.DEVNULL)


def test_a_port_in_use_fails_before_any_model_loads(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_binary("serve", "--model-dir", str(EXAMPLE_MODELS), "--host", "127.0.0.1",
                            "--grpc-port", "0", "--rest-port", str(port))
    assert result.returncode != 0
    assert f"--rest-port: cannot listen on 127.0.0.1:{port}" in result.stderr, result.stderr
    # Bound before loaded: the conflict is reported before any model is touched.
    assert "loading" not in result.stderr, result.stderr


def test_version_and_help_name_the_compiled_backends():
    version = run_binary("--version")
    assert version.returncode == 0
    assert "(backends: onnx" in version.stdout, version.stdout
    help_text = run_binary("--help").stdout
    assert help_text.startswith("Serve ONNX"), help_text
    serve_help = run_binary("serve", "--help").stdout
    assert "--readiness <READINESS>" in serve_help and "TENSORPORT_READINESS" in serve_help


def test_flags_without_serve_get_a_hint():
    result = run_binary("--model-dir", "examples/models")
    assert result.returncode == 2
    assert "hint: the server runs as a subcommand: tensorport serve --model-dir examples/models" in result.stderr


def _poll_until(predicate, what: str, server) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not predicate():
        assert server.process.poll() is None, server.log()
        assert time.monotonic() < deadline, f"never: {what}\n{server.log()}"
        time.sleep(0.05)


def _available(server, model: str, version: int) -> bool:
    reply = requests.get(f"{server.rest_url}/v1/models/{model}", timeout=5)
    if reply.status_code != 200:
        return False
    return any(v["version"] == str(version) and v["state"] == "AVAILABLE"
               for v in reply.json()["model_version_status"])


def test_repository_problems_are_logged_once_with_the_expected_layout(tmp_path):
    models = tmp_path / "models"
    (models / "flat").mkdir(parents=True)
    shutil.copy(EXAMPLE_MODELS / "ranker" / "1" / "model.onnx", models / "flat" / "model.onnx")
    # Two model files and no version folder: which one to serve is ambiguous.
    (models / "two").mkdir(parents=True)
    for name in ("a.onnx", "b.onnx"):
        shutil.copy(EXAMPLE_MODELS / "ranker" / "1" / "model.onnx", models / "two" / name)
    (models / "lost+found").mkdir()
    (models / ".snapshots" / "1").mkdir(parents=True)
    shutil.copytree(EXAMPLE_MODELS / "ranker" / "1", models / "ranker" / "1")
    server = start_server(models, tmp_path / "server.log", ["--model-poll-secs", "1"])
    try:
        # Two versions added one after the other, each seen by a later poll: by the time the
        # second serves, the server has polled the broken folder at least twice more.
        for version in (2, 3):
            shutil.copytree(EXAMPLE_MODELS / "ranker" / "1", models / "ranker" / f"{version}.tmp")
            (models / "ranker" / f"{version}.tmp").rename(models / "ranker" / str(version))
            _poll_until(lambda v=version: _available(server, "ranker", v), f"ranker {version} serves", server)
        log = server.log()
        warnings = [line for line in log.splitlines() if "no numeric version folder" in line]
        assert len(warnings) == 1, log
        assert "holds several model files (a.onnx, b.onnx)" in warnings[0], warnings[0]
        # A single model file directly in its folder is the MLServer / KServe layout: version 1.
        assert _available(server, "flat", 1), log
        assert "<model-dir>/<model>/<version>/model.onnx" in warnings[0], warnings[0]
        assert "lost+found" not in log and ".snapshots" not in log, log
        assert requests.get(f"{server.rest_url}/v1/models/lost+found", timeout=5).status_code == 404
    finally:
        server.stop()


def test_the_example_configuration_files_are_accepted(tmp_path):
    models = tmp_path / "models"
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "ranker")
    shutil.copy(REPO / "examples" / "config" / "config.toml", models / "ranker" / "config.toml")
    server = start_server(models, tmp_path / "server.log",
                          ["--config", str(REPO / "examples" / "config" / "tensorport.toml")])
    try:
        # Flags (the harness's ports and model dir) beat the file; the model's settings apply.
        status = requests.get(f"{server.rest_url}/v1/models/ranker", timeout=5).json()
        states = {v["version"]: v["state"] for v in status["model_version_status"]}
        assert states == {"1": "AVAILABLE", "2": "AVAILABLE"}, status
        stable = requests.get(f"{server.rest_url}/v1/models/ranker/labels/stable/metadata", timeout=5)
        assert stable.status_code == 200, stable.text
        assert requests.get(f"{server.rest_url}/readyz", timeout=5).status_code == 200
    finally:
        server.stop()


def test_the_harness_finds_the_binary_where_cargo_builds(tmp_path):
    # Asked in a child interpreter, so that the cache of this one is untouched.
    env = {k: v for k, v in os.environ.items() if k != "TENSORPORT_BIN"}
    env["CARGO_TARGET_DIR"] = str(tmp_path / "elsewhere")
    code = ("import sys; sys.path.insert(0, 'tests/python'); import tensorport_server as t; "
            "print(t.server_binary())")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                           env=env, check=True, timeout=60).stdout.strip()
    assert found == str(tmp_path / "elsewhere" / "debug" / "tensorport")


def test_make_serve_uses_cargo_and_the_runtime_environment_only(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = dict(os.environ, CARGO_TARGET_DIR=str(tmp_path / "elsewhere"))
    plan = subprocess.run(["make", "-n", "serve"], capture_output=True, text=True, cwd=REPO, env=env,
                          check=True, timeout=60).stdout
    assert "cargo run --release" in plan, plan
    assert "target/" not in plan, plan
    # Only the onnxruntime wheel, without the test environment's packages.
    runtime = subprocess.run(["make", "-n", "-B", "runtime"], capture_output=True, text=True, cwd=REPO,
                             check=True, timeout=60).stdout
    assert "--no-deps" in runtime and "onnxruntime==" in runtime, runtime
    assert "-r requirements-dev.txt" not in runtime, runtime
    assert " -q " not in runtime, runtime


def _check_docker_context(dockerfile: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "check_docker_context.py"), str(dockerfile)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def test_the_dockerfile_copies_every_workspace_member():
    result = _check_docker_context(REPO / "deploy" / "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_docker_context_check_catches_a_missing_member(tmp_path):
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    without = "\n".join(line for line in dockerfile.splitlines() if not line.startswith("COPY bench/loadgen"))
    assert without != dockerfile
    (tmp_path / "Dockerfile").write_text(without)
    result = _check_docker_context(tmp_path / "Dockerfile")
    assert result.returncode == 1
    assert "bench/loadgen" in result.stderr, result.stderr


def _access_lines(server, prefix: str, count: int) -> list[str]:
    """The access-log lines (stdout, in the same file as the log), once `count` are there."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        lines = [line for line in server.log().splitlines() if line.startswith(prefix)]
        if len(lines) >= count:
            return lines
        assert time.monotonic() < deadline, f"expected {count} access-log lines:\n{server.log()}"
        time.sleep(0.05)


def _infer_ranker(server) -> requests.Response:
    return requests.post(f"{server.rest_url}/v2/models/ranker/infer", json={
        "inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}]},
        headers={"x-request-id": "ops-trace-1"}, timeout=10)


def test_the_json_access_log_names_every_field_and_outcome(tmp_path):
    import tritonclient.grpc as grpcclient

    server = start_server(EXAMPLE_MODELS, tmp_path / "server.log", ["--access-log", "json"])
    try:
        assert _infer_ranker(server).status_code == 200
        assert requests.delete(f"{server.rest_url}/v1/models/ranker", timeout=5).status_code == 405
        client = grpcclient.InferenceServerClient(server.grpc_target)
        with pytest.raises(Exception):
            client.get_model_metadata("no_such_model")
        lines = [json.loads(line) for line in _access_lines(server, '{"time"', 3)]
    finally:
        server.stop()
    fields = {"time", "client", "method", "path", "protocol", "model", "version", "status", "outcome",
              "duration_ms", "request_id", "trace_id", "bytes_in", "bytes_out"}
    assert all(set(line) == fields for line in lines), lines
    infer, wrong_method, grpc_missing = lines[:3]
    assert infer["method"] == "POST" and infer["path"] == "/v2/models/ranker/infer"
    assert infer["model"] == "ranker" and infer["version"] == 2 and infer["status"] == 200
    assert infer["outcome"] == "ok" and infer["request_id"] == "ops-trace-1"
    assert infer["client"].startswith("127.0.0.1:") and infer["bytes_in"] > 0 and infer["bytes_out"] > 0
    assert infer["time"].endswith("Z") and infer["duration_ms"] >= 0
    assert wrong_method["status"] == 405 and wrong_method["outcome"] == "method_not_allowed"
    assert grpc_missing["path"] == "/inference.GRPCInferenceService/ModelMetadata"
    assert grpc_missing["protocol"] == "kserve-grpc"
    assert grpc_missing["status"] == 5 and grpc_missing["outcome"] == "not_found"


def test_the_text_access_log_is_one_key_value_line_per_request(tmp_path):
    server = start_server(EXAMPLE_MODELS, tmp_path / "server.log", ["--access-log", "text"])
    try:
        assert _infer_ranker(server).status_code == 200
        [line] = _access_lines(server, "time=", 1)
    finally:
        server.stop()
    pairs = dict(word.split("=", 1) for word in line.split(" "))
    assert list(pairs) == ["time", "client", "method", "path", "protocol", "model", "version", "status",
                           "outcome", "duration_ms", "request_id", "trace_id", "bytes_in", "bytes_out"]
    assert pairs["model"] == "ranker" and pairs["status"] == "200" and pairs["request_id"] == "ops-trace-1"
    assert pairs["trace_id"] == "-"  # not traced: no --trace-config


def test_no_access_log_by_default(tmp_path):
    server = start_server(EXAMPLE_MODELS, tmp_path / "server.log")
    try:
        assert _infer_ranker(server).status_code == 200
    finally:
        server.stop()
    assert not [line for line in server.log().splitlines() if line.startswith(("time=", '{"time"'))]


PM_QOS_DEVICE = "/dev/cpu_dma_latency"


def read_wakeup_cap() -> int:
    with open(PM_QOS_DEVICE, "rb") as device:
        return int.from_bytes(device.read(4), sys.byteorder, signed=True)


def wakeup_cap_holders() -> set[int]:
    """The processes holding the device open: the kernel's cap is the tightest of theirs."""
    holders = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) == PM_QOS_DEVICE for fd in (proc / "fd").iterdir()):
                holders.add(int(proc.name))
        except OSError:
            continue
    return holders


@pytest.mark.skipif(not os.access(PM_QOS_DEVICE, os.W_OK),
                    reason="needs write access to /dev/cpu_dma_latency (root)")
def test_the_cpu_wakeup_latency_cap_is_held_while_serving_and_released_after(tmp_path):
    # The kernel's value is shared by every holder on the machine, so the server's own hold
    # is read from its descriptors, and the value only where nothing else holds one.
    others_before = wakeup_cap_holders()
    before = read_wakeup_cap()
    server = start_server(EXAMPLE_MODELS, tmp_path / "server.log",
                          extra_args=["--cpu-wakeup-latency-us", "0"])
    try:
        assert "holding the CPU wake-up latency cap micros=0" in server.log(), server.log()
        assert server.process.pid in wakeup_cap_holders()
        assert read_wakeup_cap() == 0
        ready = requests.get(f"{server.rest_url}/v2/health/ready", timeout=10)
        assert ready.status_code == 200
    finally:
        server.stop()
    # The kernel drops the request with the server's descriptor.
    assert server.process.pid not in wakeup_cap_holders()
    if not others_before and not wakeup_cap_holders():
        assert read_wakeup_cap() == before


def test_a_cpu_wakeup_latency_cap_that_cannot_be_held_stops_the_start(tmp_path):
    # Without access to the device (run unprivileged, or the device absent) the server refuses
    # to start rather than serve without the setting it was given.
    if os.access(PM_QOS_DEVICE, os.W_OK):
        result = run_binary("serve", "--model-dir", str(EXAMPLE_MODELS), "--host", "127.0.0.1",
                            "--grpc-port", "0", "--rest-port", "0",
                            "--cpu-wakeup-latency-us", "4294967295")
        assert result.returncode != 0
        assert "more than the kernel takes" in result.stderr, result.stderr
    else:
        result = run_binary("serve", "--model-dir", str(EXAMPLE_MODELS), "--host", "127.0.0.1",
                            "--grpc-port", "0", "--rest-port", "0", "--cpu-wakeup-latency-us", "0")
        assert result.returncode != 0
        assert PM_QOS_DEVICE in result.stderr and "--cpu-wakeup-latency-us" in result.stderr, \
            result.stderr
