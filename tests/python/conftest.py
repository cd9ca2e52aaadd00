"""Starts one real tensorport server for the whole test session.

The server binary comes from $TENSORPORT_BIN (default: <repo>/target/debug/tensorport).
It is started as

    tensorport serve --model-dir DIR --host 127.0.0.1 --grpc-port 0 --rest-port 0

where DIR is a temporary folder of symlinks to every model in examples/models and
tests/models, and the ports are read back from the line
`listening grpc=HOST:PORT rest=HOST:PORT` that it writes to stderr.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import requests
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

from tfs import EXAMPLE_MODELS, REPO, TEST_MODELS

STARTUP_TIMEOUT_S = 60
SHUTDOWN_TIMEOUT_S = 10
LISTENING_RE = re.compile(r"listening grpc=(\S+) rest=(\S+)")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colour codes a logger may add

_server_log: Path | None = None


@dataclass
class Server:
    process: subprocess.Popen
    rest_url: str
    grpc_target: str
    log_path: Path
    model_dir: Path

    def log(self) -> str:
        return _read(self.log_path)


def _read(path: Path) -> str:
    try:
        return ANSI_RE.sub("", path.read_text(errors="replace"))
    except FileNotFoundError:
        return "<no log>"


def _tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _server_binary() -> Path:
    # A relative TENSORPORT_BIN (as `make test` passes) is relative to the current directory.
    return Path(os.environ.get("TENSORPORT_BIN", REPO / "target" / "debug" / "tensorport")).absolute()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=SHUTDOWN_TIMEOUT_S)


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    global _server_log
    binary = _server_binary()
    if not binary.exists():
        pytest.fail(f"server binary {binary} not found: build it (cargo build) or set TENSORPORT_BIN",
                    pytrace=False)

    model_dir = tmp_path_factory.mktemp("models")
    for base in (EXAMPLE_MODELS, TEST_MODELS):
        for entry in sorted(base.iterdir()):
            if entry.is_dir():
                (model_dir / entry.name).symlink_to(entry.resolve(), target_is_directory=True)

    log_path = tmp_path_factory.mktemp("server") / "tensorport.log"
    _server_log = log_path
    cmd = [str(binary), "serve", "--model-dir", str(model_dir), "--host", "127.0.0.1",
           "--grpc-port", "0", "--rest-port", "0"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                env=dict(os.environ), cwd=REPO)

    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    match = None
    while time.monotonic() < deadline:
        match = LISTENING_RE.search(_read(log_path))
        if match or proc.poll() is not None:
            break
        time.sleep(0.05)
    if not match:
        # One last look: the process may have written the line just before exiting.
        match = LISTENING_RE.search(_read(log_path))
    if not match:
        _stop(proc)
        why = (f"exited with code {proc.returncode}" if proc.returncode is not None
               else f"did not print the listening line within {STARTUP_TIMEOUT_S}s")
        pytest.fail(f"tensorport {why}\ncommand: {' '.join(cmd)}\n--- server log ---\n{_read(log_path)}",
                    pytrace=False)

    grpc_addr, rest_addr = match.group(1), match.group(2)
    srv = Server(process=proc, rest_url=f"http://{rest_addr}", grpc_target=grpc_addr,
                 log_path=log_path, model_dir=model_dir)
    try:
        yield srv
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def rest_url(server) -> str:
    return server.rest_url


@pytest.fixture(scope="session")
def http(server):
    with requests.Session() as s:
        yield s


@pytest.fixture(scope="session")
def grpc_channel(server):
    channel = grpc.insecure_channel(server.grpc_target)
    grpc.channel_ready_future(channel).result(timeout=10)
    yield channel
    channel.close()


@pytest.fixture(scope="session")
def prediction_stub(grpc_channel):
    return prediction_service_pb2_grpc.PredictionServiceStub(grpc_channel)


@pytest.fixture(scope="session")
def model_stub(grpc_channel):
    return model_service_pb2_grpc.ModelServiceStub(grpc_channel)


# ---------------------------------------------------------------- KServe v2 / Triton clients

@pytest.fixture(scope="session")
def triton_http(server):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.rest_url.split("://", 1)[-1],
                                              connection_timeout=10, network_timeout=30)
    yield client
    client.close()


@pytest.fixture(scope="session")
def triton_grpc(server):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_target)
    yield client
    client.close()


@pytest.fixture(scope="session")
def kserve_stub(grpc_channel):
    """The raw `inference.GRPCInferenceService` stub, for hand-built requests."""
    from tritonclient.grpc import service_pb2_grpc

    return service_pb2_grpc.GRPCInferenceServiceStub(grpc_channel)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the tail of the server log to every failing test's report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _server_log is not None and _server_log.exists():
        report.sections.append(("tensorport server log (tail)", _tail(_read(_server_log))))
