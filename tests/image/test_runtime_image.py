"""The runtime image, run the way deploy/k8s/deployment.yaml runs it: its arguments and
environment, a read-only root file system, no capabilities, no privilege escalation, the model
repository mounted read-only, and a second container sharing the server's /dev/shm and loopback
as a sidecar in the pod does. `make image-check` (scripts/image_check.sh) builds the images and
sets TENSORPORT_IMAGE, TENSORPORT_CLIENT_IMAGE and TENSORPORT_CLIENT_SITE_PACKAGES; without them
this module is skipped.

The tests run in file order against one container: who it runs as, liveness before the models
and readiness after them, an inference over HTTP and one over gRPC, the image's HEALTHCHECK, the
shared-memory client, and the SIGTERM drain that stops it; then the README's `docker run`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import requests
import tritonclient.grpc as grpcclient
import yaml

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("TENSORPORT_IMAGE", "")
CLIENT_IMAGE = os.environ.get("TENSORPORT_CLIENT_IMAGE", "")
CLIENT_SITE_PACKAGES = os.environ.get("TENSORPORT_CLIENT_SITE_PACKAGES", "")
DOCKER = [*os.environ.get("DOCKER_SUDO", "").split(), os.environ.get("DOCKER", "docker")]
TIMEOUT_S = 120
MODELS = ["ranker", "two_tower", "multi_dtype"]
# A copy of the ranker whose batches wait 10 minutes for company that never comes: a request to
# it is still queued when SIGTERM arrives, far longer than the Deployment's --drain-secs (20 s)
# and grace period; it is answered, and the server exits 0, only because the drain runs what
# the batch queues hold at once.
QUEUED_MODEL = "ranker_queued"
QUEUED_CONFIG = "[batching]\nmax_batch_size = 8\nmax_queue_delay_us = 600000000\n"
FEATURES = (np.arange(3 * 16, dtype=np.float32).reshape(3, 16) - 20.0) / 9.0

pytestmark = pytest.mark.skipif(not (IMAGE and CLIENT_IMAGE and CLIENT_SITE_PACKAGES),
                                reason="`make image-check` builds the images and runs these tests")


def docker(*args: str, check: bool = True, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    result = subprocess.run([*DOCKER, *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        pytest.fail(f"docker {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


def inspect(container: str, template: str) -> str:
    return docker("inspect", "-f", template, container).stdout.strip()


def deployment() -> dict:
    """The Deployment's pod spec, whose settings the container is run with."""
    return yaml.safe_load((REPO / "deploy" / "k8s" / "deployment.yaml").read_text())["spec"]["template"]["spec"]


