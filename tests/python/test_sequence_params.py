"""KServe's sequence extension sent to models that keep no state between requests.

`sequence_id` (a number or a string), `sequence_start` and `sequence_end` put a request in a
sequence of a stateful model (triton-inference-server/server, docs/protocol/extension_sequence.md:
an id of 0 or "" means no sequence). No model served here has a sequence batcher, so a request
that says it belongs to a sequence would run as if it stood alone while its client believes its
state was kept: it is refused as INVALID_ARGUMENT (HTTP 400), naming the parameter and the
model, over HTTP JSON, HTTP with the binary extension, gRPC and the gRPC stream, and for an
ensemble. (Triton 2.51 accepts and ignores the id for such a model: core r24.10 checks the
correlation ID only where the model's configuration has sequence_batching.) What tritonclient
sends by default (no sequence parameters) and an explicit id 0 with false flags still infer.
"""

from __future__ import annotations

import queue

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tensorport_server import EXAMPLE_MODELS, REPO, link_models, start_server

PIPELINE = REPO / "examples" / "pipeline"
FEATURES = np.arange(32, dtype=np.float32).reshape(2, 16) / 32.0
RAW = np.random.default_rng(5).normal(size=(1, 6, 8)).astype(np.float32)
TIMEOUT = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    models = tmp_path_factory.mktemp("sequence_models")
    link_models(models, bases=(EXAMPLE_MODELS, PIPELINE))
    server = start_server(models, models.parent / "sequence_models.log")
    yield server
    server.stop()


def json_body(parameters: dict) -> dict:
    return {
        "parameters": parameters,
        "inputs": [{"name": "features", "shape": [2, 16], "datatype": "FP32",
                    "data": FEATURES.ravel().tolist()}],
    }


def refusal(model: str, parameter: str) -> str:
    return f"model '{model}' is not stateful: parameter '{parameter}'"


@pytest.mark.parametrize("parameters, named", [
    ({"sequence_id": 42}, "sequence_id"),
    ({"sequence_id": "e333c95a-07fc-42d2-ab16-033b1a566ed5"}, "sequence_id"),
    ({"sequence_id": 42, "sequence_start": True, "sequence_end": False}, "sequence_id"),
    ({"sequence_start": True}, "sequence_start"),
    ({"sequence_id": 0, "sequence_end": True}, "sequence_end"),
])
def test_a_json_request_of_a_sequence_to_a_stateless_model_is_refused(server, parameters, named):
    answer = requests.post(f"{server.rest_url}/v2/models/ranker/infer", json=json_body(parameters),
                           timeout=TIMEOUT)
    assert answer.status_code == 400, answer.text
    assert refusal("ranker", named) in answer.json()["error"], answer.text


@pytest.mark.parametrize("parameters, named", [
    ({"sequence_id": 1.5}, "sequence_id"),
    ({"sequence_id": True}, "sequence_id"),
    ({"sequence_start": "yes"}, "sequence_start"),
    ({"sequence_end": 1}, "sequence_end"),
])
def test_sequence_parameters_of_the_wrong_type_are_refused_by_name(server, parameters, named):
    answer = requests.post(f"{server.rest_url}/v2/models/ranker/infer", json=json_body(parameters),
                           timeout=TIMEOUT)
    assert answer.status_code == 400, answer.text
    assert f"parameter {named} must be" in answer.json()["error"], answer.text


def test_no_sequence_spelled_out_still_infers(server):
    plain = requests.post(f"{server.rest_url}/v2/models/ranker/infer", json=json_body({}),
                          timeout=TIMEOUT)
    assert plain.status_code == 200, plain.text
    for parameters in ({"sequence_id": 0}, {"sequence_id": ""},
                       {"sequence_id": 0, "sequence_start": False, "sequence_end": False}):
        answer = requests.post(f"{server.rest_url}/v2/models/ranker/infer",
                               json=json_body(parameters), timeout=TIMEOUT)
        assert answer.status_code == 200, (parameters, answer.text)
        assert answer.json()["outputs"] == plain.json()["outputs"], parameters


def ranker_input(module):
    features = module.InferInput("features", list(FEATURES.shape), "FP32")
    features.set_data_from_numpy(FEATURES)
    return features


def test_tritonclient_http_binary_with_a_sequence_id_is_refused_and_its_default_infers(server):
    client = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    try:
        # set_data_from_numpy sends the tensor in the binary extension.
        plain = client.infer("ranker", [ranker_input(httpclient)]).as_numpy("score")
        assert plain.shape == (2, 1)
        with pytest.raises(InferenceServerException) as refused:
            client.infer("ranker", [ranker_input(httpclient)], sequence_id=7, sequence_start=True)
        assert refused.value.status() == "400"
        assert refusal("ranker", "sequence_id") in refused.value.message()
    finally:
        client.close()


def test_tritonclient_grpc_with_a_sequence_id_is_refused_and_its_default_infers(server):
    client = grpcclient.InferenceServerClient(server.grpc_target)
    try:
        plain = client.infer("ranker", [ranker_input(grpcclient)]).as_numpy("score")
        assert plain.shape == (2, 1)
        for sequence_id in (7, "session-a"):
            with pytest.raises(InferenceServerException) as refused:
                client.infer("ranker", [ranker_input(grpcclient)], sequence_id=sequence_id,
                             sequence_start=True, sequence_end=True)
            assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert refusal("ranker", "sequence_id") in refused.value.message()
    finally:
        client.close()


def test_a_stream_message_of_a_sequence_is_refused_and_the_stream_goes_on(server):
    client = grpcclient.InferenceServerClient(server.grpc_target)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("ranker", [ranker_input(grpcclient)], request_id="s1",
                                  sequence_id=11, sequence_start=True)
        result, error = answers.get(timeout=TIMEOUT)
        assert result is None and error is not None
        assert error.message().startswith("INVALID_ARGUMENT: "), error.message()
        assert refusal("ranker", "sequence_id") in error.message()
        # The refusal answers that message only: the next one, without a sequence, infers.
        client.async_stream_infer("ranker", [ranker_input(grpcclient)], request_id="s2")
        result, error = answers.get(timeout=TIMEOUT)
        assert error is None, error
        assert result.as_numpy("score").shape == (2, 1)
    finally:
        client.stop_stream()
        client.close()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_an_ensemble_request_of_a_sequence_is_refused_naming_the_ensemble(server, module):
    url = server.rest_url.removeprefix("http://") if module is httpclient else server.grpc_target
    client = module.InferenceServerClient(url)
    try:
        raw = module.InferInput("RAW_FEATURES", list(RAW.shape), "FP32")
        raw.set_data_from_numpy(RAW)
        assert client.infer("ranking_pipeline", [raw]).as_numpy("TOP_SCORES") is not None
        with pytest.raises(InferenceServerException) as refused:
            client.infer("ranking_pipeline", [raw], sequence_id=3, sequence_start=True)
        assert refusal("ranking_pipeline", "sequence_id") in refused.value.message()
    finally:
        client.close()
