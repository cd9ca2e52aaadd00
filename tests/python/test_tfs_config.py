"""Starting from another server's configuration, against the real binary: a TF Serving
repository with models.config and a batching file started with TF Serving's own flag
spellings, one model by --model_name / --model_base_path, a flat model folder (the MLServer
and KServe layout), a --model-dir that is one model or one model file, base paths that try to
lie outside the model directory, and the KServe runtime's own arguments.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
import yaml
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from tensorport_server import ServerStartError, read_log, start_server
from tfs import REPO, TEST_MODELS, make_ndarray, make_tensor_proto

ROWS = np.arange(12, dtype=np.float32).reshape(3, 4)

BATCHING = """\
max_batch_size { value: 8 }
batch_timeout_micros { value: 0 }
max_enqueued_batches { value: 16 }
num_batch_threads { value: 2 }
allowed_batch_sizes: 4
allowed_batch_sizes: 8
pad_variable_length_inputs: false
thread_pool_name { value: "pool" }
"""


def models_config(*entries: str) -> str:
    return "model_config_list {\n" + "".join(f"  config {{ {e} }}\n" for e in entries) + "}\n"


def copy_model(src: str, dst: Path, version: str | None = "1") -> Path:
    """Copies test model `src` version 1 to `dst/<version>/` (or, with `version` None, its
    file straight into `dst`)."""
    if version is None:
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copy(TEST_MODELS / src / "1" / "model.onnx", dst / "model.onnx")
    else:
        shutil.copytree(TEST_MODELS / src / "1", dst / version)
    return dst


@contextlib.contextmanager
def running(log: Path, args: list[str], model_dir: Path | None = None):
    server = start_server(model_dir, log, args)
    try:
        yield server
    finally:
        server.stop()


def tfs_predict(target: str, model: str, rows: np.ndarray, label: str = "") -> tuple[np.ndarray, int]:
    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = model
        if label:
            request.model_spec.version_label = label
        request.inputs["x"].CopyFrom(make_tensor_proto(rows))
        reply = stub.Predict(request, timeout=10)
        return make_ndarray(reply.outputs["y"]), reply.model_spec.version.value


def rest_predict(rest: str, model: str, rows: np.ndarray) -> requests.Response:
    return requests.post(f"{rest}/v1/models/{model}:predict", json={"instances": rows.tolist()}, timeout=10)


def test_a_tf_serving_command_line_serves_its_models_config(tmp_path):
    models = tmp_path / "models"
    copy_model("echo_float32", models / "echo")
    copy_model("echo_float32", models / "echo", "2")
    copy_model("sum_rows", models / "adder")
    copy_model("sum_rows", models / "unlisted")
    config = models / "models.config"
    listed = [
        f'name: "echo" base_path: "{models / "echo"}" model_platform: "onnx" '
        'model_version_policy { all {} } version_labels { key: "stable" value: 1 }',
        'name: "adder" base_path: "adder"',
    ]
    config.write_text(models_config(*listed))
    batching = models / "batching.txt"
    batching.write_text(BATCHING)
    args = ["--port=0", "--rest_api_port=0", f"--model_config_file={config}",
            "--model_config_file_poll_wait_seconds=1", "--enable_batching",
            f"--batching_parameters_file={batching}", "--file_system_poll_wait_seconds=0"]
    with running(tmp_path / "tfs.log", args) as server:
        # TF Serving's stubs: both versions of echo serve, the label picks version 1.
        with grpc.insecure_channel(server.grpc_target) as channel:
            status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
                get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "echo"}), timeout=5)
        assert sorted((s.version, s.state) for s in status.model_version_status) == [(1, 30), (2, 30)]
        echoed, version = tfs_predict(server.grpc_target, "echo", ROWS, label="stable")
        np.testing.assert_array_equal(echoed, ROWS)
        assert version == 1
        summed, _ = tfs_predict(server.grpc_target, "adder", ROWS)
        np.testing.assert_allclose(summed, ROWS.sum(axis=1))

        # The same models through tritonclient; the folder the file does not list is not served.
        client = triton_http.InferenceServerClient(server.rest_url.removeprefix("http://"))
        assert client.is_model_ready("adder")
        assert not client.is_model_ready("unlisted")
        # The batching file is what the model runs with, and what Triton's config reports.
        model_config = client.get_model_config("adder")
        assert model_config["max_batch_size"] == 8, model_config
        assert rest_predict(server.rest_url, "unlisted", ROWS).status_code == 404

        log = read_log(server.log_path)
        assert "batching on" in log and "max_batch_size=8" in log and "instances=2" in log
        assert "thread_pool_name" in log  # named once as a field not applied

        # The file is re-read: adding the unlisted model serves it; a broken file changes nothing.
        config.write_text(models_config(*listed, 'name: "unlisted" base_path: "unlisted"'))
        wait_for(lambda: rest_predict(server.rest_url, "unlisted", ROWS).status_code == 200, server)
        config.write_text("model_config_list { config { nmae: \"typo\" } }\n")
        wait_for(lambda: "nmae" in read_log(server.log_path), server)
        # A list naming a folder that does not exist is refused the same way at run time.
        config.write_text(models_config('name: "adder" base_path: "/no/such/folder"'))
        wait_for(lambda: "/no/such/folder is not an existing folder" in read_log(server.log_path),
                 server)
        assert rest_predict(server.rest_url, "adder", ROWS).status_code == 200
        assert rest_predict(server.rest_url, "unlisted", ROWS).status_code == 200


def wait_for(condition, server, timeout: float = 60.0) -> None:
    """Waits for the server to reach a state (a poll has no completion signal to wait on)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"never happened; server log:\n{read_log(server.log_path)[-4000:]}")


