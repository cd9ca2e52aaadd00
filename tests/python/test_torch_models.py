"""TorchScript specifics, end to end: several inputs and outputs (a tuple, a dict), a model.pt
without a declared signature, a forward() that raises for some inputs, and TF Serving's Regress
and Classify with tf.Example features fed to the inputs of their names.

The models are tests/models/torch_* (scripts/make_torch_fixtures.py), with the outputs PyTorch
computed for their reference inputs in reference.json."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tensorflow.core.example import example_pb2, feature_pb2
from tensorflow_serving.apis import classification_pb2, predict_pb2, regression_pb2
from tritonclient.utils import InferenceServerException

from tensorport_server import EXAMPLE_MODELS, TEST_MODELS, start_server
from tfs import assert_close, make_ndarray, make_tensor_proto

TIMEOUT = 10


def committed(model: str) -> tuple[dict, dict]:
    data = json.loads((TEST_MODELS / model / "reference.json").read_text())

    def arrays(entries):
        return {name: np.array(e["data"], dtype=e["dtype"]).reshape(e["shape"])
                for name, e in entries.items()}

    return arrays(data["inputs"]), arrays(data["outputs"])


# ---------------------------------------------------------------- several inputs and outputs

def test_tuple_outputs_over_kserve_grpc(triton_grpc):
    inputs, want = committed("torch_pair")
    tensors = []
    for name in ("y", "x"):  # not forward()'s order: inputs are matched by name
        tensor = grpcclient.InferInput(name, list(inputs[name].shape), "FP32")
        tensor.set_data_from_numpy(inputs[name])
        tensors.append(tensor)
    result = triton_grpc.infer("torch_pair", tensors)
    assert {o.name for o in result.get_response().outputs} == {"sum", "product"}
    assert_close(result.as_numpy("sum"), want["sum"])
    assert_close(result.as_numpy("product"), want["product"])


def test_dict_outputs_over_tfserving_grpc_with_an_output_filter(prediction_stub):
    inputs, want = committed("torch_dict")
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "torch_dict"
    for name, value in inputs.items():
        req.inputs[name].CopyFrom(make_tensor_proto(value))
    resp = prediction_stub.Predict(req, timeout=TIMEOUT)
    assert set(resp.outputs) == {"weighted", "count"}
    assert_close(make_ndarray(resp.outputs["weighted"]), want["weighted"])
    np.testing.assert_array_equal(make_ndarray(resp.outputs["count"]), want["count"])

    req.output_filter.append("count")
    resp = prediction_stub.Predict(req, timeout=TIMEOUT)
    assert set(resp.outputs) == {"count"}


def test_dict_outputs_over_tfserving_rest_columns(rest_url):
    inputs, want = committed("torch_dict")
    body = {"inputs": {name: value.tolist() for name, value in inputs.items()}}
    response = requests.post(f"{rest_url}/v1/models/torch_dict:predict", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    outputs = response.json()["outputs"]
    assert_close(np.array(outputs["weighted"], dtype=np.float64), want["weighted"])
    np.testing.assert_array_equal(np.array(outputs["count"], dtype=np.int64), want["count"])


def test_kserve_metadata_comes_from_config_toml(triton_http):
    meta = triton_http.get_model_metadata("torch_dict")
    assert meta["platform"] == "pytorch_libtorch"
    assert meta["inputs"] == [{"name": "ids", "datatype": "INT64", "shape": [-1, 4]},
                              {"name": "weights", "datatype": "FP64", "shape": [-1, 4]}]
    assert meta["outputs"] == [{"name": "weighted", "datatype": "FP64", "shape": [-1, 1]},
                               {"name": "count", "datatype": "INT64", "shape": [-1]}]


def test_a_wrong_dtype_for_one_of_two_inputs_is_invalid_argument(triton_grpc):
    inputs, _ = committed("torch_dict")
    ids = grpcclient.InferInput("ids", list(inputs["ids"].shape), "INT32")
    ids.set_data_from_numpy(inputs["ids"].astype(np.int32))
    weights = grpcclient.InferInput("weights", list(inputs["weights"].shape), "FP64")
    weights.set_data_from_numpy(inputs["weights"])
    with pytest.raises(InferenceServerException) as err:
        triton_grpc.infer("torch_dict", [ids, weights])
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT", err.value
    assert "ids" in err.value.message() and "int64" in err.value.message()


# ---------------------------------------------------------------- tf.Example inputs

def float_example(**features) -> example_pb2.Example:
    return example_pb2.Example(features=feature_pb2.Features(feature={
        name: feature_pb2.Feature(float_list=feature_pb2.FloatList(value=values))
        for name, values in features.items()}))


def test_regress_feeds_each_feature_to_the_input_of_its_name(prediction_stub, rest_url):
    inputs, want = committed("ranker_torch")
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = "ranker_torch"
    request.input.example_list.examples.extend(
        float_example(features=row.tolist()) for row in inputs["features"])
    response = prediction_stub.Regress(request, timeout=TIMEOUT)
    values = [r.value for r in response.result.regressions]
    np.testing.assert_allclose(values, want["score"].reshape(-1), rtol=1e-5, atol=1e-5)

    body = {"examples": [{"features": [float(v) for v in row]} for row in inputs["features"]]}
    reply = requests.post(f"{rest_url}/v1/models/ranker_torch:regress", json=body, timeout=TIMEOUT)
    assert reply.status_code == 200, reply.text
    np.testing.assert_allclose(reply.json()["result"], want["score"].reshape(-1), rtol=1e-5, atol=1e-5)


def test_a_torchscript_model_without_classes_or_scores_cannot_classify(prediction_stub):
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = "torch_pair"
    request.input.example_list.examples.append(float_example(x=[1.0, 2.0, 3.0], y=[1.0, 1.0, 1.0]))
    with pytest.raises(grpc.RpcError) as err:
        prediction_stub.Classify(request, timeout=TIMEOUT)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cannot classify" in err.value.details()


# ---------------------------------------------------------------- forward() that raises

def raises_body(values) -> dict:
    x = np.asarray(values, dtype=np.float32)
    return {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                        "data": x.reshape(-1).tolist()}]}


def test_a_raising_forward_fails_that_request_only(rest_url, triton_grpc):
    url = f"{rest_url}/v2/models/torch_raises/infer"
    response = requests.post(url, json=raises_body([[1.0, -1.0]]), timeout=TIMEOUT)
    assert response.status_code == 500, response.text
    assert "negative input" in response.json()["error"]

    x = grpcclient.InferInput("x", [1, 2], "FP32")
    x.set_data_from_numpy(np.array([[-3.0, 1.0]], dtype=np.float32))
    with pytest.raises(InferenceServerException) as err:
        triton_grpc.infer("torch_raises", [x])
    assert err.value.status() == "StatusCode.INTERNAL", err.value

    response = requests.post(url, json=raises_body([[1.0, 2.5]]), timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [2.0, 5.0]


def test_in_a_merged_batch_only_the_raising_request_fails(tmp_path):
    models = tmp_path / "models"
    shutil.copytree(TEST_MODELS / "torch_raises", models / "torch_raises")
    with open(models / "torch_raises" / "config.toml", "a") as config:
        config.write("\n[batching]\nmax_batch_size = 64\nmax_queue_delay_us = 20000\n")
    server = start_server(models, tmp_path / "server.log")
    try:
        url = f"{server.rest_url}/v2/models/torch_raises/infer"
        values = [float(i) if i % 4 else -float(i + 1) for i in range(16)]

        def one(value: float) -> requests.Response:
            return requests.post(url, json=raises_body([[value, 1.0]]), timeout=TIMEOUT)

        with ThreadPoolExecutor(max_workers=16) as pool:
            responses = list(pool.map(one, values))
        for value, response in zip(values, responses):
            if value < 0:
                assert response.status_code == 500, response.text
                assert "negative input" in response.json()["error"]
            else:
                assert response.status_code == 200, response.text
                assert response.json()["outputs"][0]["data"] == [2 * value, 2.0]
        stats = requests.get(f"{server.rest_url}/v2/models/torch_raises/stats",
                             timeout=TIMEOUT).json()["model_stats"][0]
        assert stats["inference_stats"]["fail"]["count"] == 4, stats
    finally:
        server.stop()


# ---------------------------------------------------------------- no declared signature

def test_a_model_pt_without_a_signature_is_refused_and_others_serve(tmp_path):
    models = tmp_path / "models"
    shutil.copytree(TEST_MODELS / "ranker_torch" / "1", models / "unsigned" / "1")
    (models / "ranker").mkdir()
    (models / "ranker" / "1").symlink_to(EXAMPLE_MODELS / "ranker" / "1", target_is_directory=True)
    server = start_server(models, tmp_path / "server.log")
    try:
        body = requests.get(f"{server.rest_url}/v1/models/unsigned", timeout=TIMEOUT).json()
        (status,) = body["model_version_status"]
        assert status["state"] == "END", status
        message = status["status"]["error_message"]
        for needed in ("config.toml", "[[input]]", "[[output]]", "dtype", "shape"):
            assert needed in message, message
        ready = requests.get(f"{server.rest_url}/v2/models/unsigned/ready", timeout=TIMEOUT)
        assert ready.status_code != 200

        x = np.zeros((1, 16), dtype=np.float32)
        response = requests.post(f"{server.rest_url}/v1/models/ranker:predict",
                                 json={"instances": x.tolist()}, timeout=TIMEOUT)
        assert response.status_code == 200, response.text
    finally:
        server.stop()
