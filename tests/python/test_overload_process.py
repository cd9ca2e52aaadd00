"""The real binary under SIGTERM, under load and with JSON logs. Each test starts its own
server (not the session one), since it is stopped, overloaded or configured differently.

- SIGTERM: readiness turns false first, the listeners close, every request in flight or
  queued when the signal came is answered, new connections are refused, exit code 0.
- SIGTERM with kept-alive connections (HTTP/1.1, and HTTP/2 to both ports): every request
  sent before the signal is answered, and so is a request that arrives on an open HTTP/1.1
  connection during the drain (with `Connection: close`).
- A scrape taken while requests are being refused passes `promtool check metrics` (its style
  rules aside for the peers' own names, `nv_*` and `:tensorflow:*`, which are theirs).
- `--log-format json` writes one JSON object per line, with a request id on request lines.
- Each message of a `ModelStreamInfer` stream spends a token of the rate limit as a call does;
  a refused one is answered in the stream, which stays open.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from h2_client import GRPC_HEADERS, GoneAway, H2Client, grpc_message, grpc_messages
from tensorport_server import server_binary
from tfs import REPO, TEST_MODELS

LISTENING = re.compile(r'listening grpc=(\S+) rest=(\S+)|"message":"listening","grpc":"([^"]+)","rest":"([^"]+)"')
# The ports are bound before the models load; the tests need the models.
SETTLED = re.compile(r'initial load settled|"message":"initial load settled"')
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# About 6 us per round: over a second per request on one core, several times longer than the
# steps that must happen while requests are in flight take on a loaded machine. The process
# test cannot hold a run at a gate as the in-process tests (tests/overload.rs) do.
SLOW_ROUNDS = 200_000


class Proc:
    def __init__(self, tmp: Path, *extra: str, env: dict | None = None):
        binary = server_binary()
        self.log_path = tmp / "server.log"
        cmd = [str(binary), "serve", "--model-dir", str(TEST_MODELS), "--host", "127.0.0.1",
               "--grpc-port", "0", "--rest-port", "0", *extra]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                            env={**os.environ, **(env or {})}, cwd=REPO)
        deadline = time.monotonic() + 60
        match = None
        settled = False
        while time.monotonic() < deadline and not (match and settled) and self.process.poll() is None:
            match = LISTENING.search(self.log())
            settled = bool(SETTLED.search(self.log()))
            time.sleep(0.05)
        match = match or LISTENING.search(self.log())
        if not (match and SETTLED.search(self.log())):
            self.kill()
            pytest.fail(f"server did not start:\n{self.log()}", pytrace=False)
        # Text logs fill groups 1 and 2, JSON logs 3 and 4.
        self.grpc_target = match.group(1) or match.group(3)
        self.rest_addr = match.group(2) or match.group(4)
        self.rest_url = f"http://{self.rest_addr}"

    def log(self) -> str:
        try:
            return ANSI.sub("", self.log_path.read_text(errors="replace"))
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def spin_inputs(rounds: int):
    x = grpcclient.InferInput("x", [1], "FP32")
    x.set_data_from_numpy(np.array([1.5], dtype=np.float32))
    r = grpcclient.InferInput("rounds", [1], "INT64")
    r.set_data_from_numpy(np.array([rounds], dtype=np.int64))
    return [x, r]


def spin_json(rounds: int) -> dict:
    return {"inputs": [
        {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.5]},
        {"name": "rounds", "shape": [1], "datatype": "INT64", "data": [rounds]},
    ]}


def in_flight(rest_url: str) -> int:
    text = requests.get(f"{rest_url}/metrics", timeout=5).text
    match = re.search(r"^tensorport_requests_in_flight (\d+)$", text, re.M)
    return int(match.group(1)) if match else 0


def refused(host_port: str) -> bool:
    host, port = host_port.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return False
    except OSError:
        return True


def test_sigterm_drains_requests_in_flight_refuses_new_ones_and_exits_0(tmp_path):
    server = Proc(tmp_path, "--shutdown-delay-ms", "3000", "--drain-secs", "60")
    try:
        client = grpcclient.InferenceServerClient(server.grpc_target)
        # Four requests: one runs, three wait in the model's queue (it runs one at a time).
        with ThreadPoolExecutor(max_workers=4) as pool:
            grpc_calls = [pool.submit(client.infer, "spin", spin_inputs(SLOW_ROUNDS), client_timeout=120)
                          for _ in range(2)]
            http_calls = [pool.submit(requests.post, f"{server.rest_url}/v2/models/spin/infer",
                                      json=spin_json(SLOW_ROUNDS), timeout=120) for _ in range(2)]
            deadline = time.monotonic() + 10
            while in_flight(server.rest_url) < 4:
                assert time.monotonic() < deadline, "requests never got in flight"
                time.sleep(0.01)

            server.process.send_signal(signal.SIGTERM)
            # The signal arrives asynchronously: the server says when it has turned readiness
            # false, and only then is the answer below defined.
            deadline = time.monotonic() + 10
            while "readiness is now false" not in server.log():
                assert time.monotonic() < deadline, f"SIGTERM never turned readiness false:\n{server.log()}"
                time.sleep(0.005)
            # Readiness turns false while the listener still accepts (the shutdown delay).
            ready = requests.get(f"{server.rest_url}/readyz", timeout=5)
            assert ready.status_code == 503 and ready.json() == {"ready": False}
            assert requests.get(f"{server.rest_url}/v2/health/ready", timeout=5).status_code == 503
            assert not client.is_server_ready()
            # Then the listeners close: new connections are refused.
            deadline = time.monotonic() + 10
            while not (refused(server.rest_addr) and refused(server.grpc_target)):
                assert time.monotonic() < deadline, "the listeners never closed"
                time.sleep(0.02)

            for call in grpc_calls:
                np.testing.assert_array_equal(call.result().as_numpy("y"), [1.5])
            for call in http_calls:
                response = call.result()
                assert response.status_code == 200, response.text
                assert response.json()["outputs"][0]["data"] == [1.5]
        client.close()
        assert server.process.wait(timeout=60) == 0
        log = server.log()
        assert "readiness is now false" in log and "drained" in log, log
    finally:
        server.kill()


ECHO_PATH = "/v2/models/echo_float32/infer"
ECHO_VALUES = [1.5, 2.5]
ECHO_JSON = json.dumps({"inputs": [
    {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": ECHO_VALUES}]}).encode()


def echo_grpc_body() -> bytes:
    request = service_pb2.ModelInferRequest(model_name="echo_float32")
    x = request.inputs.add()
    x.name, x.datatype = "x", "FP32"
    x.shape.extend([1, 2])
    request.raw_input_contents.append(np.array(ECHO_VALUES, dtype=np.float32).tobytes())
    return grpc_message(request.SerializeToString())


def echo_json_ok(status: int | None, body: bytes) -> bool:
    try:
        return status == 200 and json.loads(body)["outputs"][0]["data"] == ECHO_VALUES
    except (ValueError, KeyError, IndexError):
        return False


def echo_grpc_ok(answer) -> bool:
    if answer.status != 200 or answer.trailers.get("grpc-status") != "0":
        return False
    messages = grpc_messages(answer.body)
    if len(messages) != 1:
        return False
    response = service_pb2.ModelInferResponse.FromString(messages[0])
    return np.frombuffer(response.raw_output_contents[0], dtype=np.float32).tolist() == ECHO_VALUES


def h1_head(request_path: str, length: int, *extra: str) -> bytes:
    lines = [f"POST {request_path} HTTP/1.1", "host: tensorport", "content-type: application/json",
             f"content-length: {length}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_h1_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer with a content-length (what the server sends for these requests)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer's head: {data!r}")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside an answer's body")
        body += chunk
    return int(status_line.split()[1]), headers, body


class Signal:
    """SIGTERM, sent under a lock that clients take to ask whether it has been sent yet: a
    client that asks after its request's bytes are in the kernel, and hears no, sent them
    before the signal."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.lock = threading.Lock()
        self.sent = False

    def not_yet(self) -> bool:
        with self.lock:
            return not self.sent

    def send(self) -> None:
        with self.lock:
            self.sent = True
            self.process.send_signal(signal.SIGTERM)