def test_model_name_and_base_path_serve_one_model(tmp_path):
    base = copy_model("sum_rows", tmp_path / "sums")
    args = ["--port=0", "--rest_api_port=0", "--model_name=adder", f"--model_base_path={base}"]
    with running(tmp_path / "one.log", args) as server:
        reply = rest_predict(server.rest_url, "adder", ROWS)
        assert reply.status_code == 200, reply.text
        np.testing.assert_allclose(reply.json()["predictions"], ROWS.sum(axis=1))
        models = requests.post(f"{server.rest_url}/v2/repository/index", json={}, timeout=5).json()
        assert [m["name"] for m in models] == ["adder"]


def test_a_flat_model_folder_is_version_one(tmp_path):
    repo = tmp_path / "repo"
    copy_model("echo_float32", repo / "flat", version=None)
    copy_model("sum_rows", repo / "versioned")
    with running(tmp_path / "flat.log", [], model_dir=repo) as server:
        echoed, version = tfs_predict(server.grpc_target, "flat", ROWS)
        np.testing.assert_array_equal(echoed, ROWS)
        assert version == 1
        assert rest_predict(server.rest_url, "versioned", ROWS).status_code == 200
        assert "serving it as version 1" in read_log(server.log_path)


@pytest.mark.parametrize("layout", ["versions", "flat", "file"])
def test_a_model_dir_holding_one_model_is_served_and_explained(tmp_path, layout):
    # As KServe mounts a storage URI at /mnt/models: a folder or a single file.
    mnt = tmp_path / "mnt" / "models"
    if layout == "versions":
        copy_model("sum_rows", mnt)
        model_dir = mnt
    else:
        copy_model("sum_rows", mnt, version=None)
        model_dir = mnt / "model.onnx" if layout == "file" else mnt
    with running(tmp_path / "kserve.log", ["--model-name", "adder"], model_dir=model_dir) as server:
        client = triton_http.InferenceServerClient(server.rest_url.removeprefix("http://"))
        assert client.is_model_ready("adder")
        rows = triton_http.InferInput("x", list(ROWS.shape), "FP32")
        rows.set_data_from_numpy(ROWS)
        result = client.infer("adder", [rows])
        np.testing.assert_allclose(result.as_numpy("y"), ROWS.sum(axis=1))
        assert "holds a single model" in read_log(server.log_path)


