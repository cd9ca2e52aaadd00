"""The files a model folder offers, as whoever can write into a polled repository can make them
(the security review's items): a FIFO named config.pbtxt, a labels file that links to a file
of the server's, a labels file that links to /dev/zero, a sparse config.pbtxt of 1.5 GiB.

Each must fail its own model's load with a reason naming the file and what is wrong with it,
and nothing else: liveness, inference on the other models, the repository index and the
polls go on, and no byte of a file outside the model folder reaches a client."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import requests

from tensorport_server import EXAMPLE_MODELS, TEST_MODELS, read_log, start_server

TIMEOUT_S = 60
# A request that has not been answered by then counts as not answered at all.
REQUEST_TIMEOUT_S = 10

FEATURES = (np.arange(16, dtype=np.float32) / 16.0).reshape(1, 16)
RANKER_BODY = {"inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP32",
                           "data": FEATURES.ravel().tolist()}]}

# multi_dtype's `weighted` output, [batch, 3] float64, as three scored classes (as in
# test_model_contract.py).
CLASSIFIED = ('max_batch_size: 8\n'
              'output [ { name: "weighted" data_type: TYPE_FP64 dims: [ 3 ] label_filename: "labels.txt" } ]\n')
CLASSIFY_BODY = {
    "inputs": [{"name": "x_double", "shape": [1, 3], "datatype": "FP64", "data": [1, 2, 3]},
               {"name": "x_int32", "shape": [1, 3], "datatype": "INT32", "data": [1, 1, 1]},
               {"name": "flag", "shape": [1, 3], "datatype": "BOOL", "data": [True, True, True]},
               {"name": "label", "shape": [1], "datatype": "BYTES", "data": ["a"]}],
    "outputs": [{"name": "weighted", "parameters": {"classification": 3}}],
}
# What the server's own file holds: three lines, enough for every class, and a line that reads
# as a text-proto field, so that a parse error quoting it would show.
PRIVATE = "hunter2-alpha\nhunter2-beta\nhunter2_gamma: 1\n"


def index(server) -> list[dict]:
    answer = requests.post(f"{server.rest_url}/v2/repository/index", json={},
                           timeout=REQUEST_TIMEOUT_S)
    assert answer.status_code == 200, answer.text
    return answer.json()


def reasons(entries: list[dict], model: str) -> str:
    return " | ".join(entry.get("reason", "") for entry in entries if entry["name"] == model)


def wait_for_reason(server, model: str, needle: str) -> str:
    """The index's reason for `model` once it holds `needle`: the gate on a poll having read the
    model's folder. A server that stops answering fails here, each request within its timeout."""
    deadline = time.monotonic() + TIMEOUT_S
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            last = reasons(index(server), model)
            if needle in last:
                return last
        except requests.RequestException as err:
            last = f"no answer: {err}"
        time.sleep(0.2)
    raise AssertionError(f"{model}: no reason with {needle!r} (last: {last}); log:\n"
                         f"{read_log(server.log_path)[-4000:]}")


def wait_ready(server, model: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            ready = requests.get(f"{server.rest_url}/v2/models/{model}/ready", timeout=REQUEST_TIMEOUT_S)
            if ready.status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{model} never served; log:\n{read_log(server.log_path)[-4000:]}")


def assert_serving(server) -> None:
    live = requests.get(f"{server.rest_url}/v2/health/live", timeout=REQUEST_TIMEOUT_S)
    assert live.status_code == 200, live.text
    answer = requests.post(f"{server.rest_url}/v2/models/ranker/infer", json=RANKER_BODY,
                           timeout=REQUEST_TIMEOUT_S)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["name"] == "score"


def test_a_fifo_named_config_pbtxt_fails_its_model_and_freezes_nothing(tmp_path):
    models = tmp_path / "models"
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "ranker")
    server = start_server(models, tmp_path / "server.log", ["--model-poll-secs", "1"])
    try:
        assert_serving(server)
        # The attack: a model folder whose config.pbtxt is a FIFO nobody ever writes; the
        # other files the poll reads, the same.
        for model, fifo in (("frozen_toml", "config.toml"), ("frozen_mlserver", "model-settings.json"),
                            ("frozen", "config.pbtxt")):
            staging = tmp_path / f"staging-{model}"
            shutil.copytree(EXAMPLE_MODELS / "ranker", staging)
            os.mkfifo(staging / fifo)
            os.rename(staging, models / model)

        reason = wait_for_reason(server, "frozen", "config.pbtxt is a FIFO, not a regular file")
        assert "<model-dir>/frozen/config.pbtxt" in reason, reason
        wait_for_reason(server, "frozen_toml", "config.toml is a FIFO, not a regular file")
        # A FIFO is no settings file: the folder is one of this server's own layout.
        wait_ready(server, "frozen_mlserver")
        assert_serving(server)
        frozen = requests.get(f"{server.rest_url}/v2/models/frozen/ready", timeout=REQUEST_TIMEOUT_S)
        assert frozen.status_code != 200

        # The polls went on past it: the folder serves once the FIFO is gone.
        (models / "frozen" / "config.pbtxt").unlink()
        wait_ready(server, "frozen")
        assert_serving(server)
    finally:
        server.stop()


