"""The client's tests run against the real server binary, started once for the session with
the repository's example and test models (the same helper the repository's own suites use).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "python"))

from tensorport_server import ServerStartError, link_models, start_server  # noqa: E402

from tensorport_client import GrpcClient, RestClient  # noqa: E402


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    model_dir = link_models(tmp_path_factory.mktemp("models"))
    log_path = tmp_path_factory.mktemp("server") / "tensorport.log"
    try:
        srv = start_server(model_dir, log_path)
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def rest(server):
    with RestClient(server.rest_url) as client:
        yield client


@pytest.fixture(scope="session")
def grpc_client(server):
    with GrpcClient(server.grpc_target) as client:
        yield client


@pytest.fixture(params=["rest", "grpc"])
def client(request, rest, grpc_client):
    """Each test that takes `client` runs over both transports."""
    return rest if request.param == "rest" else grpc_client