def test_the_operators_config_file_may_name_folders_outside_the_model_dir(tmp_path):
    # The file is the operator's, on the operator's disk: its base paths are not confined
    # (only the network's reload-config is); a folder that does not exist stops the start.
    models = tmp_path / "models"
    copy_model("sum_rows", models / "adder")
    outside = copy_model("sum_rows", tmp_path / "elsewhere" / "adder")
    config = models / "models.config"
    for base in [str(outside), "../elsewhere/adder"]:
        config.write_text(models_config(f'name: "adder" base_path: "{base}"'))
        args = ["--port=0", "--rest_api_port=0", f"--model_config_file={config}"]
        with running(tmp_path / "outside.log", args) as server:
            assert rest_predict(server.rest_url, "adder", ROWS).status_code == 200
    config.write_text(models_config('name: "adder" base_path: "../missing"'))
    with pytest.raises(ServerStartError) as refused:
        start_server(None, tmp_path / "refused.log",
                     ["--port=0", "--rest_api_port=0", f"--model_config_file={config}"])
    message = str(refused.value)
    assert "exited with code" in message
    assert "../missing is not an existing folder" in message, message


def test_bad_configuration_files_stop_the_start_with_a_reason(tmp_path):
    copy_model("sum_rows", tmp_path / "adder")
    config = tmp_path / "models.config"
    config.write_text(models_config('name: "adder" base_path: "adder"'))
    batching = tmp_path / "batching.txt"
    for text, needle in [("max_batch_size { value: 8 } allowed_batch_sizes: 4", "must equal max_batch_size"),
                         ("max_batch_size: 8", "batching-parameters-file")]:
        batching.write_text(text)
        with pytest.raises(ServerStartError) as refused:
            start_server(None, tmp_path / "bad.log",
                         ["--port=0", "--rest_api_port=0", f"--model_config_file={config}",
                          "--enable_batching", f"--batching_parameters_file={batching}"])
        assert needle in str(refused.value)
    batching.write_text("max_batch_size { value: 8 }")
    for text, needle in [(b"\xff\xfe\x00garbage", "cannot read"),
                         (b'model_config_list { config { name: "../adder" } }', "not a plain name"),
                         (b'model_config_list { config { name: "adder" model_platform: "xgboost" } }',
                          "model_platform 'xgboost' is not served here")]:
        config.write_bytes(text)
        with pytest.raises(ServerStartError) as refused:
            start_server(None, tmp_path / "bad.log",
                         ["--port=0", "--rest_api_port=0", f"--model_config_file={config}"])
        assert needle in str(refused.value)
    with pytest.raises(ServerStartError) as refused:
        start_server(None, tmp_path / "none.log", ["--port=0", "--rest_api_port=0"])
    assert "--model-config-file" in str(refused.value)
    with pytest.raises(ServerStartError) as refused:
        start_server(None, tmp_path / "name.log", ["--port=0", "--rest_api_port=0", "--model_name=../up",
                                                    f"--model_base_path={tmp_path / 'adder'}"])
    assert "not a plain name" in str(refused.value)