def test_sigterm_answers_every_request_sent_on_kept_alive_connections(tmp_path):
    """Default flags. Kept-alive clients loop on HTTP/1.1 and on HTTP/2 (KServe REST and gRPC)
    while SIGTERM is sent. Every request whose bytes left the client before the signal must
    get a complete, valid answer, and the process must exit 0.

    What makes it deterministic: a request held open (its head read, its body not yet sent,
    so the server is surely serving it) keeps the drain going until the test lets it finish,
    which it does only once every client is done. So however late a client's request reaches
    the server, the drain is still on. Before the fix, idle HTTP/1.1 connections were closed
    the moment the drain began, and a request on its way on one of them was lost; here two
    idle connections send a request after the listeners have closed, and both must be
    answered, with `Connection: close`."""
    server = Proc(tmp_path)
    rest_host, rest_port = server.rest_addr.rsplit(":", 1)
    outcomes: list[tuple[str, bool, bool, str]] = []
    record = threading.Lock()
    warmed: list[threading.Event] = []
    sigterm = Signal(server.process)

    def http1_client(warmed_event: threading.Event) -> None:
        connection = http.client.HTTPConnection(rest_host, int(rest_port), timeout=60)
        answered = 0
        while True:
            try:
                connection.request("POST", ECHO_PATH, body=ECHO_JSON,
                                   headers={"content-type": "application/json"})
            except OSError:
                return  # not sent: the listener is closed
            sent_before = sigterm.not_yet()
            try:
                response = connection.getresponse()
                ok, detail = echo_json_ok(response.status, response.read()), f"status {response.status}"
            except (OSError, http.client.HTTPException) as err:
                ok, detail = False, repr(err)
            answered += ok
            with record:
                outcomes.append(("http/1.1", sent_before, ok, detail))
            if answered >= 3:
                warmed_event.set()
            if not sent_before:
                return

    def http2_client(warmed_event: threading.Event, label: str, address: str, path: str,
                     body: bytes, headers, valid) -> None:
        client = H2Client(address)
        answered = 0
        try:
            while True:
                try:
                    stream = client.send(path, body, headers)
                except (GoneAway, OSError):
                    return  # not sent: the server asked for no new streams
                sent_before = sigterm.not_yet()
                try:
                    answer = client.answer(stream)
                    ok, detail = (not answer.reset and valid(answer)), repr(answer)[:300]
                except Exception as err:  # noqa: BLE001 - any failure is the finding
                    ok, detail = False, repr(err)
                answered += ok
                with record:
                    outcomes.append((label, sent_before, ok, detail))
                if answered >= 3:
                    warmed_event.set()
                if not sent_before:
                    return
        finally:
            client.close()

    held = idle = None
    threads = []
    try:
        # The held request: head read (the server asks for the body), body withheld.
        held = socket.create_connection((rest_host, int(rest_port)), timeout=60)
        held.sendall(h1_head(ECHO_PATH, len(ECHO_JSON), "expect: 100-continue"))
        assert held.recv(65536).startswith(b"HTTP/1.1 100"), "the held request was not taken up"
        # Two kept-alive HTTP/1.1 connections, idle when the signal comes.
        idle = [socket.create_connection((rest_host, int(rest_port)), timeout=60) for _ in range(2)]
        for sock in idle:
            sock.sendall(h1_head(ECHO_PATH, len(ECHO_JSON)) + ECHO_JSON)
            status, _, body = read_h1_answer(sock)
            assert echo_json_ok(status, body)

        clients = [(http1_client, ())] * 4 + [
            (http2_client, ("h2 rest", server.rest_addr, ECHO_PATH, ECHO_JSON,
                            [("content-type", "application/json")],
                            lambda answer: echo_json_ok(answer.status, answer.body)))] * 2 + [
            (http2_client, ("h2 grpc", server.grpc_target,
                            "/inference.GRPCInferenceService/ModelInfer", echo_grpc_body(),
                            GRPC_HEADERS, echo_grpc_ok))] * 2
        for target, args in clients:
            event = threading.Event()
            warmed.append(event)
            threads.append(threading.Thread(target=target, args=(event, *args), daemon=True))
        for thread in threads:
            thread.start()
        for event in warmed:
            assert event.wait(timeout=60), f"a client never got going: {outcomes[-5:]}"

        sigterm.send()
        deadline = time.monotonic() + 30
        while not (refused(server.rest_addr) and refused(server.grpc_target)):
            assert time.monotonic() < deadline, f"the listeners never closed:\n{server.log()}"
            time.sleep(0.02)
        # The listeners are closed, so the drain has begun: a request on an idle kept-alive
        # connection is answered, and the connection closed after it.
        for sock in idle:
            sock.sendall(h1_head(ECHO_PATH, len(ECHO_JSON)) + ECHO_JSON)
            status, headers, body = read_h1_answer(sock)
            assert echo_json_ok(status, body), (status, body)
            assert headers.get("connection") == "close", headers
            assert sock.recv(65536) == b"", "the connection stayed open after Connection: close"

        for thread in threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), "a client never finished"
        held.sendall(ECHO_JSON)
        status, headers, body = read_h1_answer(held)
        assert echo_json_ok(status, body) and headers.get("connection") == "close", (status, headers)

        assert server.process.wait(timeout=60) == 0
        assert "drained" in server.log()
        lost = [outcome for outcome in outcomes if outcome[1] and not outcome[2]]
        assert not lost, f"requests sent before SIGTERM were lost: {lost}"
        for label in ("http/1.1", "h2 rest", "h2 grpc"):
            assert any(o[0] == label and o[1] for o in outcomes), label
    finally:
        for sock in [held, *(idle or [])]:
            if sock is not None:
                sock.close()
        server.kill()


