"""More connections than the server has descriptors for, against the real binary started with
a low descriptor limit: the default connection cap keeps it serving, the metrics port stays
reachable, and when the limit is hit anyway (a cap set above it) accepting pauses and resumes
instead of failing for good. And more clients trickling a body than there are request slots,
with the other clients still served."""

from __future__ import annotations

import re
import resource
import socket
import time

import grpc
import pytest
import requests
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from tensorport_server import EXAMPLE_MODELS, ServerStartError, link_models, start_server

LIMIT = 256
# More than the limit, as in an attack with idle connections.
CONNECTIONS = 2 * LIMIT


def low_descriptor_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def serve(tmp_path, extra):
    (tmp_path / "models").mkdir()
    model_dir = link_models(tmp_path / "models", bases=(EXAMPLE_MODELS,))
    # Idle connections must stay open for the length of the test.
    args = ["--header-read-timeout-secs", "600", "--idle-timeout-secs", "600", *extra]
    try:
        return start_server(model_dir, tmp_path / "tensorport.log", args,
                            preexec_fn=low_descriptor_limit)
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)


def flood(srv) -> list[socket.socket]:
    """Starts CONNECTIONS connections to both ports and sends nothing on them. The connects
    are not waited for: beyond the listen backlog the kernel drops the handshakes, which the
    client retries, as a real flood's would be."""
    targets = [srv.rest_url.removeprefix("http://"), srv.grpc_target]
    sockets = []
    for i in range(CONNECTIONS):
        host, port = targets[i % 2].rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((host, int(port)))
        sockets.append(s)
    return sockets


def wait_for_log(srv, text: str) -> None:
    deadline = time.monotonic() + 60
    while text not in srv.log():
        assert time.monotonic() < deadline, f"the server never logged {text!r}:\n{srv.log()}"
        time.sleep(0.05)


def close_all(sockets: list[socket.socket]) -> None:
    for s in sockets:
        s.close()


def test_the_default_cap_leaves_descriptors_free_and_the_metrics_port_reachable(tmp_path):
    srv = serve(tmp_path, ["--metrics-port", "0"])
    try:
        log = srv.log()
        assert "max_connections=128" in log, log
        metrics = re.search(r"metrics=(\S+)", log).group(1)
        sockets = flood(srv)
        try:
            # The probes and the scraper get through on their own port.
            assert requests.get(f"http://{metrics}/v2/health/live", timeout=30).status_code == 200
            assert requests.get(f"http://{metrics}/metrics", timeout=30).status_code == 200
            # A new client on the main ports waits for a connection to close.
            with pytest.raises(requests.exceptions.Timeout):
                requests.get(f"{srv.rest_url}/v2/health/live", timeout=0.5)
        finally:
            close_all(sockets)
        # Once they close, it is served, and nothing ran out of descriptors on the way.
        assert requests.get(f"{srv.rest_url}/v2/models/ranker", timeout=30).status_code == 200
        assert srv.process.poll() is None
        assert "cannot accept connections" not in srv.log()
    finally:
        srv.stop()


def test_running_out_of_descriptors_pauses_accepting_and_recovers(tmp_path):
    srv = serve(tmp_path, ["--max-connections", "100000"])
    try:
        sockets = flood(srv)
        try:
            wait_for_log(srv, "cannot accept connections; pausing")
            with pytest.raises(requests.exceptions.RequestException):
                requests.get(f"{srv.rest_url}/v2/health/live", timeout=0.5)
        finally:
            close_all(sockets)
        # The accept loop paused on EMFILE rather than spinning, and came back.
        assert requests.get(f"{srv.rest_url}/v2/models/ranker", timeout=30).status_code == 200
        assert srv.process.poll() is None
    finally:
        srv.stop()


def test_520_trickling_bodies_leave_both_ports_serving(tmp_path):
    """The attack as reported: more clients trickling a body than --max-concurrent-requests
    (512). They hold connections, not request slots, and are cut off after the timeout."""
    (tmp_path / "models").mkdir()
    model_dir = link_models(tmp_path / "models", bases=(EXAMPLE_MODELS,))
    try:
        srv = start_server(model_dir, tmp_path / "tensorport.log",
                           ["--body-read-timeout-secs", "2"])
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)
    try:
        host, port = srv.rest_url.removeprefix("http://").rsplit(":", 1)
        tricklers = []
        for _ in range(520):
            conn = socket.create_connection((host, int(port)), timeout=60)
            conn.sendall(b"POST /v2/models/ranker/infer HTTP/1.1\r\nhost: x\r\n"
                         b"content-type: application/json\r\ncontent-length: 1000\r\n"
                         b"expect: 100-continue\r\n\r\n")
            # 100 Continue: the server is reading this body now.
            assert conn.recv(1024).startswith(b"HTTP/1.1 100"), "no 100 Continue"
            conn.sendall(b"{")
            tricklers.append(conn)

        assert requests.get(f"{srv.rest_url}/v2/models/ranker", timeout=30).status_code == 200
        with grpc.insecure_channel(srv.grpc_target) as channel:
            status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
                get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "ranker"}),
                timeout=30)
            assert status.model_version_status

        for conn in tricklers:
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
            conn.close()
        assert srv.process.poll() is None
    finally:
        srv.stop()
