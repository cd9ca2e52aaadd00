"""Attacks on the shared-memory extension by a client on the same machine, against the real
binary: truncating a registered object while a request waits to use it, a sparse object on a
full tmpfs, a symbolic link in /dev/shm, a remote peer under `--shm local`, hostile region
names, and registering until limits or file descriptors run out.

After every attack the attacker has an error that says what was wrong, nothing of another
client's region leaked, and the server is alive and answers a normal request.

Objects are made with os calls directly (not tritonclient's helper) so that a test can place
them in another mount namespace's /dev/shm, truncate them, or replace them with links.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from kserve_util import TIMEOUT, metric_samples, metrics_text, unique
from tensorport_server import link_models, start_server

MODEL = "echo_float32"   # y = x, float32 [-1, -1]
BATCHED = "echo_batched"  # the same model, batching two requests, waiting for the second
ROW = np.arange(4, dtype=np.float32) + 0.5


# ---------------------------------------------------------------- helpers

class ShmObject:
    """A POSIX shared-memory object under `shm_dir` (default /dev/shm), mapped here."""

    def __init__(self, size: int, shm_dir: str = "/dev/shm", tag: str = "atk"):
        self.name = unique(f"tp_{tag}")
        self.key = "/" + self.name
        self.path = os.path.join(shm_dir, self.name)
        self.fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(self.fd, size)
        self.size = size

    def write(self, offset: int, data: bytes) -> None:
        os.pwrite(self.fd, data, offset)

    def read(self, offset: int, length: int) -> bytes:
        return os.pread(self.fd, length, offset)

    def truncate(self, size: int = 0) -> None:
        os.ftruncate(self.fd, size)

    def close(self) -> None:
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


@pytest.fixture
def objects():
    made: list[ShmObject] = []

    def make(size: int, **kw) -> ShmObject:
        obj = ShmObject(size, **kw)
        made.append(obj)
        return obj

    yield make
    for obj in made:
        obj.close()


def model_dir(tmp_path: Path) -> Path:
    """Every test model, plus `echo_batched`: echo_float32 batching two requests and waiting
    (ten minutes) for the second, so a request stays queued until the test sends another."""
    root = link_models(tmp_path / "models")
    batched = root / BATCHED
    batched.mkdir()
    (batched / "1").symlink_to((root / MODEL / "1").resolve(), target_is_directory=True)
    (batched / "config.toml").write_text(
        "[batching]\nmax_batch_size = 2\nmax_queue_delay_us = 600000000\n")
    return root


def serve(tmp_path: Path, *args: str, host: str = "127.0.0.1", prefix=None):
    (tmp_path / "models").mkdir()
    return start_server(model_dir(tmp_path), tmp_path / "tensorport.log", list(args),
                        host=host, prefix=prefix)


@pytest.fixture
def server(tmp_path):
    srv = serve(tmp_path)
    yield srv
    srv.stop()


def url(srv, host: str | None = None) -> str:
    if host is None:
        return srv.rest_url
    return f"http://{host}:{srv.rest_url.rsplit(':', 1)[1]}"


def grpc_target(srv, host: str = "127.0.0.1") -> str:
    return f"{host}:{srv.grpc_target.rsplit(':', 1)[1]}"


def register(base: str, name: str, key: str, byte_size: int, offset: int = 0):
    return requests.post(f"{base}/v2/systemsharedmemory/region/{name}/register",
                         json={"key": key, "offset": offset, "byte_size": byte_size},
                         timeout=TIMEOUT)


def shm_params(region: str, byte_size: int, offset: int = 0) -> dict:
    return {"shared_memory_region": region, "shared_memory_byte_size": byte_size,
            "shared_memory_offset": offset}


def infer_inline(base: str, model: str = MODEL, row=ROW, shm_output: dict | None = None):
    output = {"name": "y"}
    if shm_output:
        output["parameters"] = shm_output
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, len(row)],
                        "data": [float(v) for v in row]}],
            "outputs": [output]}
    return requests.post(f"{base}/v2/models/{model}/infer", json=body, timeout=TIMEOUT)


def infer_shm_input(base: str, region: str, model: str = MODEL, timeout=TIMEOUT):
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                        "parameters": shm_params(region, 16)}]}
    return requests.post(f"{base}/v2/models/{model}/infer", json=body, timeout=timeout)


def assert_serving(srv, base: str | None = None) -> None:
    """The process is alive and a normal request gets the right answer."""
    assert srv.process.poll() is None, f"server died ({srv.process.returncode})\n{srv.log()[-3000:]}"
    resp = infer_inline(base or srv.rest_url)
    assert resp.status_code == 200, resp.text
    assert resp.json()["outputs"][0]["data"] == [float(v) for v in ROW]


def assert_error(resp, status: int, *words: str) -> str:
    assert resp.status_code == status, (resp.status_code, resp.text)
    message = resp.json()["error"]
    for word in words:
        assert word in message, message
    return message


def queue_depth(base: str, model: str) -> float:
    samples = metric_samples(metrics_text(base), "tensorport_queue_depth_requests")
    return sum(v for labels, v in samples.items() if f'model="{model}"' in labels)


def runs_started(base: str, model: str) -> float:
    """Requests of `model` that left its queue to run (each observes its queue wait then)."""
    samples = metric_samples(metrics_text(base), "tensorport_queue_wait_seconds_count")
    return sum(v for labels, v in samples.items() if f'model="{model}"' in labels)


def wait_for(condition, what: str, limit_s: float = 60.0) -> None:
    """Polls a state of the server (not a time): fails only if it never comes."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"never saw: {what}"
        time.sleep(0.02)


