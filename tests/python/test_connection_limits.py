"""More connections than the server has descriptors for, against the real binary started with
a low descriptor limit: the default connection cap keeps it serving, the metrics port stays
reachable, and when the limit is hit anyway (a cap set above it) accepting pauses and resumes
instead of failing for good. And more clients trickling a body than there are request slots,
with the other clients still served."""

from __future__ import annotations

import re
import shutil
import socket
import time

import grpc
import pytest
import requests
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from tensorport_server import EXAMPLE_MODELS, TEST_MODELS, ServerStartError, link_models, start_server

LIMIT = 256
# More than the limit, as in an attack with idle connections.
CONNECTIONS = 2 * LIMIT
# The limit is lowered by prlimit, which execs the server, and not by a `preexec_fn`: that
# makes Python fork (rather than vfork) and run code in the child, where grpcio's fork
# handlers restart its event engine's threads; the child's closing of inherited descriptors
# before exec then pulls the poller's epoll descriptor from under them, and gRPC aborts the
# child ("Epoll1Poller ... encountered epoll_wait error: Bad file descriptor") before the
# server ever runs: about one start in twenty on this test session's process.
LOW_DESCRIPTOR_LIMIT = ["prlimit", f"--nofile={LIMIT}:{LIMIT}", "--"]


def serve(tmp_path, extra, test_models=()):
    """The example models, and `test_models` from tests/models, under the low limit."""
    if shutil.which("prlimit") is None:
        pytest.skip("needs prlimit (util-linux)")
    (tmp_path / "models").mkdir()
    model_dir = link_models(tmp_path / "models", bases=(EXAMPLE_MODELS,))
    for name in test_models:
        (model_dir / name).symlink_to(TEST_MODELS / name, target_is_directory=True)
    # Idle connections must stay open for the length of the test.
    args = ["--header-read-timeout-secs", "600", "--idle-timeout-secs", "600", *extra]
    try:
        return start_server(model_dir, tmp_path / "tensorport.log", args,
                            prefix=LOW_DESCRIPTOR_LIMIT)
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


def test_tensorflow_models_answer_while_descriptors_run_out_and_after(tmp_path):
    """TensorFlow's runtime needs no descriptor of its own to run a model: a SavedModel whose
    first run comes while the connections hold every descriptor (tf_echo has no warm-up
    file) answers on a connection opened before the flood, and so does one warmed at load;
    the process lives on, and both answer new connections once the flood is gone."""
    srv = serve(tmp_path, ["--max-connections", "100000"], test_models=("tf_echo", "ranker_tf"))
    echo = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1.5, -2.0]}],
            "parameters": {"signature_name": "echo_float32"}}
    features = [0.25] * 16
    ranker = {"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 16],
                          "data": features}]}

    def infer(session: requests.Session, model: str, body: dict) -> list:
        answer = session.post(f"{srv.rest_url}/v2/models/{model}/infer", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()["outputs"][0]["data"]

    try:
        with requests.Session() as before:
            # Opened (and kept alive) before the flood takes the descriptors.
            assert before.get(f"{srv.rest_url}/v2/health/live", timeout=30).status_code == 200
            sockets = flood(srv)
            try:
                wait_for_log(srv, "cannot accept connections; pausing")
                assert infer(before, "tf_echo", echo) == [1.5, -2.0]
                during = infer(before, "ranker_tf", ranker)
                assert srv.process.poll() is None
            finally:
                close_all(sockets)
        with requests.Session() as after:
            assert infer(after, "tf_echo", echo) == [1.5, -2.0]
            assert infer(after, "ranker_tf", ranker) == during
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