def test_a_labels_file_or_config_linked_out_of_its_folder_fails_the_load_and_leaks_nothing(tmp_path):
    private = tmp_path / "private.txt"
    private.write_text(PRIVATE)
    models = tmp_path / "models"
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "ranker")
    shutil.copytree(EXAMPLE_MODELS / "multi_dtype", models / "classified")
    (models / "classified" / "config.pbtxt").write_text(CLASSIFIED)
    (models / "classified" / "labels.txt").symlink_to(private)
    # The settings file itself linked out: its parse error would quote what it read.
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "linked_config")
    (models / "linked_config" / "config.pbtxt").symlink_to(private)
    server = start_server(models, tmp_path / "server.log")
    try:
        seen = []
        reason = wait_for_reason(server, "classified", "does not lead to a file inside")
        assert "label_filename" in reason and "labels.txt" in reason, reason
        seen.append(reason)
        seen.append(wait_for_reason(server, "linked_config", "does not lead to a file inside"))
        answer = requests.post(f"{server.rest_url}/v2/models/classified/infer", json=CLASSIFY_BODY,
                               timeout=REQUEST_TIMEOUT_S)
        assert answer.status_code != 200, answer.text
        seen.append(answer.text)
        seen.append(requests.post(f"{server.rest_url}/v2/repository/index", json={},
                                  timeout=REQUEST_TIMEOUT_S).text)
        for text in seen:
            assert "hunter2" not in text and str(private) not in text, text
        assert_serving(server)
    finally:
        server.stop()
    assert "hunter2" not in server.log()


def test_a_device_or_a_huge_sparse_file_is_refused_at_its_cap(tmp_path):
    models = tmp_path / "models"
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "ranker")
    shutil.copytree(EXAMPLE_MODELS / "multi_dtype", models / "zero_labels")
    (models / "zero_labels" / "config.pbtxt").write_text(CLASSIFIED)
    (models / "zero_labels" / "labels.txt").symlink_to("/dev/zero")
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "sparse")
    with open(models / "sparse" / "config.pbtxt", "wb") as sparse:
        sparse.truncate(3 << 29)
    for name in ("config.toml", "model-settings.json"):
        folder = models / f"sparse_{name.split('.')[0].replace('-', '_')}"
        shutil.copytree(EXAMPLE_MODELS / "ranker", folder)
        (folder / "config.toml").unlink(missing_ok=True)
        with open(folder / name, "wb") as sparse:
            sparse.truncate(3 << 29)
    server = start_server(models, tmp_path / "server.log")
    try:
        reason = wait_for_reason(server, "zero_labels", "does not lead to a file inside")
        assert "/dev/zero" not in reason, reason
        for model in ("sparse", "sparse_config", "sparse_model_settings"):
            reason = wait_for_reason(server, model, "holds more than 4194304 bytes")
            assert "the most a model's settings file may hold" in reason, reason
        assert_serving(server)
    finally:
        server.stop()


def test_a_warmup_file_linked_out_of_its_version_folder_fails_that_version(tmp_path):
    """TF Serving's warmup file is replayed at load: a link to the server's own file would
    have it parsed, and its parse error reported, as a warmup file."""
    private = tmp_path / "private.txt"
    private.write_text(PRIVATE)
    models = tmp_path / "models"
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "ranker")
    version = models / "ranker_tf" / "1"
    shutil.copytree(TEST_MODELS / "ranker_tf" / "1", version)
    warmup = version / "assets.extra" / "tf_serving_warmup_requests"
    warmup.unlink()
    warmup.symlink_to(private)
    server = start_server(models, tmp_path / "server.log")
    try:
        reason = wait_for_reason(server, "ranker_tf", "does not lead to a file inside")
        assert "warmup failed" in reason and "tf_serving_warmup_requests" in reason, reason
        assert "hunter2" not in reason and str(private) not in reason, reason
        assert_serving(server)
    finally:
        server.stop()


def test_a_version_folder_linked_to_itself_loads_and_freezes_nothing(tmp_path):
    """Links from a version folder to itself: the walk over its files (the fingerprint that
    tells a changed folder from a failed one) must end, and off the runtime."""
    models = tmp_path / "models"
    shutil.copytree(EXAMPLE_MODELS / "ranker", models / "ranker")
    server = start_server(models, tmp_path / "server.log", ["--model-poll-secs", "1"])
    try:
        staging = tmp_path / "staging"
        shutil.copytree(EXAMPLE_MODELS / "ranker", staging)
        for link in ("a", "b", "c"):
            (staging / "2" / link).symlink_to(".", target_is_directory=True)
        os.rename(staging, models / "looped")
        wait_ready(server, "looped")
        assert_serving(server)
    finally:
        server.stop()
