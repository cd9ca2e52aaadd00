"""Starts one real tensorport server for the whole test session.

How the binary is found and started is in tensorport_server.py; the binary comes from
$TENSORPORT_BIN (default: tensorport in cargo's target directory, debug profile).
It is started as

    tensorport serve --model-dir DIR --host 127.0.0.1 --grpc-port 0 --rest-port 0

where DIR is a temporary folder of symlinks to every model in examples/models and
tests/models, and the ports are read back from the line
`listening grpc=HOST:PORT rest=HOST:PORT` that it writes to stderr.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
import requests
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

from tensorport_server import Server, ServerStartError, link_models, read_log, start_server

_server_log: Path | None = None


def _tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    global _server_log
    model_dir = link_models(tmp_path_factory.mktemp("models"))
    log_path = tmp_path_factory.mktemp("server") / "tensorport.log"
    _server_log = log_path
    try:
        srv = start_server(model_dir, log_path)
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)
    try:
        yield srv
    finally:
        srv.stop()


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
        report.sections.append(("tensorport server log (tail)", _tail(read_log(_server_log))))
