"""The real binary under SIGTERM, under load and with JSON logs. Each test starts its own
server (not the session one), since it is stopped, overloaded or configured differently.

- SIGTERM: readiness turns false first, the listeners close, every request in flight or
  queued when the signal came is answered, new connections are refused, exit code 0.
- A scrape taken while requests are being refused passes `promtool check metrics`.
- `--log-format json` writes one JSON object per line, with a request id on request lines.
- Each message of a `ModelStreamInfer` stream spends a token of the rate limit as a call does;
  a refused one is answered in the stream, which stays open.
"""

from __future__ import annotations

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
        assert checked.returncode == 0, checked.stdout + checked.stderr + "\n" + scrape.text
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
