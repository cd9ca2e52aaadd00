"""TF Serving's Classify, Regress and MultiInference with tf.Example inputs, over gRPC with the
official stubs and over REST (`:classify`, `:regress`), on the ONNX fixtures made by
scripts/make_example_input_models.py:

- example_regressor: x float32 [-1, 2], n int64 [-1] -> outputs = x[:,0] + 2*x[:,1] + n
- example_classifier: x float32 [-1, 2] -> scores = softmax(x), classes = ["neg", "pos"],
  outputs = softmax(x)[:, 1]

Also: Predict answers in TF Serving's typed fields by default.
"""

from __future__ import annotations

import base64

import grpc
import numpy as np
import pytest
from tensorflow.core.example import example_pb2, feature_pb2
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    inference_pb2,
    predict_pb2,
    regression_pb2,
)

from tfs import make_tensor_proto

TIMEOUT = 10
REGRESSOR = "example_regressor"
CLASSIFIER = "example_classifier"


def feature(values) -> feature_pb2.Feature:
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    if all(isinstance(v, bytes) for v in values):
        return feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=values))
    if all(isinstance(v, int) for v in values):
        return feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=values))
    return feature_pb2.Feature(float_list=feature_pb2.FloatList(value=values))


def example(**features) -> example_pb2.Example:
    return example_pb2.Example(
        features=feature_pb2.Features(feature={k: feature(v) for k, v in features.items()}))


def fill(request, model, examples, context=None, signature=""):
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    if context is None:
        request.input.example_list.examples.extend(examples)
    else:
        request.input.example_list_with_context.examples.extend(examples)
        request.input.example_list_with_context.context.CopyFrom(context)
    return request


def softmax(row):
    e = np.exp(np.array(row, dtype=np.float64) - max(row))
    return e / e.sum()


def expect_error(call, request, code, *words):
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=TIMEOUT)
    assert err.value.code() == code, err.value.details()
    details = err.value.details() or ""
    for word in words:
        assert word in details, details
    return details


# ---------------------------------------------------------------- gRPC

def test_grpc_regress_feeds_each_feature_to_its_input(prediction_stub):
    request = fill(regression_pb2.RegressionRequest(), REGRESSOR,
                   [example(x=[1.0, 2.0], n=1), example(x=[3.0, 4.0], n=0)])
    response = prediction_stub.Regress(request, timeout=TIMEOUT)
    assert response.model_spec.name == REGRESSOR
    assert response.model_spec.version.value == 1
    assert [r.value for r in response.result.regressions] == pytest.approx([6.0, 11.0])


def test_grpc_regress_takes_context_features_and_examples_win(prediction_stub):
    request = fill(regression_pb2.RegressionRequest(), REGRESSOR,
                   [example(x=[1.0, 1.0]), example(x=[1.0, 1.0], n=100)],
                   context=example(n=10))
    response = prediction_stub.Regress(request, timeout=TIMEOUT)
    assert [r.value for r in response.result.regressions] == pytest.approx([13.0, 103.0])


def test_grpc_classify_returns_classes_and_scores(prediction_stub):
    rows = [[0.0, 1.0], [2.0, -1.0], [0.5, 0.5]]
    request = fill(classification_pb2.ClassificationRequest(), CLASSIFIER,
                   [example(x=row) for row in rows])
    response = prediction_stub.Classify(request, timeout=TIMEOUT)
    assert response.model_spec.name == CLASSIFIER
    result = response.result.classifications
    assert len(result) == 3
    for row, classes in zip(rows, result):
        assert [c.label for c in classes.classes] == ["neg", "pos"]
        assert [c.score for c in classes.classes] == pytest.approx(softmax(row), abs=1e-6)


def test_grpc_multi_inference_runs_every_task(prediction_stub):
    request = inference_pb2.MultiInferenceRequest()
    for method in ("tensorflow/serving/classify", "tensorflow/serving/regress"):
        task = request.tasks.add()
        task.model_spec.name = CLASSIFIER
        task.method_name = method
    request.input.example_list.examples.extend([example(x=[0.0, 1.0]), example(x=[1.0, 0.0])])
    response = prediction_stub.MultiInference(request, timeout=TIMEOUT)
    assert len(response.results) == 2
    classes, regression = response.results
    assert classes.model_spec.name == CLASSIFIER
    assert classes.WhichOneof("result") == "classification_result"
    first = classes.classification_result.classifications[0].classes
    assert [c.label for c in first] == ["neg", "pos"]
    assert regression.WhichOneof("result") == "regression_result"
    values = [r.value for r in regression.regression_result.regressions]
    assert values == pytest.approx([softmax([0, 1])[1], softmax([1, 0])[1]], abs=1e-6)


