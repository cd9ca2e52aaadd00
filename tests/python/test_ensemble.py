"""Triton ensembles against the real binary, with the clients users have: the example ranking
pipeline (examples/pipeline, made by scripts/make_pipeline_models.py) served as one model and
called over KServe HTTP and gRPC with tritonclient, and over TF Serving REST. The expected
answers come from running the three step models one after another with ONNX Runtime."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tensorport_server import REPO, start_server

PIPELINE = REPO / "examples" / "pipeline"
CANDIDATES = 5


def _run(step: str, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(str(PIPELINE / step / "1" / "model.onnx"))
    return session.run(None, feeds)


def _expected(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    [features] = _run("feature_transform", {"raw": raw})
    [scores] = _run("ranker_mlp", {"features": features})
    values, indices = _run("top_k", {"scores": scores})
    return values, indices


def _raw(batch: int = 1) -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.normal(size=(batch, CANDIDATES, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("ensemble") / "server.log"
    server = start_server(PIPELINE, log)
    yield server
    server.stop()


def _http(server):
    return httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))


def test_the_ensemble_answers_as_its_steps_run_one_after_another_over_http_and_grpc(server):
    raw = _raw(batch=2)
    want_values, want_indices = _expected(raw)
    for client, module in ((_http(server), httpclient),
                           (grpcclient.InferenceServerClient(server.grpc_target), grpcclient)):
        features = module.InferInput("RAW_FEATURES", list(raw.shape), "FP32")
        features.set_data_from_numpy(raw)
        answer = client.infer("ranking_pipeline", [features])
        np.testing.assert_allclose(answer.as_numpy("TOP_SCORES"), want_values, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(answer.as_numpy("TOP_ITEMS"), want_indices)


def test_metadata_config_readiness_and_statistics_describe_the_ensemble(server):
    client = _http(server)
    assert client.is_model_ready("ranking_pipeline")
    metadata = client.get_model_metadata("ranking_pipeline")
    assert metadata["platform"] == "ensemble"
    assert [i["name"] for i in metadata["inputs"]] == ["RAW_FEATURES"]
    assert {o["name"] for o in metadata["outputs"]} == {"TOP_SCORES", "TOP_ITEMS"}
    config = grpcclient.InferenceServerClient(server.grpc_target).get_model_config(
        "ranking_pipeline", as_json=True)["config"]
    steps = config["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["feature_transform", "ranker_mlp", "top_k"]

    def successes(model: str) -> int:
        stats = client.get_inference_statistics(model)["model_stats"]
        return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)

    before = {m: successes(m) for m in ("ranking_pipeline", "feature_transform", "ranker_mlp", "top_k")}
    features = httpclient.InferInput("RAW_FEATURES", [1, CANDIDATES, 8], "FP32")
    features.set_data_from_numpy(_raw())
    client.infer("ranking_pipeline", [features])
    # The ensemble counts the request once, and each composing model counts its step.
    assert {m: successes(m) - n for m, n in before.items()} == {
        "ranking_pipeline": 1, "feature_transform": 1, "ranker_mlp": 1, "top_k": 1}


def test_the_ensemble_counts_inferences_executions_and_its_steps_runs_as_triton_does(server):
    # Native Triton 2.51, asked the same of this ensemble: inference_count and execution_count
    # grow with each request, batch_stats holds the request's batch size, and compute_infer
    # is the composing models' compute for it. perf_analyzer reads these for the ensemble.
    client = _http(server)
    steps = ("feature_transform", "ranker_mlp", "top_k")

    def stats(model: str) -> dict:
        return client.get_inference_statistics(model)["model_stats"][0]

    before = {m: stats(m) for m in ("ranking_pipeline", *steps)}
    for batch in (1, 2):
        features = httpclient.InferInput("RAW_FEATURES", [batch, CANDIDATES, 8], "FP32")
        features.set_data_from_numpy(_raw(batch))
        client.infer("ranking_pipeline", [features])
    after = {m: stats(m) for m in before}

    def grew(model: str, *path: str) -> int:
        def get(s):
            for key in path:
                s = s[key]
            return int(s)
        return get(after[model]) - get(before[model])

    ensemble = "ranking_pipeline"
    assert grew(ensemble, "inference_count") == 3
    assert grew(ensemble, "execution_count") == 2
    for phase in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert grew(ensemble, "inference_stats", phase, "count") == 2, phase
    sizes = {int(b["batch_size"]) for b in after[ensemble]["batch_stats"]}
    assert {1, 2} <= sizes, after[ensemble]["batch_stats"]
    # Each step's run is counted whole (the runtime's part and the batcher's around it).
    steps_infer = sum(grew(m, "inference_stats", "compute_infer", "ns") for m in steps)
    assert grew(ensemble, "inference_stats", "compute_infer", "ns") >= steps_infer > 0


def test_tf_serving_rest_predict_calls_the_ensemble_signature(server):
    raw = _raw()
    want_values, _ = _expected(raw)
    answer = requests.post(f"{server.rest_url}/v1/models/ranking_pipeline:predict",
                           json={"inputs": {"RAW_FEATURES": raw.tolist()}}, timeout=30)
    assert answer.status_code == 200, answer.text
    outputs = answer.json()["outputs"]
    np.testing.assert_allclose(np.array(outputs["TOP_SCORES"], dtype=np.float32), want_values,
                               rtol=1e-5, atol=1e-6)


def test_a_failing_step_fails_the_request_naming_the_step_with_the_step_s_own_status(server):
    # Two candidates: the top-k step (k = 3) refuses them; the first two steps accept them.
    raw = np.ones((1, 2, 8), dtype=np.float32)
    features = httpclient.InferInput("RAW_FEATURES", list(raw.shape), "FP32")
    features.set_data_from_numpy(raw)
    with pytest.raises(InferenceServerException) as refused:
        _http(server).infer("ranking_pipeline", [features])
    message = refused.value.message()
    assert "ensemble 'ranking_pipeline' step 3 (model 'top_k')" in message, message
    # The same scores sent to the step model itself fail with the same status.
    scores = httpclient.InferInput("scores", [1, 2], "FP32")
    scores.set_data_from_numpy(np.ones((1, 2), dtype=np.float32))
    with pytest.raises(InferenceServerException) as alone:
        _http(server).infer("top_k", [scores])
    assert refused.value.status() == alone.value.status(), (refused.value, alone.value)
    # The server goes on serving the ensemble.
    features = httpclient.InferInput("RAW_FEATURES", [1, CANDIDATES, 8], "FP32")
    features.set_data_from_numpy(_raw())
    _http(server).infer("ranking_pipeline", [features])


def test_an_ensemble_whose_step_is_missing_is_refused_and_the_rest_serve(tmp_path):
    models = tmp_path / "models"
    for name in ("feature_transform", "ranker_mlp", "ranking_pipeline"):
        shutil.copytree(PIPELINE / name, models / name)
    server = start_server(models, tmp_path / "server.log")
    try:
        index = requests.post(f"{server.rest_url}/v2/repository/index", json={}, timeout=30).json()
        rows = {row["name"]: row for row in index}
        assert rows["ranking_pipeline"]["state"] != "READY", rows
        assert "top_k" in rows["ranking_pipeline"]["reason"], rows
        assert rows["ranker_mlp"]["state"] == "READY", rows
        assert not _http(server).is_model_ready("ranking_pipeline")
    finally:
        server.stop()