def reference(features: np.ndarray) -> np.ndarray:
    """The ranker's newest version run by onnxruntime on this machine."""
    session = onnxruntime.InferenceSession(str(REPO / "examples" / "models" / "ranker" / "2" / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    return session.run(["score"], {"features": features})[0]


class Server:
    def __init__(self, name: str):
        self.name = name
        self.rest = f"http://{self._published(8501)}"
        self.grpc = self._published(8500)

    def _published(self, port: int) -> str:
        return docker("port", self.name, f"{port}/tcp").stdout.splitlines()[0].strip()

    def logs(self) -> str:
        result = docker("logs", self.name, check=False)
        return result.stdout + result.stderr

    def get(self, path: str) -> requests.Response | None:
        try:
            return requests.get(f"{self.rest}{path}", timeout=5)
        except requests.ConnectionError:
            return None

    def answering(self, path: str, status: int) -> requests.Response | None:
        """The answer to GET `path` when it has this status, else None."""
        response = self.get(path)
        return response if response is not None and response.status_code == status else None

    def wait_for(self, what: str, condition, timeout: float = TIMEOUT_S):
        """Polls `condition` until it returns something true; fails with the server's log."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not within {timeout} s\n--- container log ---\n{self.logs()}")
            time.sleep(0.1)


@pytest.fixture(scope="module")
def folders():
    """An empty model repository to mount, and the models to move into it later."""
    root = Path(tempfile.mkdtemp(prefix="tensorport-image-check-"))
    models, staging = root / "models", root / "staging"
    models.mkdir()
    for model in MODELS:
        shutil.copytree(REPO / "examples" / "models" / model, staging / model)
    shutil.copytree(REPO / "examples" / "models" / "ranker", staging / QUEUED_MODEL)
    (staging / QUEUED_MODEL / "config.toml").write_text(QUEUED_CONFIG)
    # The server runs as the image's user, not as the owner of these files.
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield models, staging
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def server(folders):
    models, _ = folders
    pod = deployment()
    container = pod["containers"][0]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"], security
    assert security["capabilities"]["drop"] == ["ALL"], security
    environment = [f"--env={e['name']}={e['value']}" for e in container["env"]]
    name = f"tensorport-image-check-{os.getpid()}"
    docker("run", "--detach", f"--name={name}", "--read-only", "--cap-drop=ALL",
           "--security-opt=no-new-privileges", "--ipc=shareable", "--shm-size=256m",
           "--publish=127.0.0.1::8500", "--publish=127.0.0.1::8501",
           f"--volume={models}:/models:ro", *environment, IMAGE, *container["args"],
           # Every request through its model's queue (a fast model's could skip an idle one).
           "--inline-run-max-us=0")
    try:
        if inspect(name, "{{.State.Running}}") != "true":
            pytest.fail(f"the container stopped at once:\n{docker('logs', name, check=False).stderr}")
        yield Server(name)
    finally:
        docker("rm", "--force", name, check=False)


def test_the_server_runs_as_the_non_root_user_the_pod_expects(server):
    pod = deployment()["securityContext"]
    assert inspect(server.name, "{{.Config.User}}") == f"{pod['runAsUser']}:{pod['runAsGroup']}"
    pid = inspect(server.name, "{{.State.Pid}}")
    assert pid not in ("", "0"), f"the container is not running:\n{server.logs()}"
    status = Path(f"/proc/{pid}/status").read_text()
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "tensorport", status
    uids = re.search(r"^Uid:\s+(.*)$", status, re.MULTILINE).group(1).split()
    gids = re.search(r"^Gid:\s+(.*)$", status, re.MULTILINE).group(1).split()
    assert uids == [str(pod["runAsUser"])] * 4, f"uids (real, effective, saved, fs): {uids}"
    assert gids == [str(pod["runAsGroup"])] * 4, f"gids (real, effective, saved, fs): {gids}"
    capabilities = re.search(r"^CapEff:\s+(\S+)$", status, re.MULTILINE).group(1)
    assert int(capabilities, 16) == 0, f"effective capabilities {capabilities}"


def test_live_at_once_and_ready_once_the_models_load(server, folders):
    models, staging = folders
    live = server.wait_for("/livez answering 200", lambda: server.answering("/livez", 200))
    assert live.json() == {"live": True}
    ready = server.get("/readyz")
    assert ready is not None and ready.status_code == 503, "ready with an empty model repository"
    assert ready.json()["ready"] is False
    # Each model appears whole (a rename), as a volume's contents would.
    for model in [*MODELS, QUEUED_MODEL]:
        os.rename(staging / model, models / model)
    ready = server.wait_for("/readyz answering 200 once the models are there",
                            lambda: server.answering("/readyz", 200))
    assert ready.json() == {"ready": True}
    for model in [*MODELS, QUEUED_MODEL]:
        server.wait_for(f"{model} ready", lambda m=model: server.answering(f"/v2/models/{m}/ready", 200))


def test_an_inference_over_http(server):
    body = json.dumps({"inputs": [{"name": "features", "shape": list(FEATURES.shape), "datatype": "FP32",
                                   "data": FEATURES.ravel().tolist()}]})
    result = subprocess.run(["curl", "-sS", "--fail-with-body", "-H", "content-type: application/json",
                             "--data-binary", body, f"{server.rest}/v2/models/ranker/infer"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    answer = json.loads(result.stdout)
    (score,) = answer["outputs"]
    assert (score["name"], score["datatype"], score["shape"]) == ("score", "FP32", [3, 1]), answer
    np.testing.assert_allclose(np.array(score["data"], dtype=np.float32).reshape(3, 1), reference(FEATURES),
                               rtol=1e-5, atol=1e-6)


def test_an_inference_over_grpc(server):
    client = grpcclient.InferenceServerClient(server.grpc)
    features = grpcclient.InferInput("features", list(FEATURES.shape), "FP32")
    features.set_data_from_numpy(FEATURES)
    result = client.infer("ranker", [features], client_timeout=60)
    np.testing.assert_allclose(result.as_numpy("score"), reference(FEATURES), rtol=1e-5, atol=1e-6)
    client.close()


def test_the_image_healthcheck_turns_healthy(server):
    # The HEALTHCHECK runs curl in the container on its own schedule (every 10 s).
    server.wait_for("docker's health status 'healthy'",
                    lambda: inspect(server.name, "{{.State.Health.Status}}") == "healthy")


def test_a_shared_memory_client_in_a_second_container(server):
    """The client shares the server container's IPC namespace (its /dev/shm, as the pod's
    memory-backed emptyDir is shared) and network namespace (the server admits shared-memory
    registration from loopback only), and runs as the pod's user."""
    pod = deployment()["securityContext"]
    common = ["run", "--rm", f"--ipc=container:{server.name}", f"--network=container:{server.name}",
              f"--user={pod['runAsUser']}:{pod['runAsGroup']}", "--read-only",
              f"--volume={CLIENT_SITE_PACKAGES}:/site-packages:ro",
              f"--volume={REPO / 'tests' / 'image' / 'shm_client.py'}:/check/shm_client.py:ro",
              "--env=PYTHONPATH=/site-packages", "--env=PYTHONDONTWRITEBYTECODE=1", CLIENT_IMAGE, "python3"]
    version = docker(*common, "-c", "import sys; print(*sys.version_info[:2])").stdout.split()
    assert version == [str(v) for v in sys.version_info[:2]], (
        f"the client image's python3 is {'.'.join(version)}; the mounted packages are for {sys.version}")
    result = docker(*common, "/check/shm_client.py", "127.0.0.1:8501", check=False)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n--- server log ---\n{server.logs()}"
    scores = json.loads(result.stdout.splitlines()[-1])
    np.testing.assert_allclose(np.array(scores["shm"], dtype=np.float32).reshape(4, 1),
                               reference((np.arange(4 * 16, dtype=np.float32).reshape(4, 16) - 30.0) / 11.0),
                               rtol=1e-5, atol=1e-6)
    left = docker("exec", server.name, "ls", "-A", "/dev/shm").stdout.split()
    assert not [n for n in left if n.startswith("image_check_")], f"objects left in /dev/shm: {left}"


def test_sigterm_drains_a_request_in_flight_and_exits_0_within_the_grace_period(server):
    pod = deployment()
    container = pod["containers"][0]
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep", pre_stop
    # What is left of the pod's grace period once preStop has run is what the server gets.
    grace_s = pod["terminationGracePeriodSeconds"] - int(pre_stop[1])
    answer: dict = {}

    def queued_request():
        try:
            answer["response"] = requests.post(f"{server.rest}/v2/models/{QUEUED_MODEL}/infer", json={
                "inputs": [{"name": "features", "shape": list(FEATURES.shape), "datatype": "FP32",
                            "data": FEATURES.ravel().tolist()}]}, timeout=grace_s + TIMEOUT_S)
        except requests.RequestException as e:
            answer["error"] = e

    request = threading.Thread(target=queued_request)
    request.start()
    queued = re.compile(rf'^tensorport_queue_depth_requests\{{model="{QUEUED_MODEL}",version="2"\}} 1$', re.MULTILINE)
    server.wait_for("the request in the queue (tensorport_queue_depth_requests 1)",
                    lambda: (r := server.answering("/metrics", 200)) and queued.search(r.text))
    assert not answer, f"the queued request was answered before SIGTERM: {answer}"
    # docker stop: SIGTERM, then SIGKILL (exit code 137) if the process is still there when the
    # grace period ends, as the kubelet does.
    stop = subprocess.Popen([*DOCKER, "stop", f"--time={grace_s}", server.name], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        server.wait_for("the drain to begin", lambda: "draining requests in flight" in server.logs())
    finally:
        _, stop_err = stop.communicate(timeout=grace_s + TIMEOUT_S)
    assert stop.returncode == 0, stop_err
    request.join(TIMEOUT_S)
    assert not request.is_alive(), "the request in flight got no answer"
    assert "error" not in answer, f"the request in flight failed: {answer.get('error')}\n{server.logs()}"
    response = answer["response"]
    assert response.status_code == 200, f"{response.status_code} {response.text}\n{server.logs()}"
    (score,) = response.json()["outputs"]
    np.testing.assert_allclose(np.array(score["data"], dtype=np.float32).reshape(3, 1), reference(FEATURES),
                               rtol=1e-5, atol=1e-6)
    exit_code = inspect(server.name, "{{.State.ExitCode}}")
    assert exit_code == "0", f"exit code {exit_code} (137: killed after {grace_s} s)\n{server.logs()}"
    assert "drained" in server.logs(), server.logs()


def test_the_readmes_docker_run_serves_the_example_models():
    """The README's `docker run`: no arguments (the image's defaults), examples/models mounted."""
    name = f"tensorport-image-check-readme-{os.getpid()}"
    docker("run", "--detach", f"--name={name}", "--publish=127.0.0.1::8500", "--publish=127.0.0.1::8501",
           f"--volume={REPO / 'examples' / 'models'}:/models:ro", IMAGE)
    try:
        if inspect(name, "{{.State.Running}}") != "true":
            pytest.fail(f"the container stopped at once:\n{docker('logs', name, check=False).stderr}")
        server = Server(name)
        server.wait_for("/readyz answering 200", lambda: server.answering("/readyz", 200))
        predict = requests.post(f"{server.rest}/v1/models/ranker:predict",
                                json={"instances": FEATURES.tolist()}, timeout=60)
        assert predict.status_code == 200, predict.text
        np.testing.assert_allclose(np.array(predict.json()["predictions"], dtype=np.float32), reference(FEATURES),
                                   rtol=1e-5, atol=1e-6)
        docker("stop", name, timeout=TIMEOUT_S)
        exit_code = inspect(name, "{{.State.ExitCode}}")
        assert exit_code == "0", f"exit code {exit_code}\n{server.logs()}"
    finally:
        docker("rm", "--force", name, check=False)
