"""A model folder's problem is logged once, not on every poll: the real binary polls its model
directory every second, and the test gates on polls having happened by adding a model and
waiting for it to serve (twice), then counts the log lines.

- invalid settings (a config.toml that cannot be read as one) beside a version folder;
- a version policy that serves nothing (`latest = 0`) beside a version folder;
- an ensemble refused because a step model is missing (its load is not retried, and not
  logged again, until its folder or its steps change)."""

from __future__ import annotations

import os
import shutil
import time

import requests

from tensorport_server import EXAMPLE_MODELS, REPO, read_log, start_server

PIPELINE = REPO / "examples" / "pipeline"
TIMEOUT_S = 60


def _wait_ready(server, model: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{server.rest_url}/v2/models/{model}/ready", timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{model} never served; log:\n{read_log(server.log_path)[-4000:]}")


def test_a_config_problem_and_a_refused_ensemble_are_logged_once_across_polls(tmp_path):
    models = tmp_path / "models"
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "broken_settings")
    (models / "broken_settings" / "config.toml").write_text("[batchign]\nmax_batch_size = 4\n")
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "bad_policy")
    (models / "bad_policy" / "config.toml").write_text("[version_policy]\nlatest = 0\n")
    for name in ("feature_transform", "ranker_mlp", "ranking_pipeline"):
        shutil.copytree(PIPELINE / name, models / name)
    server = start_server(models, tmp_path / "server.log", ["--model-poll-secs", "1"])
    try:
        for marker in ("marker_one", "marker_two"):
            staging = tmp_path / f"staging-{marker}"
            shutil.copytree(EXAMPLE_MODELS / "ranker", staging)
            (staging / "config.toml").unlink(missing_ok=True)
            os.rename(staging, models / marker)
            _wait_ready(server, marker)
    finally:
        server.stop()
    lines = server.log().splitlines()
    settings = [l for l in lines if "invalid model settings" in l and "broken_settings" in l]
    assert len(settings) == 1, settings
    policy = [l for l in lines if "bad_policy" in l and ("invalid" in l or "at least 1" in l)]
    assert len(policy) == 1, policy
    refused = [l for l in lines if "failed to load" in l and "ranking_pipeline" in l]
    assert len(refused) == 1, refused