# ---------------------------------------------------------------- 1. truncation

def test_truncated_before_the_request_is_refused(server, objects):
    obj = objects(4096)
    obj.write(0, ROW.tobytes())
    base = server.rest_url
    assert register(base, "victim", obj.key, 4096).status_code == 200
    obj.truncate(0)
    assert_error(infer_shm_input(base, "victim"), 400, "truncated")
    with grpcclient.InferenceServerClient(grpc_target(server)) as client:
        x = grpcclient.InferInput("x", [1, 4], "FP32")
        x.set_shared_memory("victim", 16)
        with pytest.raises(InferenceServerException) as err:
            client.infer(MODEL, [x])
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "truncated" in err.value.message()
    assert_serving(server)


def test_truncated_while_queued_fails_that_request_only(server, objects):
    """Batching on: the request passes its checks and waits in the queue for a second one;
    the owner truncates the object; the second request arrives and the batcher gathers both,
    touching the truncated pages. The first fails, the second gets its answer."""
    obj = objects(4096)
    obj.write(0, ROW.tobytes())
    base = server.rest_url
    assert register(base, "victim", obj.key, 4096).status_code == 200
    first: dict = {}
    waiter = threading.Thread(target=lambda: first.update(resp=infer_shm_input(
        base, "victim", model=BATCHED, timeout=120)))
    waiter.start()
    wait_for(lambda: queue_depth(base, BATCHED) == 1, "the shared-memory request queued")
    obj.truncate(0)
    other = infer_inline(base, model=BATCHED, row=ROW * 2)
    waiter.join(timeout=120)
    assert other.status_code == 200, other.text
    assert other.json()["outputs"][0]["data"] == [float(v) for v in ROW * 2]
    assert_error(first["resp"], 400, "victim", "truncated", "register it again")
    assert "faulted while a request used it" in server.log()
    # The region stays refused until registered again.
    obj.truncate(4096)
    obj.write(0, ROW.tobytes())
    assert_error(infer_shm_input(base, "victim"), 400, "register it again")
    requests.post(f"{base}/v2/systemsharedmemory/region/victim/unregister", timeout=TIMEOUT)
    assert register(base, "victim", obj.key, 4096).status_code == 200
    resp = infer_shm_input(base, "victim")
    assert resp.status_code == 200, resp.text
    assert resp.json()["outputs"][0]["data"] == [float(v) for v in ROW]
    assert_serving(server)


def spin_request(base: str, rounds: int, x: dict, timeout=120):
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4], **x},
                       {"name": "rounds", "datatype": "INT64", "shape": [1], "data": [rounds]}]}
    return requests.post(f"{base}/v2/models/spin/infer", json=body, timeout=timeout)


