"""The model lifecycle against the real binary: hot reload under load, version labels and
policies, explicit load / unload / reload-config, warmup, and dynamic batching.

Each test starts its own server over its own temporary model directory, polled every second.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as triton_grpc
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tensorflow_serving.config import model_server_config_pb2

from tensorport_server import read_log, start_server
from tfs import EXAMPLE_MODELS, make_ndarray, make_tensor_proto, reference

RNG = np.random.default_rng(42)
FEATURES = RNG.standard_normal((4, 16)).astype(np.float32)


@dataclass
class Running:
    rest: str
    grpc: str
    log: Path
    models: Path

    def status(self, model: str) -> dict[str, dict]:
        body = requests.get(f"{self.rest}/v1/models/{model}", timeout=5).json()
        return {row["version"]: row for row in body.get("model_version_status", [])}

    def wait_for(self, what, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if what():
                    return
            except (requests.RequestException, KeyError):
                pass
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting; server log:\n{read_log(self.log)[-4000:]}")

    def predict(self, model: str = "ranker", path: str = "") -> np.ndarray:
        response = requests.post(f"{self.rest}/v1/models/{model}{path}:predict",
                                 json={"instances": FEATURES.tolist()}, timeout=10)
        assert response.status_code == 200, response.text
        return np.array(response.json()["predictions"], dtype=np.float32)


@contextlib.contextmanager
def serving(models: Path, *extra: str):
    server = start_server(models, models.parent / f"{models.name}.log", ["--model-poll-secs", "1", *extra])
    try:
        yield Running(rest=server.rest_url, grpc=server.grpc_target, log=server.log_path, models=models)
    finally:
        server.stop()


def ranker_v(version: int) -> np.ndarray:
    return reference("ranker", version, {"features": FEATURES})["score"]


def copy_version(models: Path, version: int, into: int | None = None) -> None:
    shutil.copytree(EXAMPLE_MODELS / "ranker" / str(version), models / "ranker" / str(into or version))


def available(server: Running, model: str, version: str) -> bool:
    return server.status(model).get(version, {}).get("state") == "AVAILABLE"


def test_hot_reload_under_load_fails_no_request(tmp_path):
    models = tmp_path / "models"
    (models / "ranker").mkdir(parents=True)
    copy_version(models, 1)
    with serving(models) as server:
        np.testing.assert_allclose(server.predict(), ranker_v(1), rtol=1e-5, atol=1e-5)
        failures: list[str] = []
        served = [0]
        stop = threading.Event()

        def load():
            session = requests.Session()
            while not stop.is_set():
                try:
                    response = session.post(f"{server.rest}/v1/models/ranker:predict",
                                            json={"instances": FEATURES.tolist()}, timeout=10)
                    if response.status_code != 200:
                        failures.append(f"{response.status_code} {response.text}")
                    served[0] += 1
                except requests.RequestException as err:
                    failures.append(repr(err))

        clients = [threading.Thread(target=load) for _ in range(4)]
        for client in clients:
            client.start()
        try:
            time.sleep(0.5)
            copy_version(models, 2)
            server.wait_for(lambda: available(server, "ranker", "2"))
            server.wait_for(lambda: server.status("ranker")["1"]["state"] in ("UNLOADING", "END"))
            np.testing.assert_allclose(server.predict(), ranker_v(2), rtol=1e-5, atol=1e-5)

            shutil.rmtree(models / "ranker" / "1")
            time.sleep(2.5)
            assert server.status("ranker")["1"]["state"] == "END"

            broken = models / "ranker" / "3"
            broken.mkdir()
            (broken / "model.onnx").write_bytes(b"not an onnx model")
            server.wait_for(lambda: server.status("ranker").get("3", {}).get("state") == "END")
            status = server.status("ranker")
            assert status["3"]["status"]["error_code"] != "OK"
            assert status["3"]["status"]["error_message"]
            assert status["2"]["state"] == "AVAILABLE"
            time.sleep(1.5)
        finally:
            stop.set()
            for client in clients:
                client.join()
        np.testing.assert_allclose(server.predict(), ranker_v(2), rtol=1e-5, atol=1e-5)
        assert not failures, failures[:5]
        assert served[0] > 20
        metrics = requests.get(f"{server.rest}/metrics", timeout=5).text
        assert 'tensorport_model_loads_total{model="ranker"} 2' in metrics, metrics
        assert 'tensorport_model_unloads_total{model="ranker"} 1' in metrics, metrics
        assert 'tensorport_model_load_failures_total{model="ranker"} 1' in metrics, metrics


def test_labels_and_policy_select_versions(tmp_path):
    models = tmp_path / "models"
    (models / "ranker").mkdir(parents=True)
    copy_version(models, 1)
    copy_version(models, 2)
    (models / "ranker" / "config.toml").write_text(
        "[version_policy]\nall = true\n[version_labels]\nstable = 1\ncanary = 2\n")
    with serving(models) as server:
        assert set(server.status("ranker")) == {"1", "2"}
        np.testing.assert_allclose(server.predict(path="/labels/stable"), ranker_v(1), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(server.predict(path="/labels/canary"), ranker_v(2), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(server.predict(path="/versions/1"), ranker_v(1), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(server.predict(), ranker_v(2), rtol=1e-5, atol=1e-5)
        label_status = requests.get(f"{server.rest}/v1/models/ranker/labels/stable", timeout=5).json()
        assert [row["version"] for row in label_status["model_version_status"]] == ["1"]
        unknown = requests.post(f"{server.rest}/v1/models/ranker/labels/nope:predict",
                                json={"instances": FEATURES.tolist()}, timeout=5)
        assert unknown.status_code == 400 and "nope" in unknown.json()["error"]

        channel = grpc.insecure_channel(server.grpc)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "ranker"
        request.model_spec.version_label = "stable"
        request.inputs["features"].CopyFrom(make_tensor_proto(FEATURES))
        response = stub.Predict(request, timeout=10)
        assert response.model_spec.version.value == 1
        np.testing.assert_allclose(make_ndarray(response.outputs["score"]), ranker_v(1), rtol=1e-5, atol=1e-5)

        client = triton_grpc.InferenceServerClient(server.grpc)
        x = triton_grpc.InferInput("features", list(FEATURES.shape), "FP32")
        x.set_data_from_numpy(FEATURES)
        result = client.infer("ranker", [x], model_version="canary")
        assert result.get_response().model_version == "2"
        np.testing.assert_allclose(result.as_numpy("score"), ranker_v(2), rtol=1e-5, atol=1e-5)


def test_explicit_unload_load_and_reload_config(tmp_path):
    models = tmp_path / "models"
    (models / "ranker").mkdir(parents=True)
    copy_version(models, 2)
    shutil.copytree(EXAMPLE_MODELS / "two_tower", models / "two_tower")
    with serving(models) as server:
        unload = requests.post(f"{server.rest}/v2/repository/models/ranker/unload", timeout=10)
        assert unload.status_code == 200, unload.text
        assert server.status("ranker")["2"]["state"] in ("UNLOADING", "END")
        assert requests.get(f"{server.rest}/v2/models/ranker/ready", timeout=5).status_code != 200
        time.sleep(1.5)  # a poll must not bring it back
        assert not available(server, "ranker", "2")
        index = requests.post(f"{server.rest}/v2/repository/index", json={}, timeout=5).json()
        assert {"name": "ranker", "version": "2"} in [{k: r[k] for k in ("name", "version")} for r in index]

        client = triton_grpc.InferenceServerClient(server.grpc)
        client.load_model("ranker")
        assert client.is_model_ready("ranker")
        np.testing.assert_allclose(server.predict(), ranker_v(2), rtol=1e-5, atol=1e-5)
        client.unload_model("ranker")
        assert not client.is_model_ready("ranker")
        assert requests.post(f"{server.rest}/v2/repository/models/ranker/load", timeout=10).status_code == 200
        assert client.is_model_ready("ranker")
        missing = requests.post(f"{server.rest}/v2/repository/models/nope/load", timeout=10)
        assert missing.status_code == 404, missing.text

        # TF Serving's reload: serve only ranker, version 2, labelled "live".
        channel = grpc.insecure_channel(server.grpc)
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        config = model_server_config_pb2.ModelServerConfig()
        entry = config.model_config_list.config.add()
        entry.name = "ranker"
        entry.base_path = str(models / "ranker")
        entry.model_platform = "onnx"
        entry.model_version_policy.specific.versions.append(2)
        entry.version_labels["live"] = 2
        reply = stub.HandleReloadConfigRequest(model_management_pb2.ReloadConfigRequest(config=config), timeout=30)
        assert reply.status.error_code == 0
        np.testing.assert_allclose(server.predict(path="/labels/live"), ranker_v(2), rtol=1e-5, atol=1e-5)
        gone = requests.get(f"{server.rest}/v1/models/two_tower", timeout=5)
        assert gone.status_code == 404
        status = stub.GetModelStatus(get_model_status_pb2.GetModelStatusRequest(
            model_spec={"name": "ranker"}), timeout=5)
        assert [(s.version, s.state) for s in status.model_version_status] == [(2, 30)]


def test_a_failing_warmup_keeps_the_serving_version(tmp_path):
    models = tmp_path / "models"
    (models / "ranker").mkdir(parents=True)
    copy_version(models, 1)
    with serving(models) as server:
        assert available(server, "ranker", "1")
        # Version 2 asks for a warmup with a shape the model refuses: it must not serve.
        (models / "ranker" / "config.toml").write_text("[warmup]\nrequests = 1\nshapes = { features = [1, 15] }\n")
        copy_version(models, 2)
        server.wait_for(lambda: server.status("ranker").get("2", {}).get("state") == "END")
        status = server.status("ranker")
        assert "warmup" in status["2"]["status"]["error_message"]
        assert status["1"]["state"] == "AVAILABLE"
        np.testing.assert_allclose(server.predict(), ranker_v(1), rtol=1e-5, atol=1e-5)
        metrics = requests.get(f"{server.rest}/metrics", timeout=5).text
        assert 'tensorport_model_load_failures_total{model="ranker"} 1' in metrics, metrics
        assert 'tensorport_model_loads_total{model="ranker"} 1' in metrics, metrics


def test_concurrent_requests_are_batched_and_answered_with_their_own_rows(tmp_path):
    models = tmp_path / "models"
    (models / "ranker").mkdir(parents=True)
    copy_version(models, 2)
    (models / "ranker" / "config.toml").write_text(
        "[batching]\nmax_batch_size = 64\nmax_queue_delay_us = 20000\n")
    rows = RNG.standard_normal((32, 16)).astype(np.float32)
    want = reference("ranker", 2, {"features": rows})["score"]
    with serving(models) as server:
        def one(i: int) -> np.ndarray:
            body = {"inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP32",
                                "data": rows[i].tolist()}]}
            response = requests.post(f"{server.rest}/v2/models/ranker/infer", json=body, timeout=10)
            assert response.status_code == 200, response.text
            return np.array(response.json()["outputs"][0]["data"], dtype=np.float32)

        with ThreadPoolExecutor(max_workers=16) as pool:
            got = list(pool.map(one, range(len(rows))))
        for i, score in enumerate(got):
            np.testing.assert_allclose(score, want[i], rtol=1e-5, atol=1e-5)
        stats = requests.get(f"{server.rest}/v2/models/ranker/stats", timeout=5).json()["model_stats"][0]
        sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}
        assert sum(size * count for size, count in sizes.items()) == len(rows)
        assert max(sizes) > 1, sizes
        assert stats["execution_count"] < len(rows)
