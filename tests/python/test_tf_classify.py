"""TF Serving's Classify, Regress and MultiInference on a SavedModel (`--features tensorflow`)
through its own classification and regression signatures, over gRPC with the official stubs and
over REST (`:classify`, `:regress`).

tests/models/classifier_tf (scripts/make_tf_classify_fixture.py) is exported the way
TensorFlow's estimators export: `classification` (method tensorflow/serving/classify) and
`regression` (tensorflow/serving/regress) take serialized tf.Examples and parse features `x`
(float_list of 2) and `n` (int64_list of 1) in the graph; `serving_default` is a Predict
signature of the same function over `x` and `n` as tensors. The answers are compared with
TensorFlow's own outputs, recorded by the script in reference.json. A request that names no
signature is answered by the one whose method matches; an example TensorFlow cannot parse is the
caller's INVALID_ARGUMENT / 400, and the server keeps serving.
"""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
from tensorflow.core.example import example_pb2, feature_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    inference_pb2,
    regression_pb2,
)

from tensorport_server import TEST_MODELS

TIMEOUT = 10
MODEL = "classifier_tf"
REFERENCE = json.loads((TEST_MODELS / MODEL / "reference.json").read_text())
EXAMPLES = REFERENCE["examples"]
LABELS = np.array(REFERENCE["classification"]["classes"]["data"]).reshape(
    REFERENCE["classification"]["classes"]["shape"]).tolist()
SCORES = np.array(REFERENCE["classification"]["scores"]["data"], dtype=np.float32).reshape(
    REFERENCE["classification"]["scores"]["shape"])
VALUES = np.array(REFERENCE["regression"]["outputs"]["data"], dtype=np.float32)
CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"


def example(x=None, n=None) -> example_pb2.Example:
    features = {}
    if x is not None:
        features["x"] = feature_pb2.Feature(float_list=feature_pb2.FloatList(value=x))
    if n is not None:
        features["n"] = feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=n))
    return example_pb2.Example(features=feature_pb2.Features(feature=features))


def reference_examples() -> list[example_pb2.Example]:
    return [example(x=e["x"], n=e["n"]) for e in EXAMPLES]


def fill(request, examples, signature=""):
    request.model_spec.name = MODEL
    request.model_spec.signature_name = signature
    request.input.example_list.examples.extend(examples)
    return request


def assert_classified(classifications):
    assert len(classifications) == len(EXAMPLES)
    for row, classes in enumerate(classifications):
        assert [c.label for c in classes.classes] == LABELS[row]
        np.testing.assert_allclose([c.score for c in classes.classes], SCORES[row], atol=1e-6)


def expect_invalid(call, request, *words):
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=TIMEOUT)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    for word in words:
        assert word in (err.value.details() or ""), err.value.details()


# ---------------------------------------------------------------- gRPC

@pytest.mark.parametrize("signature", ["", "classification"])
def test_grpc_classify_answers_through_the_classification_signature(prediction_stub, signature):
    request = fill(classification_pb2.ClassificationRequest(), reference_examples(), signature)
    response = prediction_stub.Classify(request, timeout=TIMEOUT)
    assert response.model_spec.name == MODEL
    assert response.model_spec.signature_name == "classification"
    assert response.model_spec.version.value == 1
    assert_classified(response.result.classifications)


@pytest.mark.parametrize("signature", ["", "regression"])
def test_grpc_regress_answers_through_the_regression_signature(prediction_stub, signature):
    request = fill(regression_pb2.RegressionRequest(), reference_examples(), signature)
    response = prediction_stub.Regress(request, timeout=TIMEOUT)
    assert response.model_spec.signature_name == "regression"
    np.testing.assert_allclose([r.value for r in response.result.regressions], VALUES, atol=1e-6)


def test_grpc_context_features_reach_the_parsed_examples(prediction_stub):
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = MODEL
    with_context = request.input.example_list_with_context
    with_context.examples.extend([example(x=[1.0, 2.0]), example(x=[1.0, 2.0], n=[5])])
    with_context.context.CopyFrom(example(n=[1]))
    response = prediction_stub.Regress(request, timeout=TIMEOUT)
    assert [r.value for r in response.result.regressions] == pytest.approx([6.0, 10.0])


@pytest.mark.parametrize("names", [("classification", "regression"), ("", "")])
def test_grpc_multi_inference_runs_both_signatures(prediction_stub, names):
    request = inference_pb2.MultiInferenceRequest()
    for signature, method in zip(names, (CLASSIFY, REGRESS)):
        task = request.tasks.add()
        task.model_spec.name = MODEL
        task.model_spec.signature_name = signature
        task.method_name = method
    request.input.example_list.examples.extend(reference_examples())
    classes, regression = prediction_stub.MultiInference(request, timeout=TIMEOUT).results
    assert classes.model_spec.signature_name == "classification"
    assert_classified(classes.classification_result.classifications)
    assert regression.model_spec.signature_name == "regression"
    values = [r.value for r in regression.regression_result.regressions]
    np.testing.assert_allclose(values, VALUES, atol=1e-6)


