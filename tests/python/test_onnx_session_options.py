"""ONNX Runtime session options per model: config.pbtxt's `optimization { graph { level } }`
and the ONNX Runtime backend's `parameters`, config.toml's `[runtime]` keys. A model with
options set answers as ONNX Runtime itself does; `optimized_model_file` is written where the
version folder says, and loads again over the file it left; a value of the wrong kind, or a
path out of the version folder, fails that model's load with a message naming the key.
"""

from __future__ import annotations

import shutil

import numpy as np
import onnxruntime
import pytest
import requests
import tritonclient.http as httpclient

from tensorport_server import EXAMPLE_MODELS, ServerStartError, start_server

RANKER = EXAMPLE_MODELS / "ranker" / "2" / "model.onnx"
FEATURES = np.arange(48, dtype=np.float32).reshape(3, 16) / 48.0
TIMEOUT = 30

TUNED_PBTXT = """
backend: "onnxruntime"
optimization { graph { level: 2 } }
parameters { key: "enable_mem_pattern" value: { string_value: "0" } }
parameters { key: "enable_mem_arena" value: { string_value: "0" } }
parameters { key: "execution_mode" value: { string_value: "1" } }
"""

BAD_FLAG_PBTXT = """
backend: "onnxruntime"
parameters { key: "enable_mem_arena" value: { string_value: "2" } }
"""

MODELS = {
    "tuned": ("config.pbtxt", TUNED_PBTXT),
    "cached": ("config.toml", '[runtime]\noptimized_model_file = "optimized.onnx"\n'
                              'graph_optimization = "extended"\n'),
    "bad_flag": ("config.pbtxt", BAD_FLAG_PBTXT),
    "bad_level": ("config.toml", '[runtime]\ngraph_optimization = "fast"\n'),
    "escape": ("config.toml", '[runtime]\noptimized_model_file = "../../escape.onnx"\n'),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("options") / "models"
    for name, (file_name, text) in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        shutil.copy(RANKER, root / name / "1" / "model.onnx")
        (root / name / file_name).write_text(text)
    return root


@pytest.fixture(scope="module")
def server(repo):
    try:
        srv = start_server(repo, repo.parent / "server.log")
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    client = httpclient.InferenceServerClient(server.rest_url.split("://", 1)[-1])
    yield client
    client.close()


def reference(model_path) -> np.ndarray:
    """The scores ONNX Runtime itself gives, with its defaults."""
    session = onnxruntime.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return session.run(["score"], {"features": FEATURES})[0]


def infer(client, model) -> np.ndarray:
    inp = httpclient.InferInput("features", list(FEATURES.shape), "FP32")
    inp.set_data_from_numpy(FEATURES)
    return client.infer(model, [inp]).as_numpy("score")


def index(server) -> dict[str, dict]:
    answer = requests.post(f"{server.rest_url}/v2/repository/index", json={}, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    return {row["name"]: row for row in answer.json()}


def test_a_model_with_tritons_session_parameters_answers_as_onnx_runtime_does(server, client):
    assert client.is_model_ready("tuned"), server.log()
    np.testing.assert_allclose(infer(client, "tuned"), reference(RANKER), rtol=1e-5, atol=1e-6)
    # Every setting of that config.pbtxt is applied: none is named as ignored.
    warnings = [line for line in server.log().splitlines() if "does not apply" in line]
    assert not [line for line in warnings if "tuned" in line], warnings


def test_the_optimized_model_file_is_written_in_the_version_folder_and_loads(server, client, repo):
    assert client.is_model_ready("cached"), server.log()
    optimized = repo / "cached" / "1" / "optimized.onnx"
    assert optimized.is_file(), server.log()
    want = reference(RANKER)
    np.testing.assert_allclose(reference(optimized), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(infer(client, "cached"), want, rtol=1e-5, atol=1e-6)


def test_a_model_loads_again_over_the_optimized_file_it_left(server, client, repo):
    assert client.is_model_ready("cached"), server.log()
    assert (repo / "cached" / "1" / "optimized.onnx").is_file()
    unload = requests.post(f"{server.rest_url}/v2/repository/models/cached/unload", timeout=TIMEOUT)
    assert unload.status_code == 200, unload.text
    load = requests.post(f"{server.rest_url}/v2/repository/models/cached/load", timeout=TIMEOUT)
    assert load.status_code == 200, load.text
    assert client.is_model_ready("cached"), server.log()
    np.testing.assert_allclose(infer(client, "cached"), reference(RANKER), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model, needles", [
    ("bad_flag", ["enable_mem_arena", '"2"']),
    ("bad_level", ["graph_optimization", '"fast"']),
    ("escape", ["optimized_model_file", "../../escape.onnx", "inside the version folder"]),
])
def test_a_value_that_cannot_work_fails_that_load_naming_the_key(server, client, model, needles):
    assert not client.is_model_ready(model)
    row = index(server)[model]
    assert row["state"] != "READY", row
    for needle in needles:
        assert needle in row["reason"], row
    # The other models serve meanwhile.
    assert client.is_model_ready("tuned")


def test_an_optimized_file_out_of_the_model_folder_is_never_written(server, repo):
    assert "escape" in index(server)
    assert not (repo.parent / "escape.onnx").exists()
    assert not (repo / "escape.onnx").exists()