@pytest.mark.parametrize("case", [
    # model, examples, words the message must hold
    pytest.param((REGRESSOR, [example(x=[1.0, 2.0])], ["no feature 'n'"]), id="missing-feature"),
    pytest.param((REGRESSOR, [example(x=[1, 2], n=1.5)], ["float_list", "int64"]), id="wrong-kind"),
    pytest.param((REGRESSOR, [example(x=[1.0, 2.0], n=1), example(x=[1.0], n=1)],
                  ["every example"]), id="ragged"),
    pytest.param((REGRESSOR, [example(x=[1.0, 2.0], n=[1, 2])], ["one value per example"]),
                 id="two-values-for-a-1d-input"),
    pytest.param((REGRESSOR, [example(x=[1.0, 2.0, 3.0], n=1)], ["shape"]), id="wrong-width"),
    pytest.param((REGRESSOR, [example(x=[b"a", b"b"], n=1)], ["bytes_list"]), id="bytes-for-float"),
    pytest.param((REGRESSOR, [], ["no examples"]), id="no-examples"),
    pytest.param(("echo_bool", [example(x=1)], ["bool", "float_list"]), id="unfeedable-dtype"),
])
def test_grpc_regress_refuses_examples_that_do_not_fit(prediction_stub, case):
    model, examples, words = case
    request = fill(regression_pb2.RegressionRequest(), model, examples)
    expect_error(prediction_stub.Regress, request, grpc.StatusCode.INVALID_ARGUMENT, *words)


def test_models_that_cannot_classify_or_regress_are_a_clear_invalid_argument(prediction_stub):
    request = fill(classification_pb2.ClassificationRequest(), "echo_float32",
                   [example(x=[1.0])])
    expect_error(prediction_stub.Classify, request, grpc.StatusCode.INVALID_ARGUMENT,
                 "cannot classify", "classes", "scores")
    # Three outputs, none is "outputs" or "scores" -> refused before running.
    request = fill(regression_pb2.RegressionRequest(), "multi_dtype", [example(x_double=[1.0])])
    expect_error(prediction_stub.Regress, request, grpc.StatusCode.INVALID_ARGUMENT,
                 "cannot regress")


def test_requests_without_input_or_model(prediction_stub):
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = REGRESSOR
    expect_error(prediction_stub.Regress, request, grpc.StatusCode.INVALID_ARGUMENT, "no input")
    request = fill(regression_pb2.RegressionRequest(), "no_such_model", [example(x=1.0)])
    expect_error(prediction_stub.Regress, request, grpc.StatusCode.NOT_FOUND)
    request = fill(classification_pb2.ClassificationRequest(), CLASSIFIER, [example(x=[1.0, 2.0])])
    request.model_spec.version.value = 7
    expect_error(prediction_stub.Classify, request, grpc.StatusCode.NOT_FOUND)


def test_multi_inference_rules(prediction_stub):
    def request(*tasks):
        req = inference_pb2.MultiInferenceRequest()
        for model, method in tasks:
            task = req.tasks.add()
            task.model_spec.name = model
            task.method_name = method
        req.input.example_list.examples.append(example(x=[1.0, 2.0], n=1))
        return req

    regress = "tensorflow/serving/regress"
    expect_error(prediction_stub.MultiInference, request(), grpc.StatusCode.INVALID_ARGUMENT,
                 "no tasks")
    expect_error(prediction_stub.MultiInference,
                 request((REGRESSOR, regress), (CLASSIFIER, regress)),
                 grpc.StatusCode.INVALID_ARGUMENT, "same model")
    expect_error(prediction_stub.MultiInference,
                 request((REGRESSOR, regress), (REGRESSOR, regress)),
                 grpc.StatusCode.INVALID_ARGUMENT, "more than one task")
    expect_error(prediction_stub.MultiInference,
                 request((REGRESSOR, "tensorflow/serving/predict")),
                 grpc.StatusCode.INVALID_ARGUMENT, "method_name")


def test_a_small_context_cannot_make_the_server_allocate_much(prediction_stub):
    # 1M floats of context repeated for 100k examples would be 400 GB.
    big = example(x=[0.5] * (1 << 20))
    request = fill(regression_pb2.RegressionRequest(), REGRESSOR,
                   [example(n=1)] * 100_000, context=big)
    expect_error(prediction_stub.Regress, request, grpc.StatusCode.INVALID_ARGUMENT, "limit")
    # and the server goes on serving
    ok = fill(regression_pb2.RegressionRequest(), REGRESSOR, [example(x=[1.0, 2.0], n=1)])
    assert prediction_stub.Regress(ok, timeout=TIMEOUT).result.regressions[0].value == 6.0


# ---------------------------------------------------------------- REST