def promtool() -> str:
    path = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not path:
        pytest.fail("promtool not found: `make tools` installs it (Debian package prometheus)",
                    pytrace=False)
    return path


def test_a_scrape_under_load_passes_promtool(tmp_path):
    server = Proc(tmp_path, "--max-concurrent-requests", "2", "--rate-limit-per-sec", "1000")
    stop = threading.Event()

    def hammer():
        session = requests.Session()
        while not stop.is_set():
            session.post(f"{server.rest_url}/v2/models/spin/infer", json=spin_json(2000), timeout=10)

    try:
        threads = [threading.Thread(target=hammer) for _ in range(6)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while True:
            scrape = requests.get(f"{server.rest_url}/metrics", timeout=5)
            refused = sum(int(n) for n in re.findall(
                r'^tensorport_refusals_total\{[^}]*reason="concurrency"[^}]*\} (\d+)$', scrape.text, re.M))
            answered = "\ntensorport_requests_total{" in scrape.text
            if refused > 0 and answered and in_flight(server.rest_url) > 0:
                break
            assert time.monotonic() < deadline, f"no refusals under load:\n{scrape.text}"
            time.sleep(0.05)
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
        checked = subprocess.run([promtool(), "check", "metrics"], input=scrape.text,
                                 capture_output=True, text=True, timeout=60)
        # 3 is style problems only, allowed for the peers' own names (Triton's counters carry
        # no _total, TF Serving's names hold colons); tensorport's names must be clean.
        problems = [p for p in (checked.stdout + checked.stderr).splitlines() if p.strip()]
        assert checked.returncode in (0, 3), checked.stdout + checked.stderr + "\n" + scrape.text
        assert all(p.startswith(("nv_", ":tensorflow:")) for p in problems), problems
        for name in ("tensorport_requests_total", "tensorport_request_duration_seconds_bucket",
                     "tensorport_queue_wait_seconds_bucket", "tensorport_inference_duration_seconds_bucket",
                     "tensorport_batch_size_rows_bucket", "tensorport_queue_depth_requests",
                     "tensorport_requests_in_flight", "tensorport_model_loads_total",
                     "tensorport_model_load_failures_total", "process_resident_memory_bytes",
                     "tensorport_shared_memory_mapped_bytes"):
            assert f"\n{name}" in scrape.text, name
    finally:
        stop.set()
        server.kill()


def test_json_logs_carry_request_ids(tmp_path):
    # TF_CPP_MIN_LOG_LEVEL as the README says to run a TensorFlow build with JSON logs: TensorFlow
    # logs one INFO line while its library starts, before the server can set it.
    server = Proc(tmp_path, "--log-format", "json",
                  env={"RUST_LOG": "info,tensorport::access=debug", "TF_CPP_MIN_LOG_LEVEL": "1"})
    try:
        response = requests.post(f"{server.rest_url}/v2/models/spin/infer", json=spin_json(1),
                                 headers={"x-request-id": "trace-7"}, timeout=10)
        assert response.status_code == 200
        assert response.headers["x-request-id"] == "trace-7"
        deadline = time.monotonic() + 5
        while "trace-7" not in server.log():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
    finally:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=30)
    lines = [json.loads(line) for line in server.log().splitlines() if line.strip()]
    answered = [line for line in lines if line.get("fields", {}).get("message") == "answered"]
    assert answered, lines
    line = answered[0]
    assert line["span"]["id"] == "trace-7" and line["span"]["protocol"] == "kserve-http"
    assert line["fields"]["model"] == "spin" and line["fields"]["outcome"] == "ok"
    loaded = [line for line in lines if line.get("fields", {}).get("message") == "available"]
    assert any(line["fields"].get("model") == "spin" for line in loaded)


