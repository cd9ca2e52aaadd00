"""A Triton model repository served as it is: `config.pbtxt` per model, read with Triton's
own field names (batching, version policy, instance groups, a renamed model file), checked
with tritonclient over HTTP and gRPC.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tensorport_server import EXAMPLE_MODELS, ServerStartError, start_server

RANKER_PBTXT = """
name: "ranker"
backend: "onnxruntime"
max_batch_size: 8
default_model_filename: "ranker_mlp.onnx"
version_policy: { all { } }
input [
  {
    name: "features"
    data_type: TYPE_FP32
    dims: [ 16 ]
  }
]
output [
  {
    name: "score"
    data_type: TYPE_FP32
    dims: [ 1 ]
  }
]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  default_queue_policy { max_queue_size: 32 }
}
instance_group [ { count: 2, kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
parameters { key: "enable_mem_arena" value: { string_value: "1" } }
parameters { key: "memory.enable_memory_arena_shrinkage" value: { string_value: "cpu:0" } }
"""

FEATURES = np.arange(32, dtype=np.float32).reshape(2, 16) / 32.0


def triton_repository(root):
    """`root/ranker/{1,2}/ranker_mlp.onnx` with a config.pbtxt, `root/reference` as shipped."""
    ranker = root / "ranker"
    for version in ("1", "2"):
        (ranker / version).mkdir(parents=True)
        shutil.copy(EXAMPLE_MODELS / "ranker" / version / "model.onnx", ranker / version / "ranker_mlp.onnx")
    (ranker / "config.pbtxt").write_text(RANKER_PBTXT)
    # The same two versions in tensorport's own layout, to compare answers with.
    shutil.copytree(EXAMPLE_MODELS / "ranker", root / "reference")
    (root / "reference" / "config.toml").write_text("[version_policy]\nall = true\n")
    return root


@pytest.fixture(scope="module")
def triton_server(tmp_path_factory):
    root = triton_repository(tmp_path_factory.mktemp("triton-repo"))
    try:
        server = start_server(root, root.parent / "triton-repo.log")
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)
    yield server
    server.stop()


def infer_http(client, model, version):
    inp = httpclient.InferInput("features", list(FEATURES.shape), "FP32")
    inp.set_data_from_numpy(FEATURES)
    return client.infer(model, [inp], model_version=version).as_numpy("score")


def test_every_version_of_a_renamed_model_file_serves(triton_server):
    client = httpclient.InferenceServerClient(triton_server.rest_url.split("://", 1)[-1])
    try:
        for version in ("1", "2"):
            assert client.is_model_ready("ranker", version), triton_server.log()
            got = infer_http(client, "ranker", version)
            want = infer_http(client, "reference", version)
            np.testing.assert_allclose(got, want, rtol=1e-6)
        # The two versions have different weights: both really are served.
        assert not np.allclose(infer_http(client, "ranker", "1"), infer_http(client, "ranker", "2"))
    finally:
        client.close()


def test_grpc_clients_see_the_same_model(triton_server):
    client = grpcclient.InferenceServerClient(triton_server.grpc_target)
    try:
        inp = grpcclient.InferInput("features", list(FEATURES.shape), "FP32")
        inp.set_data_from_numpy(FEATURES)
        result = client.infer("ranker", [inp], model_version="2")
        assert result.as_numpy("score").shape == (2, 1)
        metadata = client.get_model_metadata("ranker", "2")
        assert [i.name for i in metadata.inputs] == ["features"]
    finally:
        client.close()


def test_the_config_endpoint_reports_what_the_model_runs_with(triton_server):
    client = httpclient.InferenceServerClient(triton_server.rest_url.split("://", 1)[-1])
    try:
        config = client.get_model_config("ranker", "2")
    finally:
        client.close()
    assert config["max_batch_size"] == 8
    assert config["dynamic_batching"]["preferred_batch_size"] == [4, 8]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert config["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 32
    assert [g["count"] for g in config["instance_group"]] == [2]
    assert [i["dims"] for i in config["input"]] == [[16]]
    grpc = grpcclient.InferenceServerClient(triton_server.grpc_target)
    try:
        over_grpc = grpc.get_model_config("ranker", "2").config
    finally:
        grpc.close()
    assert over_grpc.max_batch_size == 8
    assert list(over_grpc.dynamic_batching.preferred_batch_size) == [4, 8]
    assert over_grpc.instance_group[0].count == 2


def test_fields_not_applied_are_named_once_in_the_log(triton_server):
    log = triton_server.log()
    # The ONNX Runtime backend's thread count and arena switch are applied ([runtime]); the
    # arena shrinkage after runs is not.
    assert "parameters memory.enable_memory_arena_shrinkage" in log, log
    assert "enable_mem_arena" not in log, log
    assert "intra_op_thread_count" not in log, log
    assert log.count("config.pbtxt sets fields this server does not apply") == 2, log  # once per version


def test_a_config_pbtxt_that_cannot_work_is_reported_and_others_serve(tmp_path):
    root = triton_repository(tmp_path / "repo")
    (root / "ranker" / "config.pbtxt").write_text('max_batch_size: 4\nmax_bach_size: 8\n')
    server = start_server(root, tmp_path / "server.log")
    try:
        client = httpclient.InferenceServerClient(server.rest_url.split("://", 1)[-1])
        assert client.is_model_ready("reference")
        assert not client.is_model_ready("ranker")
        assert "max_bach_size" in server.log()
        client.close()
    finally:
        server.stop()
