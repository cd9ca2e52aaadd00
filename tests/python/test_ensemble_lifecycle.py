"""An ensemble's life beside its step models, against the real binary polling its model
directory every second (examples/pipeline, made by scripts/make_pipeline_models.py):

- a step model reloads (a new version folder appears, then another with a different file)
  while a client keeps calling the ensemble: no request fails, and every answer is right;
- an ensemble refused because a step model is missing serves once the step appears, though
  its own folder never changes;
- under `--model-memory-budget` the steps wait for their first request, and the ensemble
  loads all the same, its steps loading on demand;
- `tensorport serve --model-dir examples/pipeline` starts without a warmup warning (the top_k
  step warms up with enough candidates, as its config.pbtxt's model_warmup says)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import requests
import tritonclient.http as httpclient

from tensorport_server import REPO, read_log, start_server

PIPELINE = REPO / "examples" / "pipeline"
STEPS = ("feature_transform", "ranker_mlp", "top_k")
CANDIDATES = 5
TIMEOUT_S = 60


def _expected(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    def run(step, feeds):
        return ort.InferenceSession(str(PIPELINE / step / "1" / "model.onnx")).run(None, feeds)

    [features] = run("feature_transform", {"raw": raw})
    [scores] = run("ranker_mlp", {"features": features})
    values, indices = run("top_k", {"scores": scores})
    return values, indices


def _raw(seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(1, CANDIDATES, 8)).astype(np.float32)


def _infer(client, raw):
    features = httpclient.InferInput("RAW_FEATURES", list(raw.shape), "FP32")
    features.set_data_from_numpy(raw)
    answer = client.infer("ranking_pipeline", [features])
    return answer.as_numpy("TOP_SCORES"), answer.as_numpy("TOP_ITEMS")


def _place(source: Path, target: Path) -> None:
    """Copies `source` into a staging folder outside the model directory (on the same file
    system) and renames it into place, so that a poll sees the folder whole or not at all."""
    models = next(parent for parent in target.parents if parent.name == "models")
    staging = models.parent / "staging" / f"{target.parent.name}-{target.name}"
    shutil.copytree(source, staging)
    os.rename(staging, target)


def _wait_for(condition, what: str, server) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; log:\n{read_log(server.log_path)[-4000:]}")


def _version_ready(server, model: str, version: int) -> bool:
    answer = requests.get(f"{server.rest_url}/v2/models/{model}/versions/{version}/ready", timeout=5)
    return answer.status_code == 200


def _copy_pipeline(models: Path, names=(*STEPS, "ranking_pipeline")) -> None:
    for name in names:
        shutil.copytree(PIPELINE / name, models / name)


def test_a_step_reloading_under_steady_calls_fails_no_request(tmp_path):
    models = tmp_path / "models"
    _copy_pipeline(models)
    server = start_server(models, tmp_path / "server.log", ["--model-poll-secs", "1"])
    raw = _raw()
    want_scores, want_items = _expected(raw)
    failures: list[str] = []
    answered = [0]
    stop = threading.Event()

    def call() -> None:
        client = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
        while not stop.is_set():
            try:
                scores, items = _infer(client, raw)
                np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-6)
                np.testing.assert_array_equal(items, want_items)
                answered[0] += 1
            except Exception as err:  # noqa: BLE001 - every failure is counted and shown
                failures.append(repr(err))

    caller = threading.Thread(target=call)
    caller.start()
    try:
        _wait_for(lambda: answered[0] > 0, "the first answer", server)
        # A new version folder of a step: the same weights, so answers stay the same.
        _place(models / "ranker_mlp" / "1", models / "ranker_mlp" / "2")
        _wait_for(lambda: _version_ready(server, "ranker_mlp", 2), "ranker_mlp v2", server)
        _wait_for(lambda: not _version_ready(server, "ranker_mlp", 1), "ranker_mlp v1 retired", server)
        # Another, with the step's file replaced by a fresh copy of the same graph.
        staging = tmp_path / "replaced_file"
        staging.mkdir()
        (staging / "model.onnx").write_bytes((PIPELINE / "ranker_mlp" / "1" / "model.onnx").read_bytes())
        _place(staging, models / "ranker_mlp" / "3")
        _wait_for(lambda: _version_ready(server, "ranker_mlp", 3), "ranker_mlp v3", server)
        _wait_for(lambda: not _version_ready(server, "ranker_mlp", 2), "ranker_mlp v2 retired", server)
        calls = answered[0]
        _wait_for(lambda: answered[0] > calls + 5, "answers after the reloads", server)
    finally:
        stop.set()
        caller.join()
        server.stop()
    assert failures == [], failures[:5]


def test_an_ensemble_missing_a_step_serves_once_the_step_appears(tmp_path):
    models = tmp_path / "models"
    _copy_pipeline(models, ("feature_transform", "ranker_mlp", "ranking_pipeline"))
    server = start_server(models, tmp_path / "server.log", ["--model-poll-secs", "1"])
    try:
        client = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
        assert not client.is_model_ready("ranking_pipeline")
        _place(PIPELINE / "top_k", models / "top_k")
        _wait_for(lambda: client.is_model_ready("ranking_pipeline"), "the ensemble ready", server)
        raw = _raw(5)
        scores, items = _infer(client, raw)
        want_scores, want_items = _expected(raw)
        np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(items, want_items)
    finally:
        server.stop()


def test_under_a_memory_budget_an_ensemble_loads_over_steps_that_are_not_resident(tmp_path):
    models = tmp_path / "models"
    _copy_pipeline(models)
    server = start_server(models, tmp_path / "server.log", ["--model-memory-budget", "1GiB"])
    try:
        index = requests.post(f"{server.rest_url}/v2/repository/index", json={}, timeout=30).json()
        rows = {row["name"]: row for row in index}
        assert all(rows[step]["state"] != "READY" for step in STEPS), rows
        client = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
        raw = _raw(9)
        scores, items = _infer(client, raw)
        want_scores, want_items = _expected(raw)
        np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(items, want_items)
        assert client.is_model_ready("ranking_pipeline")
    finally:
        server.stop()
    assert "failed to load" not in server.log(), server.log()


def test_the_example_pipeline_starts_without_a_warmup_warning(tmp_path):
    server = start_server(PIPELINE, tmp_path / "server.log")
    try:
        assert httpclient.InferenceServerClient(
            server.rest_url.removeprefix("http://")).is_model_ready("ranking_pipeline")
    finally:
        server.stop()
    log = server.log()
    assert "warmup failed" not in log, log
    assert not [line for line in log.splitlines() if "WARN" in line and "warmup" in line.lower()], log
