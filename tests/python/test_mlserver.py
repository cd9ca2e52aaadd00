"""Seldon MLServer's folders served as MLServer serves them: `tensorport mlserver start FOLDER`
(or the binary run as `mlserver`), with FOLDER/settings.json, MLSERVER_* environment variables
over it, and the model-settings.json folders under FOLDER.

The settings files are MLServer's own examples and other users' files, kept byte for byte in
tests/migration/mlserver/ (SOURCES.md names each); scripts/make_mlserver_models.py lays them
out with ONNX files that match them. The ports are picked by the server (MLSERVER_*_PORT=0) and
read back from its log, so nothing binds a fixed port.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tensorport_server import REPO, server_binary, start_server

sys.path.insert(0, str(REPO / "scripts"))
import make_mlserver_models  # noqa: E402

CORPUS = REPO / "tests" / "migration" / "mlserver"
METRICS_RE = re.compile(r"listening grpc=\S+ rest=\S+ metrics=(\S+)")
TIMEOUT = 30


@pytest.fixture
def any_ports(monkeypatch):
    """MLServer's port settings, through its environment variables: free ones, picked by the
    server, over the fixed ones settings.json names."""
    for port in ("MLSERVER_HTTP_PORT", "MLSERVER_GRPC_PORT", "MLSERVER_METRICS_PORT"):
        monkeypatch.setenv(port, "0")


def with_bad_folders(folder: Path) -> Path:
    """Adds settings a server must refuse without stopping: malformed JSON, and a uri that
    leaves its model folder (for a valid model beside the folder)."""
    malformed = folder / "bad" / "malformed"
    malformed.mkdir(parents=True)
    (malformed / "model-settings.json").write_text('{\n  "name": "malformed",\n  "parameters": {\n')
    shutil.copyfile(folder / "models" / "mnist-svm" / "model.onnx", folder / "secret.onnx")
    escape = folder / "bad" / "escape"
    escape.mkdir(parents=True)
    (escape / "model-settings.json").write_text(
        json.dumps({"name": "escape", "parameters": {"uri": "../../secret.onnx"}}))
    unsafe = folder / "bad" / "unsafe"
    unsafe.mkdir(parents=True)
    (unsafe / "model-settings.json").write_text(json.dumps({"name": "../../etc"}))
    shutil.copyfile(folder / "models" / "mnist-svm" / "model.onnx", unsafe / "model.onnx")
    # The iris file's input is FP32: settings describing it otherwise fail its load.
    mismatch = folder / "bad" / "mismatch"
    mismatch.mkdir(parents=True)
    (mismatch / "model-settings.json").write_text(json.dumps(
        {"name": "mismatch", "inputs": [{"name": "input-0", "datatype": "INT64", "shape": [-1, 4]}]}))
    shutil.copyfile(folder / "benchmarking" / "models" / "iris" / "model.onnx",
                    mismatch / "model.onnx")
    return folder


def index(server) -> dict[str, dict]:
    answer = requests.post(f"{server.rest_url}/v2/repository/index", json={}, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    return {entry["name"]: entry for entry in answer.json()}


def digit(label: int) -> np.ndarray:
    """Features the stand-in mnist-svm classifies as `label`."""
    features = np.zeros((1, make_mlserver_models.MNIST_FEATURES), dtype=np.float32)
    features[0, label] = 5.0
    return features


def test_mlserver_folder_serves_by_name_and_version_name(tmp_path, any_ports):
    folder = with_bad_folders(make_mlserver_models.build(tmp_path / "mlserver"))
    server = start_server(None, tmp_path / "log", [str(folder)],
                          program=[str(server_binary()), "mlserver", "start"])
    try:
        rest = server.rest_url.removeprefix("http://")
        http = httpclient.InferenceServerClient(rest)
        grpc = grpcclient.InferenceServerClient(server.grpc_target)
        for name in ("mnist-svm", "sum-model", "iris"):
            assert http.is_model_ready(name), (name, server.log())

        # tritonclient over HTTP, latest version: the version is reported by its name.
        features = httpclient.InferInput("predict", [1, 64], "FP32")
        features.set_data_from_numpy(digit(3))
        result = http.infer("mnist-svm", [features])
        assert result.as_numpy("label").tolist() == [3]
        assert result.get_response()["model_version"] == "v0.1.0"

        # MLServer's URL, with the version name in the path.
        body = {"inputs": [{"name": "predict", "shape": [1, 64], "datatype": "FP32",
                            "data": digit(7).ravel().tolist()}]}
        answer = requests.post(f"{server.rest_url}/v2/models/mnist-svm/versions/v0.1.0/infer",
                               json=body, timeout=TIMEOUT)
        assert answer.status_code == 200, answer.text
        assert answer.json()["model_version"] == "v0.1.0"
        assert answer.json()["outputs"][0]["data"] == [7]
        unknown = requests.post(f"{server.rest_url}/v2/models/mnist-svm/versions/v9.9.9/infer",
                                json=body, timeout=TIMEOUT)
        assert 400 <= unknown.status_code < 500, unknown.text
        metadata = requests.get(f"{server.rest_url}/v2/models/mnist-svm/versions/v0.1.0",
                                timeout=TIMEOUT).json()
        assert metadata["versions"] == ["v0.1.0"], metadata

        # tritonclient over gRPC, naming the version.
        features = grpcclient.InferInput("predict", [1, 64], "FP32")
        features.set_data_from_numpy(digit(5))
        result = grpc.infer("mnist-svm", [features], model_version="v0.1.0")
        assert result.as_numpy("label").tolist() == [5]
        assert result.get_response().model_version == "v0.1.0"

        # MLServer's own test settings: adaptive batching, its version name, its signature.
        summed = grpcclient.InferInput("input-0", [128], "FP32")
        summed.set_data_from_numpy(np.ones(128, dtype=np.float32))
        result = grpc.infer("sum-model", [summed], model_version="v1.2.3")
        assert result.as_numpy("output-0").tolist() == [128.0]
        assert result.get_response().model_version == "v1.2.3"
        # Batching on, waiting max_batch_time (0.4 s) for a batch to fill; max_batch_size
        # reads 0 here, as Triton reports it, since [128] has no batch dimension.
        config = http.get_model_config("sum-model")
        assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 400_000, config

        # Nested two folders down, and no version: version 1.
        flowers = httpclient.InferInput("input-0", [2, 4], "FP32")
        flowers.set_data_from_numpy(np.array([[0, 9, 1, 2], [3, 1, 0, 8]], dtype=np.float32))
        result = http.infer("iris", [flowers])
        assert result.as_numpy("predict").tolist() == [1, 3]
        assert result.get_response()["model_version"] == "1"

        # Every folder this server cannot serve says why, and stops nothing else.
        entries = index(server)
        refused = {
            "mushroom-xgboost": "MLServer's XGBoost runtime",
            "mlserver-example": "model.ExampleModel is Python code of its own",
            "sentiment-analysis": "models.SentimentModel is Python code of its own",
            "malformed": "line 4 column 0",
            "escape": "parameters.uri '../../secret.onnx' does not name a file or folder inside",
            "unsafe": "name: model name '../../etc' is not a plain name",
            "mismatch": "describes input 'input-0' as INT64, but the model file's is FP32",
        }
        for name, reason in refused.items():
            assert entries[name]["state"] == "UNAVAILABLE", entries[name]
            assert reason in entries[name]["reason"], entries[name]
            assert "model-settings.json" in entries[name]["reason"], entries[name]
            assert str(tmp_path) not in entries[name]["reason"], entries[name]
        for name, version in (("mnist-svm", "v0.1.0"), ("sum-model", "v1.2.3"), ("iris", "1")):
            assert entries[name]["state"] == "READY", entries[name]
            assert entries[name]["version"] == version, entries[name]
        assert grpc.get_model_metadata("sum-model").versions == ["v1.2.3"]

        metrics = METRICS_RE.search(server.log())
        assert metrics, server.log()
        scrape = requests.get(f"http://{metrics.group(1)}/metrics", timeout=TIMEOUT)
        assert scrape.status_code == 200 and "tensorport_" in scrape.text

        log = server.log()
        assert "model-settings.json sets fields this server does not apply" in log
        assert "cache_enabled" in log and "inputs[].parameters" in log
        assert "accepted but not applied" in log and "cors_settings" in log
        assert "panicked" not in log
    finally:
        server.stop()


def test_a_name_claimed_twice_serves_neither_and_the_binary_runs_as_mlserver(tmp_path,
                                                                              any_ports):
    folder = make_mlserver_models.build(tmp_path / "mlserver")
    # MLServer's single-model sklearn example names its model mnist-svm too.
    sklearn = folder / "sklearn"
    sklearn.mkdir()
    for name in ("model-settings.json", "settings.json"):
        shutil.copyfile(CORPUS / "seldonio" / "docs" / "examples" / "sklearn" / name,
                        sklearn / name)
    (sklearn / "mnist-svm.joblib").write_bytes(b"joblib stand-in")
    link = tmp_path / "bin" / "mlserver"
    link.parent.mkdir()
    link.symlink_to(server_binary())
    server = start_server(None, tmp_path / "log", ["start", str(folder)], program=[str(link)])
    try:
        entries = index(server)
        reason = entries["mnist-svm"]["reason"]
        assert entries["mnist-svm"]["state"] == "UNAVAILABLE"
        assert "model name 'mnist-svm' is claimed by" in reason, reason
        assert "models/mnist-svm/model-settings.json" in reason, reason
        assert "sklearn/model-settings.json" in reason, reason
        http = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
        assert http.is_model_ready("iris") and http.is_model_ready("sum-model")
        assert "panicked" not in server.log()
    finally:
        server.stop()


def test_the_sklearn_example_alone_is_refused_saying_why(tmp_path, any_ports):
    """`mlserver start .` in MLServer's sklearn example: the folder is the one model."""
    folder = tmp_path / "sklearn"
    folder.mkdir()
    for name in ("model-settings.json", "settings.json"):
        shutil.copyfile(CORPUS / "seldonio" / "docs" / "examples" / "sklearn" / name, folder / name)
    (folder / "mnist-svm.joblib").write_bytes(b"joblib stand-in")
    server = start_server(None, tmp_path / "log", ["start", str(folder)],
                          program=[str(server_binary()), "mlserver"])
    try:
        entry = index(server)["mnist-svm"]
        assert entry["state"] == "UNAVAILABLE"
        assert "MLServer's scikit-learn runtime" in entry["reason"], entry
        assert "mnist-svm.joblib is no model file this server runs" in entry["reason"], entry
    finally:
        server.stop()