def rate_refusals(rest_url: str, protocol: str) -> int:
    text = requests.get(f"{rest_url}/metrics", timeout=5).text
    return sum(int(n) for labels, n in re.findall(r"^tensorport_refusals_total\{([^}]*)\} (\d+)$", text, re.M)
               if 'reason="rate_limit"' in labels and f'protocol="{protocol}"' in labels)


def test_each_stream_message_spends_the_rate_limit_and_a_refusal_stays_in_the_stream(tmp_path):
    # Two tokens a second, a burst of two: 40 calls get 2 answers and 38 refusals, and so must
    # 40 messages of one stream.
    rate = 2
    server = Proc(tmp_path, "--rate-limit-per-sec", str(rate))
    client = grpcclient.InferenceServerClient(server.grpc_target)
    answers: queue.Queue = queue.Queue()
    try:
        started = time.monotonic()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for n in range(40):
            client.async_stream_infer("spin", spin_inputs(1), request_id=f"m{n}")
        got = [answers.get(timeout=60) for _ in range(40)]
        elapsed = time.monotonic() - started
        ok = [result.get_response().id for result, error in got if error is None]
        refused = [error.message() for _, error in got if error is not None]
        # Counts, not times: at most the burst, and what refilled while the test ran (the
        # stream's opening spent one token too), got through.
        allowed = rate + int(elapsed * rate) + 1
        assert len(ok) + len(refused) == 40
        assert 1 <= len(ok) <= allowed, (len(ok), elapsed)
        for message in refused:
            assert message.startswith("RESOURCE_EXHAUSTED: too many requests from this client"), message
        assert rate_refusals(server.rest_url, "kserve-grpc") == len(refused)

        # The stream is still open: once a token has refilled, a later message is answered.
        deadline = time.monotonic() + 60
        while True:
            client.async_stream_infer("spin", spin_inputs(1), request_id="later")
            result, error = answers.get(timeout=60)
            if error is None:
                assert result.get_response().id == "later"
                np.testing.assert_array_equal(result.as_numpy("y"), [1.5])
                break
            assert error.message().startswith("RESOURCE_EXHAUSTED"), error.message()
            assert time.monotonic() < deadline, "no token ever refilled"
            time.sleep(0.1)
    finally:
        client.stop_stream()
        client.close()
        server.kill()