def test_the_kserve_runtime_arguments_serve_a_single_file_storage_uri(tmp_path):
    # What the ClusterServingRuntime runs, with KServe's template filled in: the storage
    # initializer has put a single-file storageUri at /mnt/models/<file>.
    runtime = yaml.safe_load((REPO / "deploy" / "kserve" / "cluster-serving-runtime.yaml").read_text())
    container = runtime["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == 8080
    mnt = tmp_path / "mnt" / "models"
    mnt.mkdir(parents=True)
    shutil.copy(TEST_MODELS / "sum_rows" / "1" / "model.onnx", mnt / "sum_rows.onnx")
    args = [a.replace("{{.Name}}", "adder").replace("/mnt/models", str(mnt))
             .replace("=8080", "=0").replace("=8081", "=0") for a in container["args"]]
    assert args[0] == "serve"
    with running(tmp_path / "kserve.log", args[1:]) as server:
        # v1 (TF Serving REST, as KServe's v1 protocol) and v2 (Open Inference Protocol).
        v1 = rest_predict(server.rest_url, "adder", ROWS)
        assert v1.status_code == 200, v1.text
        np.testing.assert_allclose(v1.json()["predictions"], ROWS.sum(axis=1))
        client = triton_http.InferenceServerClient(server.rest_url.removeprefix("http://"))
        rows = triton_http.InferInput("x", list(ROWS.shape), "FP32")
        rows.set_data_from_numpy(ROWS)
        np.testing.assert_allclose(client.infer("adder", [rows]).as_numpy("y"), ROWS.sum(axis=1))
        assert requests.get(f"{server.rest_url}/readyz", timeout=5).status_code == 200


def test_the_readme_migration_commands_serve_the_examples(tmp_path):
    # The README's TF Serving command line over examples/, on free ports.
    config = REPO / "examples" / "config"
    args = ["--port=0", "--rest_api_port=0", f"--model-dir={REPO / 'examples' / 'models'}",
            f"--model_config_file={config / 'models.config'}", "--model_config_file_poll_wait_seconds=60",
            "--enable_batching", f"--batching_parameters_file={config / 'batching.txt'}"]
    features = np.zeros((2, 16), dtype=np.float32)
    with running(tmp_path / "readme.log", args) as server:
        for path in ["ranker/labels/stable", "ranker/labels/canary", "ranker"]:
            reply = requests.post(f"{server.rest_url}/v1/models/{path}:predict",
                                  json={"instances": features.tolist()}, timeout=10)
            assert reply.status_code == 200, reply.text
        assert requests.get(f"{server.rest_url}/v1/models/multi_dtype", timeout=5).status_code == 404
        assert "max_batch_size=32" in read_log(server.log_path)


def test_a_triton_command_line_serves_its_repository(tmp_path):
    repo = tmp_path / "repo"
    copy_model("sum_rows", repo / "adder")
    args = [f"--model-repository={repo}", "--http-port=0", "--grpc-port=0", "--repository-poll-secs=0"]
    with running(tmp_path / "triton.log", args) as server:
        client = triton_grpc.InferenceServerClient(server.grpc_target)
        rows = triton_grpc.InferInput("x", list(ROWS.shape), "FP32")
        rows.set_data_from_numpy(ROWS)
        np.testing.assert_allclose(client.infer("adder", [rows]).as_numpy("y"), ROWS.sum(axis=1))


# TF Serving's own large-batch-splitting parameters, as its test of the batching session writes
# them (tensorflow/serving, tensorflow_serving/servables/tensorflow/
# saved_model_bundle_factory_test.cc, `Batching`): a request of 3 rows runs as batches of at
# most 2.
SPLITTING = """\
max_batch_size { value: 4 }
enable_large_batch_splitting { value: True }
max_execution_batch_size { value: 2 }
"""


def test_tf_servings_large_batch_splitting_runs_a_request_as_pieces(tmp_path):
    models = tmp_path / "models"
    copy_model("echo_float32", models / "echo")
    batching = tmp_path / "batching.txt"
    batching.write_text(SPLITTING)
    args = ["--port=0", "--rest_api_port=0", "--model_name=echo", f"--model_base_path={models / 'echo'}",
            "--enable_batching", f"--batching_parameters_file={batching}"]
    with running(tmp_path / "tfs.log", args) as server:
        stats_url = f"{server.rest_url}/v2/models/echo/stats"

        def counts() -> tuple[int, int]:
            stats = requests.get(stats_url, timeout=10).json()["model_stats"][0]
            return stats["execution_count"], stats["inference_count"]

        before = counts()
        echoed, _ = tfs_predict(server.grpc_target, "echo", ROWS)
        # The answer is the request's own rows, in order, from two runs: 2 rows and 1.
        np.testing.assert_array_equal(echoed, ROWS)
        after = counts()
        assert (after[0] - before[0], after[1] - before[1]) == (2, 3), (before, after)
        # A request within the execution size runs once.
        echoed, _ = tfs_predict(server.grpc_target, "echo", ROWS[:2])
        np.testing.assert_array_equal(echoed, ROWS[:2])
        assert counts()[0] - after[0] == 1