def test_truncated_while_queued_without_batching_fails_in_the_runtime(server, objects):
    """Batching off: `spin` runs one request at a time and reads `x` only after its loop. A
    holder request keeps the model busy; the victim, its input in shared memory, passes its
    checks and queues; the owner truncates the object; when the victim runs, ONNX Runtime
    reads the input in place, on its own thread, and faults."""
    obj = objects(4096)
    obj.write(0, ROW.tobytes())
    base = server.rest_url
    assert register(base, "victim", obj.key, 4096).status_code == 200
    holder: dict = {}
    victim: dict = {}
    hold = threading.Thread(target=lambda: holder.update(resp=spin_request(
        base, 300_000, {"data": [0.0] * 4})))
    started = runs_started(base, "spin")
    hold.start()
    wait_for(lambda: runs_started(base, "spin") > started, "the holder running")
    run = threading.Thread(target=lambda: victim.update(resp=spin_request(
        base, 1, {"parameters": shm_params("victim", 16)})))
    run.start()
    wait_for(lambda: queue_depth(base, "spin") == 1 or "resp" in victim,
             "the victim queued behind the holder")
    if "resp" in victim:
        # Only on a machine so slow that 300,000 rounds ended before one request queued.
        hold.join(timeout=120)
        pytest.skip("the holder finished before the victim queued; nothing to truncate under")
    obj.truncate(0)
    hold.join(timeout=120)
    run.join(timeout=120)
    assert holder["resp"].status_code == 200, holder["resp"].text
    assert_error(victim["resp"], 400, "victim", "truncated", "register it again")
    assert_serving(server)


# ---------------------------------------------------------------- 2. pages that cannot be backed