def test_the_predict_signature_still_takes_features_by_name(prediction_stub):
    # serving_default has inputs x and n: each example feature feeds the input of its name.
    request = fill(classification_pb2.ClassificationRequest(), reference_examples(),
                   "serving_default")
    response = prediction_stub.Classify(request, timeout=TIMEOUT)
    for row, classes in enumerate(response.result.classifications):
        np.testing.assert_allclose([c.score for c in classes.classes], SCORES[row], atol=1e-6)
        assert [c.label for c in classes.classes] == ["", "", ""]


@pytest.mark.parametrize("examples,words", [
    pytest.param([example(x=[1.0, 2.0])], ["n", "required"], id="missing-feature"),
    pytest.param([example(x=[1.0, 2.0], n=[1]),
                  example_pb2.Example(features=feature_pb2.Features(feature={
                      "x": feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=[1, 2])),
                      "n": feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=[1]))}))],
                 ["x", "float"], id="wrong-feature-type"),
    pytest.param([example(x=[1.0, 2.0, 3.0], n=[1])], ["x"], id="wrong-feature-length"),
])
@pytest.mark.parametrize("operation", ["Classify", "Regress"])
def test_grpc_bad_examples_are_invalid_argument(prediction_stub, operation, examples, words):
    request_type = (classification_pb2.ClassificationRequest if operation == "Classify"
                    else regression_pb2.RegressionRequest)
    expect_invalid(getattr(prediction_stub, operation), fill(request_type(), examples), *words)
    # The failure was that request's alone.
    ok = fill(regression_pb2.RegressionRequest(), reference_examples())
    values = [r.value for r in prediction_stub.Regress(ok, timeout=TIMEOUT).result.regressions]
    np.testing.assert_allclose(values, VALUES, atol=1e-6)


def test_a_method_signature_is_not_fed_features_by_name(prediction_stub):
    # A feature named after the signature's input does not turn it into a feature-by-name
    # input: a signature that declares its method always receives the serialized examples.
    odd = example(x=[1.0, 2.0], n=[1])
    odd.features.feature["inputs"].bytes_list.value.append(b"not an example")
    request = fill(regression_pb2.RegressionRequest(), [odd])
    assert prediction_stub.Regress(request, timeout=TIMEOUT).result.regressions[0].value == 6.0


def test_metadata_reports_each_signatures_method(prediction_stub, http, rest_url):
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = MODEL
    reply = prediction_stub.GetModelMetadata(request, timeout=TIMEOUT)
    defs = get_model_metadata_pb2.SignatureDefMap()
    assert reply.metadata["signature_def"].Unpack(defs)
    methods = {name: d.method_name for name, d in defs.signature_def.items()}
    assert methods == {"classification": CLASSIFY, "regression": REGRESS,
                       "serving_default": "tensorflow/serving/predict"}
    assert set(defs.signature_def["classification"].outputs) == {"classes", "scores"}
    body = http.get(f"{rest_url}/v1/models/{MODEL}/metadata", timeout=TIMEOUT).json()
    rest_defs = body["metadata"]["signature_def"]["signature_def"]
    assert {name: d["method_name"] for name, d in rest_defs.items()} == methods


# ---------------------------------------------------------------- REST

def rest_examples() -> list[dict]:
    # JSON numbers with a decimal point are float_list, integers int64_list, as in TF Serving.
    return [{"x": [float(v) for v in e["x"]], "n": e["n"][0]} for e in EXAMPLES]


def test_rest_classify_matches_tensorflow(http, rest_url):
    response = http.post(f"{rest_url}/v1/models/{MODEL}:classify",
                         json={"examples": rest_examples()}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert [[label for label, _ in row] for row in result] == LABELS
    np.testing.assert_allclose([[score for _, score in row] for row in result], SCORES, atol=1e-6)


def test_rest_regress_matches_tensorflow(http, rest_url):
    body = {"signature_name": "regression", "examples": rest_examples()}
    response = http.post(f"{rest_url}/v1/models/{MODEL}/versions/1:regress", json=body,
                         timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(response.json()["result"], VALUES, atol=1e-6)


@pytest.mark.parametrize("verb", ["classify", "regress"])
@pytest.mark.parametrize("examples,words", [
    pytest.param([{"x": [1.0, 2.0]}], ["n", "required"], id="missing-feature"),
    pytest.param([{"x": [1.0, 2.0], "n": 1.5}], ["n", "int64"], id="wrong-feature-type"),
])
def test_rest_bad_examples_are_400(http, rest_url, verb, examples, words):
    response = http.post(f"{rest_url}/v1/models/{MODEL}:{verb}", json={"examples": examples},
                         timeout=TIMEOUT)
    assert response.status_code == 400, response.text
    message = response.json()["error"]
    for word in words:
        assert word in message, message
    ok = http.post(f"{rest_url}/v1/models/{MODEL}:regress", json={"examples": rest_examples()},
                   timeout=TIMEOUT)
    assert ok.status_code == 200, ok.text