def test_rest_regress(http, rest_url):
    body = {"context": {"n": 1}, "examples": [{"x": [1.0, 2.0]}, {"x": [3, 4], "n": 0}]}
    response = http.post(f"{rest_url}/v1/models/{REGRESSOR}:regress", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.json()["result"] == pytest.approx([6.0, 11.0])
    response = http.post(f"{rest_url}/v1/models/{REGRESSOR}/versions/1:regress", json=body,
                         timeout=TIMEOUT)
    assert response.status_code == 200, response.text


def test_rest_classify(http, rest_url):
    body = {"signature_name": "serving_default", "examples": [{"x": [0.0, 1.0]}, {"x": [2.0, -1.0]}]}
    response = http.post(f"{rest_url}/v1/models/{CLASSIFIER}:classify", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert len(result) == 2
    for row, classes in zip([[0.0, 1.0], [2.0, -1.0]], result):
        assert [label for label, _ in classes] == ["neg", "pos"]
        assert [score for _, score in classes] == pytest.approx(softmax(row), abs=1e-6)


@pytest.mark.parametrize("model,body,words", [
    (REGRESSOR, {"examples": []}, ["no examples"]),
    (REGRESSOR, {}, ["examples"]),
    (REGRESSOR, {"examples": [{"x": [1.0, 2.0]}]}, ["no feature 'n'"]),
    (REGRESSOR, {"examples": [{"x": [1.0, "a"], "n": 1}]}, ["feature 'x'"]),
    (REGRESSOR, {"examples": [{"x": [1.0, 2.0], "n": {"b64": base64.b64encode(b"1").decode()}}]},
     ["bytes_list"]),
    (REGRESSOR, {"examples": [{"x": [], "n": 1}]}, ["empty list"]),
    (REGRESSOR, {"examples": [{"x": None, "n": 1}]}, ["feature 'x'"]),
    (REGRESSOR, {"examples": [{"x": [1.0, 2.0], "n": 1}], "signature_name": 5}, ["signature_name"]),
    (REGRESSOR, {"examples": [{"x": [1.0, 2.0], "n": 1}], "signature_name": "nope"}, ["nope"]),
    ("echo_float32", {"examples": [{"x": [1.0]}]}, ["cannot", "classes"]),
])
def test_rest_refusals_are_400_with_a_message(http, rest_url, model, body, words):
    verb = "classify" if model == "echo_float32" else "regress"
    response = http.post(f"{rest_url}/v1/models/{model}:{verb}", json=body, timeout=TIMEOUT)
    assert response.status_code in (400, 404), response.text
    message = response.json()["error"]
    for word in words:
        assert word in message, message


def test_rest_unknown_model_is_404(http, rest_url):
    response = http.post(f"{rest_url}/v1/models/no_such_model:classify",
                         json={"examples": [{"x": 1.0}]}, timeout=TIMEOUT)
    assert response.status_code == 404, response.text


# ---------------------------------------------------------------- Predict's typed fields

def test_predict_answers_in_typed_fields_by_default(prediction_stub):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "multi_dtype"
    inputs = {
        "x_double": np.array([[1.5, -2.0, 0.25]], dtype=np.float64),
        "x_int32": np.array([[2, 3, -4]], dtype=np.int32),
        "flag": np.array([[True, False, True]]),
        "label": np.array([b"a"], dtype=object),
    }
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(make_tensor_proto(value))
    response = prediction_stub.Predict(request, timeout=TIMEOUT)
    for name, out in response.outputs.items():
        assert not out.tensor_content, name
    assert response.outputs["weighted"].dtype == types_pb2.DT_DOUBLE
    assert len(response.outputs["weighted"].double_val) == 3
    assert list(response.outputs["count"].int64_val) == [2]
    assert list(response.outputs["tag"].string_val) == [b"a"]


@pytest.mark.parametrize("dtype,field", [
    ("float32", "float_val"), ("float16", "half_val"), ("int8", "int_val"), ("uint16", "int_val"),
    ("uint32", "uint32_val"), ("uint64", "uint64_val"), ("bool", "bool_val"), ("int64", "int64_val"),
])
def test_echo_answers_in_the_field_tensorflow_uses(prediction_stub, dtype, field):
    x = np.arange(6).reshape(2, 3).astype(dtype)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = f"echo_{dtype}"
    request.inputs["x"].CopyFrom(make_tensor_proto(x, dtype, content=True))
    out = prediction_stub.Predict(request, timeout=TIMEOUT).outputs["y"]
    assert not out.tensor_content
    values = list(getattr(out, field))
    if dtype == "float16":
        values = np.array(values, dtype=np.uint16).view(np.float16).tolist()
    assert values == x.ravel().tolist()