def small_tmpfs_prefix() -> list[str]:
    """Runs the server in its own mount namespace whose /dev/shm is a 4 MiB tmpfs."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs -o size=4m tmpfs /dev/shm && exec "$@"', "sh"]


def can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run([*small_tmpfs_prefix(), "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not can_mount_tmpfs(),
                    reason="needs a private mount namespace (root) for a small /dev/shm")
def test_sparse_output_region_on_a_full_tmpfs(tmp_path, objects):
    """A 1 GiB sparse object on a 4 MiB tmpfs that is then filled up: its size says 1 GiB,
    but writing an output at 512 MiB needs a page tmpfs cannot give. The runtime writes the
    output there in place, on its own thread. (A request with shared-memory outputs always
    runs alone, so batching does not change this path; a fault while a batch is gathered is
    the truncation test above.)"""
    srv = serve(tmp_path, prefix=small_tmpfs_prefix())
    try:
        shm_dir = f"/proc/{srv.process.pid}/root/dev/shm"
        base = srv.rest_url
        sparse = objects(1 << 30, shm_dir=shm_dir, tag="sparse")
        neighbour = objects(4096, shm_dir=shm_dir, tag="ok")
        neighbour.write(0, bytes(4096))  # its page is allocated before the tmpfs fills up
        assert register(base, "sparse", sparse.key, 1 << 30).status_code == 200
        assert register(base, "neighbour", neighbour.key, 4096).status_code == 200
        # Take every page left on that tmpfs.
        filler = os.open(os.path.join(shm_dir, unique("tp_filler")), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            with pytest.raises(OSError):
                while True:
                    os.write(filler, b"\xff" * 65536)
            resp = infer_inline(base, shm_output=shm_params("sparse", 16, offset=512 << 20))
            assert_error(resp, 400, "sparse", "could not be allocated")
        finally:
            os.close(filler)
        # The neighbour region, on the same full tmpfs but with its page allocated, works.
        resp = infer_inline(base, shm_output=shm_params("neighbour", 16))
        assert resp.status_code == 200, resp.text
        assert neighbour.read(0, 16) == ROW.tobytes()
        assert_serving(srv)
    finally:
        srv.stop()


# ---------------------------------------------------------------- 3. links

def test_symlink_in_dev_shm_is_not_followed(server, tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"top secret bytes" * 256)
    link = Path("/dev/shm") / unique("tp_link")
    link.symlink_to(secret)
    try:
        base = server.rest_url
        resp = register(base, "stolen", "/" + link.name, 4096)
        assert_error(resp, 400, "symbolic link")
        assert "top secret" not in resp.text
        assert_error(infer_inline(base, shm_output=shm_params("stolen", 16)), 400,
                     "not registered")
        assert secret.read_bytes() == b"top secret bytes" * 256
        with grpcclient.InferenceServerClient(grpc_target(server)) as client:
            with pytest.raises(InferenceServerException) as err:
                client.register_system_shared_memory("stolen", "/" + link.name, 4096)
            assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert "symbolic link" in err.value.message()
    finally:
        link.unlink()
    assert_serving(server)


# ---------------------------------------------------------------- 4. remote peers, 8. mapped loopback

def non_loopback_address() -> str | None:
    """An address of this machine that is not loopback (connecting to it from here makes
    this process a non-loopback peer), if the machine has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent; picks the outgoing address
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.mark.skipif(non_loopback_address() is None, reason="no non-loopback IPv4 address")
def test_remote_peer_sees_nothing_under_shm_local(tmp_path, objects):
    remote = non_loopback_address()
    srv = serve(tmp_path, host="0.0.0.0")
    try:
        local_url, remote_url = url(srv, "127.0.0.1"), url(srv, remote)
        obj = objects(4096)
        obj.write(0, ROW.tobytes())
        assert register(local_url, "local_region", obj.key, 4096).status_code == 200

        # Register: refused.
        assert_error(register(remote_url, "mine", obj.key, 4096), 403, "--shm local", remote)
        # Status: nothing, and no key.
        resp = requests.get(f"{remote_url}/v2/systemsharedmemory/status", timeout=TIMEOUT)
        assert resp.status_code == 200 and resp.json() == [], resp.text
        resp = requests.get(f"{remote_url}/v2/systemsharedmemory/region/local_region/status",
                            timeout=TIMEOUT)
        assert resp.status_code == 404 and obj.key not in resp.text, resp.text
        # Read it through an inference, or overwrite it: not registered, as far as it knows.
        assert_error(infer_shm_input(remote_url, "local_region"), 400, "not registered")
        obj.write(0, ROW.tobytes())
        resp = infer_inline(remote_url, row=ROW * 0 - 7, shm_output=shm_params("local_region", 16))
        assert_error(resp, 400, "not registered")
        assert obj.read(0, 16) == ROW.tobytes()
        # Unregister one or all: the local client's region stays.
        requests.post(f"{remote_url}/v2/systemsharedmemory/region/local_region/unregister",
                      timeout=TIMEOUT)
        requests.post(f"{remote_url}/v2/systemsharedmemory/unregister", timeout=TIMEOUT)
        with grpcclient.InferenceServerClient(grpc_target(srv, remote)) as client:
            assert client.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}
            client.unregister_system_shared_memory("local_region")
            client.unregister_system_shared_memory()
            x = grpcclient.InferInput("x", [1, 4], "FP32")
            x.set_shared_memory("local_region", 16)
            with pytest.raises(InferenceServerException) as err:
                client.infer(MODEL, [x])
            assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
        status = requests.get(f"{local_url}/v2/systemsharedmemory/status", timeout=TIMEOUT).json()
        assert [r["name"] for r in status] == ["local_region"]
        resp = infer_shm_input(local_url, "local_region")
        assert resp.status_code == 200, resp.text
        assert_serving(srv, local_url)
        assert_serving(srv, remote_url)
    finally:
        srv.stop()


