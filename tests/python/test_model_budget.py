"""`--model-memory-budget` against the real binary, with the real clients: models discovered at
start load on their first request (tritonclient gRPC and the TF Serving gRPC stubs), a pinned
model loads at start, a model larger than the whole budget is refused with RESOURCE_EXHAUSTED
while the others serve, and a bad size is refused at start with a message naming the flag.

Loads are measured by the process's resident memory here (the first load in a process also
pays the runtime's one-time costs, some megabytes), so the budget is far from every figure:
48 MiB fits the small rankers with room to spare and is smaller than the 64 MiB file of the
generated embedding model.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest
import requests
import tritonclient.grpc as triton_grpc
from onnx import TensorProto, helper, numpy_helper
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tensorport_server import server_binary, start_server
from tfs import EXAMPLE_MODELS, make_ndarray, make_tensor_proto, reference

FEATURES = np.random.default_rng(7).standard_normal((2, 16)).astype(np.float32)
RANKER = EXAMPLE_MODELS / "ranker" / "1" / "model.onnx"
BUDGET = 48 << 20


def make_large_model(path: Path, rows: int = 1 << 20) -> Path:
    """An embedding lookup whose [rows, 16] FP32 table (64 MiB by default) is the model."""
    table = numpy_helper.from_array(np.zeros((rows, 16), dtype=np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["embedding"], axis=0)], "lookup",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["batch"])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", 16])], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def add_model(models: Path, name: str, source: Path, config: str | None = None) -> None:
    folder = models / name / "1"
    folder.mkdir(parents=True)
    shutil.copy(source, folder / "model.onnx")
    if config:
        (models / name / "config.toml").write_text(config)


def index(rest: str) -> dict[str, dict]:
    rows = requests.post(f"{rest}/v2/repository/index", json={}, timeout=10).json()
    return {row["name"]: row for row in rows}


def metric(rest: str, name: str, model: str) -> float:
    text = requests.get(f"{rest}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and f'model="{model}"' in line)


def triton_infer(client: triton_grpc.InferenceServerClient, model: str) -> np.ndarray:
    features = triton_grpc.InferInput("features", list(FEATURES.shape), "FP32")
    features.set_data_from_numpy(FEATURES)
    return client.infer(model, [features]).as_numpy("score")


def test_models_load_on_first_request_and_a_too_large_one_is_refused(tmp_path):
    models = tmp_path / "models"
    add_model(models, "lazy", RANKER)
    add_model(models, "pinned", RANKER, "[lifecycle]\npinned = true\n")
    add_model(models, "big", make_large_model(tmp_path / "large.onnx"))
    budget = BUDGET
    assert (models / "big" / "1" / "model.onnx").stat().st_size > budget
    server = start_server(models, tmp_path / "server.log", ["--model-memory-budget", str(budget)])
    try:
        rest = server.rest_url
        before = index(rest)
        assert before["lazy"]["state"] == "UNAVAILABLE"
        assert before["lazy"]["reason"] == "not loaded; loads on its first request"
        assert before["pinned"]["state"] == "READY"
        assert before["pinned"]["memory_bytes"] >= RANKER.stat().st_size
        assert requests.get(f"{rest}/v2/health/ready", timeout=5).status_code == 200
        status = requests.get(f"{rest}/v1/models/lazy", timeout=5).json()
        assert status["model_version_status"][0]["state"] == "END"

        expected = reference("ranker", 1, {"features": FEATURES})["score"]
        client = triton_grpc.InferenceServerClient(server.grpc_target)
        np.testing.assert_allclose(triton_infer(client, "lazy"), expected, rtol=1e-5, atol=1e-6)
        assert metric(rest, "tensorport_model_loads_on_demand_total", "lazy") == 1
        after = index(rest)
        assert after["lazy"]["state"] == "READY"
        assert after["lazy"]["memory_bytes"] >= RANKER.stat().st_size

        channel = grpc.insecure_channel(server.grpc_target)
        status_stub = model_service_pb2_grpc.ModelServiceStub(channel)
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "lazy"
        (row,) = status_stub.GetModelStatus(request, timeout=10).model_version_status
        assert row.state == row.AVAILABLE

        # The model larger than the budget: refused, with the sizes, in both protocols.
        predict = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        big = predict_pb2.PredictRequest()
        big.model_spec.name = "big"
        big.inputs["idx"].CopyFrom(make_tensor_proto(np.array([1], dtype=np.int64)))
        with pytest.raises(grpc.RpcError) as refused:
            predict.Predict(big, timeout=10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "more than the whole model memory budget" in refused.value.details()
        assert str(budget) in refused.value.details()
        response = requests.post(f"{rest}/v2/models/big/infer", json={"inputs": []}, timeout=10)
        assert response.status_code == 429, response.text
        assert "memory budget" in response.json()["error"]
        assert "memory budget" in index(rest)["big"]["reason"]

        # The others keep serving, from memory.
        ranked = predict_pb2.PredictRequest()
        ranked.model_spec.name = "pinned"
        ranked.inputs["features"].CopyFrom(make_tensor_proto(FEATURES))
        scores = make_ndarray(predict.Predict(ranked, timeout=10).outputs["score"])
        np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(triton_infer(client, "lazy"), expected, rtol=1e-5, atol=1e-6)
        assert metric(rest, "tensorport_model_loads_on_demand_total", "lazy") == 1
        assert metric(rest, "tensorport_model_evictions_total", "lazy") == 0
    finally:
        server.stop()


@pytest.mark.parametrize("size", ["5 parsecs", "0", "MiB", "99999999999GiB"])
def test_a_bad_budget_is_refused_at_start(tmp_path, size):
    result = subprocess.run(
        [str(server_binary()), "serve", "--model-dir", str(EXAMPLE_MODELS), "--model-memory-budget", size],
        check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "--model-memory-budget" in result.stderr, result.stderr


def test_metadata_of_an_evicted_model_loads_it(tmp_path):
    """tritonclient (and perf_analyzer) ask for a model's metadata before they infer: for an
    evicted version the metadata call loads it, as an inference would; readiness stays false
    until then. Two 24 MiB models under a 40 MiB budget: their files alone do not fit together,
    so loading one always evicts the other. Under a budget the server gives large blocks
    mappings of their own (returned to the system when freed), so a load's measured figure is
    its file plus little (the first also pays the runtime's one-time costs), well inside the
    budget."""
    models = tmp_path / "models"
    table = make_large_model(tmp_path / "table.onnx", rows=3 << 17)
    add_model(models, "x", table)
    add_model(models, "y", table)
    budget = 40 << 20
    assert 2 * table.stat().st_size > budget
    server = start_server(models, tmp_path / "server.log", ["--model-memory-budget", str(budget)])
    try:
        rest = server.rest_url
        client = triton_grpc.InferenceServerClient(server.grpc_target)

        def lookup(model: str) -> np.ndarray:
            idx = triton_grpc.InferInput("idx", [2], "INT64")
            idx.set_data_from_numpy(np.array([0, 5], dtype=np.int64))
            return client.infer(model, [idx]).as_numpy("embedding")

        assert lookup("x").shape == (2, 16)
        assert lookup("y").shape == (2, 16)
        assert index(rest)["x"]["reason"] == "evicted"
        assert not client.is_model_ready("x")

        metadata = client.get_model_metadata("x")
        assert [t.name for t in metadata.inputs] == ["idx"]
        assert metadata.versions == ["1"]
        assert client.is_model_ready("x")
        assert index(rest)["y"]["reason"] == "evicted"
        assert client.get_model_config("y").config.input[0].name == "idx"
        assert metric(rest, "tensorport_model_loads_on_demand_total", "x") == 2
        assert metric(rest, "tensorport_model_loads_on_demand_total", "y") == 2
        assert lookup("y").shape == (2, 16)
    finally:
        server.stop()
