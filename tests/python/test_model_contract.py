"""config.pbtxt as the contract Triton makes of it, checked with tritonclient over HTTP and
gRPC: `max_batch_size` reported and enforced, declared tensors checked against the model file
(a contradiction fails the load, naming the field), `--strict-model-config`, `reshape`, and
`label_filename` with the classification extension (`class_count`, Triton's
`score:index:label` strings, as its image_client example reads them).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tensorport_server import EXAMPLE_MODELS, ServerStartError, server_binary, start_server

RANKER_INPUT = 'input [ { name: "features" data_type: TYPE_FP32 dims: [ 16 ] } ]'
RANKER_OUTPUT = 'output [ { name: "score" data_type: TYPE_FP32 dims: [ 1 ] } ]'

CONFIGS = {
    # The case: a batch dimension without dynamic batching, max_batch_size 8.
    "capped": f'backend: "onnxruntime"\nmax_batch_size: 8\n{RANKER_INPUT}\n{RANKER_OUTPUT}\n',
    # Contradictions: each is a load error naming the tensor and the field.
    "wrong_dtype": 'max_batch_size: 8\ninput [ { name: "features" data_type: TYPE_INT64 dims: [ 16 ] } ]\n'
                   + RANKER_OUTPUT,
    "wrong_name": 'max_batch_size: 8\ninput [ { name: "feature" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
                  + RANKER_OUTPUT,
    "wrong_dims": 'max_batch_size: 8\ninput [ { name: "features" data_type: TYPE_FP32 dims: [ 12 ] } ]\n'
                  + RANKER_OUTPUT,
    # Nothing declared: completed from the model file (Triton's --strict-model-config=false).
    "completed": 'backend: "onnxruntime"\nmax_batch_size: 4\n',
    # Clients send [batch, 4, 4]; the model takes [batch, 16] and answers [batch, 1], which
    # clients see as [batch].
    "reshaped": 'max_batch_size: 8\n'
                'input [ { name: "features" data_type: TYPE_FP32 dims: [ 4, 4 ] reshape { shape: [ 16 ] } } ]\n'
                'output [ { name: "score" data_type: TYPE_FP32 dims: [ ] reshape { shape: [ 1 ] } } ]\n',
}

# multi_dtype's `weighted` output, [batch, 3] float64, as three scored classes.
CLASSIFIED = ('max_batch_size: 8\n'
              'output [ { name: "weighted" data_type: TYPE_FP64 dims: [ 3 ] label_filename: "labels.txt" } ]\n')
LABELS = "click\nlike\nshare\n"

FEATURES = (np.arange(32, dtype=np.float32).reshape(2, 16) / 32.0)


def repository(root):
    for name, text in CONFIGS.items():
        shutil.copytree(EXAMPLE_MODELS / "ranker", root / name)
        (root / name / "config.pbtxt").write_text(text)
    shutil.copytree(EXAMPLE_MODELS / "ranker", root / "reference")
    shutil.copytree(EXAMPLE_MODELS / "multi_dtype", root / "classified")
    (root / "classified" / "config.pbtxt").write_text(CLASSIFIED)
    (root / "classified" / "labels.txt").write_text(LABELS)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = repository(tmp_path_factory.mktemp("contract-repo"))
    try:
        server = start_server(root, root.parent / "contract.log")
    except ServerStartError as err:
        pytest.fail(str(err), pytrace=False)
    yield server
    server.stop()


def http_client(server):
    return httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))


def features_input(module, rows):
    data = np.tile(FEATURES, (rows // 2 + 1, 1))[:rows]
    inp = module.InferInput("features", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    return inp


def test_max_batch_size_is_reported_as_set_and_enforced(server):
    client = http_client(server)
    grpc = grpcclient.InferenceServerClient(server.grpc_target)
    try:
        assert client.get_model_config("capped")["max_batch_size"] == 8
        assert grpc.get_model_config("capped").config.max_batch_size == 8
        assert client.infer("capped", [features_input(httpclient, 8)]).as_numpy("score").shape == (8, 1)
        for module, target in ((httpclient, client), (grpcclient, grpc)):
            with pytest.raises(InferenceServerException) as refused:
                target.infer("capped", [features_input(module, 16)])
            message = str(refused.value)
            assert "batch of 16" in message and "max_batch_size of 8" in message, message
        # The refusal disturbed nothing: the next request is answered.
        assert grpc.infer("capped", [features_input(grpcclient, 2)]).as_numpy("score").shape == (2, 1)
    finally:
        client.close()
        grpc.close()


@pytest.mark.parametrize("model, needle", [
    ("wrong_dtype", "config.pbtxt input 'features': data_type INT64 contradicts the model file, whose input is FP32"),
    ("wrong_name", "config.pbtxt input 'feature': the model file has no input of that name"),
    ("wrong_dims", "config.pbtxt input 'features': dims [12] contradicts the model file's shape [-1, 16]"),
])
def test_a_contradiction_fails_the_load_naming_the_field(server, model, needle):
    client = http_client(server)
    try:
        assert not client.is_model_ready(model)
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
        assert index[model]["state"] == "UNAVAILABLE", index[model]
        assert needle in index[model]["reason"], index[model]
        assert client.is_model_ready("reference")
    finally:
        client.close()


def test_what_is_not_declared_is_completed_from_the_model_file(server):
    client = http_client(server)
    try:
        config = client.get_model_config("completed")
        assert config["max_batch_size"] == 4
        assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [("features", "TYPE_FP32", [16])]
        answer = client.infer("completed", [features_input(httpclient, 2)]).as_numpy("score")
        expected = client.infer("reference", [features_input(httpclient, 2)]).as_numpy("score")
        np.testing.assert_array_equal(answer, expected)
    finally:
        client.close()


def test_strict_model_config_refuses_what_is_not_declared(tmp_path):
    root = repository(tmp_path / "repo")
    line = ["--model-repository=" + str(root), "--strict-model-config=true",
            "--http-port=0", "--grpc-port=0", "--metrics-port=0"]
    server = start_server(None, tmp_path / "log", line, program=[str(server_binary()), "tritonserver"])
    try:
        client = http_client(server)
        assert client.is_model_ready("capped")
        assert not client.is_model_ready("completed")
        reason = {e["name"]: e for e in client.get_model_repository_index()}["completed"]["reason"]
        assert "--strict-model-config" in reason and "features" in reason, reason
        client.close()
    finally:
        server.stop()


def test_a_reshape_serves_the_declared_shape_over_the_files(server):
    client = http_client(server)
    grpc = grpcclient.InferenceServerClient(server.grpc_target)
    try:
        metadata = client.get_model_metadata("reshaped")
        assert metadata["inputs"][0]["shape"] == [-1, 4, 4]
        assert metadata["outputs"][0]["shape"] == [-1]
        expected = client.infer("reference", [features_input(httpclient, 2)]).as_numpy("score")
        for module, target in ((httpclient, client), (grpcclient, grpc)):
            inp = module.InferInput("features", [2, 4, 4], "FP32")
            inp.set_data_from_numpy(FEATURES.reshape(2, 4, 4))
            score = target.infer("reshaped", [inp]).as_numpy("score")
            assert score.shape == (2,)
            np.testing.assert_array_equal(score, expected.reshape(2))
        wrong = httpclient.InferInput("features", [2, 16], "FP32")
        wrong.set_data_from_numpy(FEATURES)
        with pytest.raises(InferenceServerException) as refused:
            client.infer("reshaped", [wrong])
        assert "features" in str(refused.value), str(refused.value)
    finally:
        client.close()
        grpc.close()


def classified_inputs(module):
    values = {
        "x_double": np.array([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0]], dtype=np.float64),
        "x_int32": np.ones((2, 3), dtype=np.int32),
        "flag": np.ones((2, 3), dtype=bool),
        "label": np.array([b"a", b"b"], dtype=np.object_),
    }
    dtypes = {"x_double": "FP64", "x_int32": "INT32", "flag": "BOOL", "label": "BYTES"}
    inputs = []
    for name, data in values.items():
        inp = module.InferInput(name, list(data.shape), dtypes[name])
        inp.set_data_from_numpy(data)
        inputs.append(inp)
    return inputs


def test_class_count_answers_the_best_classes_with_their_labels(server):
    expected = [[b"3.000000:2:share", b"2.000000:1:like"], [b"3.000000:0:click", b"2.000000:2:share"]]
    client = http_client(server)
    grpc = grpcclient.InferenceServerClient(server.grpc_target)
    try:
        for module, target in ((httpclient, client), (grpcclient, grpc)):
            for binary in ((True, False) if module is httpclient else (None,)):
                kwargs = {} if binary is None else {"binary_data": binary}
                wanted = [module.InferRequestedOutput("weighted", class_count=2, **kwargs)]
                answer = target.infer("classified", classified_inputs(module), outputs=wanted)
                classes = answer.as_numpy("weighted")
                assert classes.shape == (2, 2), classes
                assert [[bytes(c) if not isinstance(c, str) else c.encode() for c in row] for row in classes] == expected
        # Without class_count the scores come back as they are.
        plain = client.infer("classified", classified_inputs(httpclient)).as_numpy("weighted")
        assert plain.dtype == np.float64 and plain.shape == (2, 3)
        # tritonclient never sends a zero count; a hand-written request can.
        body = {"inputs": [{"name": "x_double", "shape": [1, 3], "datatype": "FP64", "data": [1, 2, 3]},
                           {"name": "x_int32", "shape": [1, 3], "datatype": "INT32", "data": [1, 1, 1]},
                           {"name": "flag", "shape": [1, 3], "datatype": "BOOL", "data": [True, True, True]},
                           {"name": "label", "shape": [1], "datatype": "BYTES", "data": ["a"]}],
                "outputs": [{"name": "weighted", "parameters": {"classification": 0}}]}
        refused = requests.post(f"{server.rest_url}/v2/models/classified/infer", json=body, timeout=10)
        assert refused.status_code == 400 and "classification" in refused.text, refused.text
    finally:
        client.close()
        grpc.close()