def dual_stack() -> bool:
    """Whether a socket bound to :: also takes IPv4 connections here."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            probe.bind(("::", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not dual_stack(), reason="no dual-stack IPv6 socket on this machine")
def test_ipv4_mapped_loopback_is_local(tmp_path, objects):
    """A dual-stack listener sees an IPv4 client as ::ffff:127.0.0.1: still this machine."""
    srv = serve(tmp_path, host="::")
    try:
        base = url(srv, "127.0.0.1")
        obj = objects(4096)
        obj.write(0, ROW.tobytes())
        assert register(base, "mapped", obj.key, 4096).status_code == 200
        resp = infer_shm_input(base, "mapped")
        assert resp.status_code == 200, resp.text
        with grpcclient.InferenceServerClient(grpc_target(srv)) as client:
            regions = client.get_system_shared_memory_status(as_json=True)["regions"]
            assert list(regions) == ["mapped"]
        assert_serving(srv, base)
    finally:
        srv.stop()


# ---------------------------------------------------------------- 8. names

def test_hostile_region_names_are_refused(server, objects):
    obj = objects(4096)
    base = server.rest_url
    long_name = "n" * 10_000
    assert_error(register(base, long_name, obj.key, 4096), 400, "longer than 255")
    resp = register(base, "nul%00name", obj.key, 4096)
    assert_error(resp, 400, "control character")
    with grpcclient.InferenceServerClient(grpc_target(server)) as client:
        for name, why in [("", "empty"), (long_name, "longer than 255"),
                          ("a\x00b", "control character")]:
            with pytest.raises(InferenceServerException) as err:
                client.register_system_shared_memory(name, obj.key, 4096)
            assert err.value.status() == "StatusCode.INVALID_ARGUMENT", name[:20]
            assert why in err.value.message()
            assert long_name not in err.value.message()
        assert client.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}
    assert_serving(server)


# ---------------------------------------------------------------- 5. limits

def test_region_count_and_byte_limits(tmp_path, objects):
    srv = serve(tmp_path, "--shm-max-regions", "3", "--shm-max-bytes", "12288")
    try:
        base = srv.rest_url
        obj = objects(8192)
        assert_error(register(base, "huge", obj.key, 8192 + 4096), 400, "past the end")
        for i in range(3):
            assert register(base, f"r{i}", obj.key, 4096).status_code == 200
        assert_error(register(base, "r3", obj.key, 16), 429, "--shm-max-regions")
        requests.post(f"{base}/v2/systemsharedmemory/region/r0/unregister", timeout=TIMEOUT)
        assert_error(register(base, "r3", obj.key, 8192), 429, "--shm-max-bytes")
        assert register(base, "r3", obj.key, 4096).status_code == 200
        assert_serving(srv)
    finally:
        srv.stop()


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
def test_registration_never_takes_the_descriptor_reserve(tmp_path, objects):
    """Under a 400-descriptor hard limit (soft 300, which the server raises), registering
    stops with a clear error while at least 256 descriptors stay free, and new connections
    are still accepted."""
    srv = serve(tmp_path, "--shm-max-regions", "2000",
                prefix=["prlimit", "--nofile=300:400", "--"])
    try:
        limits = Path(f"/proc/{srv.process.pid}/limits").read_text()
        line = next(l for l in limits.splitlines() if l.startswith("Max open files"))
        assert line.split()[3:5] == ["400", "400"], line
        base = srv.rest_url
        obj = objects(4096)
        registered = 0
        with requests.Session() as session:
            while True:
                resp = session.post(f"{base}/v2/systemsharedmemory/region/r{registered}/register",
                                    json={"key": obj.key, "offset": 0, "byte_size": 4096},
                                    timeout=TIMEOUT)
                if resp.status_code != 200:
                    break
                registered += 1
                assert registered < 400, "registration never stopped"
        assert_error(resp, 429, "file descriptor", "unregister")
        assert 0 < registered
        assert open_descriptors(srv.process.pid) <= 400 - 256
        # Many new connections at once still get answers.
        clients = [requests.Session() for _ in range(32)]
        try:
            for client in clients:
                assert client.get(f"{base}/v2/health/ready", timeout=TIMEOUT).status_code == 200
        finally:
            for client in clients:
                client.close()
        assert_serving(srv)
        resp = requests.post(f"{base}/v2/systemsharedmemory/unregister", timeout=TIMEOUT)
        assert resp.status_code == 200
        assert requests.get(f"{base}/v2/systemsharedmemory/status", timeout=TIMEOUT).json() == []
    finally:
        srv.stop()
