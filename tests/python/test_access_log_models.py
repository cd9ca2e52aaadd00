"""The access log names the model on every model-scoped call: every HTTP operation the OpenAPI
document lists under a path that names a model (which tests/openapi_routes.rs holds equal to the
router's table), and every model-scoped RPC of both gRPC services, answered or refused. A model
that does not exist is named too (without a version), and an absurdly long name is cut."""

from __future__ import annotations

import json
import time

import grpc
import pytest
import requests
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from openapi_spec import operations
from tensorport_server import EXAMPLE_MODELS, start_server

MODEL = "ranker"
LOG_WAIT_S = 60
# The longest model name the access log keeps (`ADDRESSED_NAME_MAX` in src/request.rs).
NAME_MAX = 256


def _model_scoped(template: str) -> bool:
    return "{name}" in template or template.startswith("/v1/models/")


def _concrete(template: str, model: str) -> str:
    return (template.replace("{name}", model).replace("{version}", "2")
            .replace("{label}", "stable"))


def _repository_last(operation: tuple[str, str]) -> tuple[bool, str, str]:
    # Unloading the model first would only turn the later calls into 404s; they would still
    # name it, but the order keeps the answers meaningful in the log when this test fails.
    method, template = operation
    return ("/repository/" in template, template, method)


def _log_lines(server, wanted: set[str]) -> dict[str, dict]:
    """The JSON access-log lines by request id, once every id in `wanted` has its line."""
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        lines = {}
        for line in server.log().splitlines():
            if line.startswith('{"time"'):
                record = json.loads(line)
                lines[record["request_id"]] = record
        if wanted <= set(lines):
            return lines
        missing = sorted(wanted - set(lines))
        assert time.monotonic() < deadline, f"no access-log line for {missing}:\n{server.log()}"
        time.sleep(0.05)


@pytest.fixture()
def server(tmp_path):
    server = start_server(EXAMPLE_MODELS, tmp_path / "server.log", ["--access-log", "json"])
    yield server
    server.stop()


def test_every_model_scoped_http_operation_names_the_model(server):
    scoped = sorted((op for op in operations() if _model_scoped(op[1])), key=_repository_last)
    assert len(scoped) >= 15, scoped
    sent = {}
    for index, (method, template) in enumerate(scoped):
        request_id = f"route-{index}"
        url = f"{server.rest_url}{_concrete(template, MODEL)}"
        # An empty JSON object: the answers may be 400s, which must name the model as well.
        body = b"{}" if method in ("POST", "PUT", "PATCH") else None
        requests.request(method, url, data=body, headers={"x-request-id": request_id}, timeout=30)
        sent[request_id] = (method, template)
    lines = _log_lines(server, set(sent))
    unnamed = [f"{method} {template}: model={lines[rid]['model']!r}"
               for rid, (method, template) in sent.items() if lines[rid]["model"] != MODEL]
    assert not unnamed, "\n".join(unnamed)


def test_an_unknown_model_is_named_without_a_version_and_a_long_name_is_cut(server):
    long_name = "m" * (NAME_MAX * 4)
    for request_id, path in (("unknown-metadata", "/v2/models/no_such_model"),
                             ("unknown-ready", "/v2/models/no_such_model/ready"),
                             ("unknown-tfs", "/v1/models/no_such_model/metadata"),
                             ("long-name", f"/v2/models/{long_name}/stats")):
        response = requests.get(f"{server.rest_url}{path}", headers={"x-request-id": request_id},
                                timeout=30)
        assert response.status_code in (400, 404), response.text
    answered = requests.post(f"{server.rest_url}/v2/models/{MODEL}/infer", headers={"x-request-id": "known"},
                             json={"inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP32",
                                               "data": [0.5] * 16}]}, timeout=30)
    assert answered.status_code == 200, answered.text
    lines = _log_lines(server, {"unknown-metadata", "unknown-ready", "unknown-tfs", "long-name", "known"})
    for request_id in ("unknown-metadata", "unknown-ready", "unknown-tfs"):
        assert lines[request_id]["model"] == "no_such_model", lines[request_id]
        assert lines[request_id]["version"] is None, lines[request_id]
    assert lines["long-name"]["model"] == "m" * NAME_MAX
    assert lines["known"]["model"] == MODEL and lines["known"]["version"] == 2


def _kserve_calls(client):
    import tritonclient.grpc as grpcclient
    import numpy as np

    features = grpcclient.InferInput("features", [1, 16], "FP32")
    features.set_data_from_numpy(np.full((1, 16), 0.5, dtype=np.float32))
    return {
        "ModelReady": lambda headers: client.is_model_ready(MODEL, headers=headers),
        "ModelMetadata": lambda headers: client.get_model_metadata(MODEL, headers=headers),
        "ModelConfig": lambda headers: client.get_model_config(MODEL, headers=headers),
        "ModelStatistics": lambda headers: client.get_inference_statistics(MODEL, headers=headers),
        "ModelInfer": lambda headers: client.infer(MODEL, [features], headers=headers),
        "RepositoryModelLoad": lambda headers: client.load_model(MODEL, headers=headers),
        "RepositoryModelUnload": lambda headers: client.unload_model(MODEL, headers=headers),
    }


def _tf_serving_calls(channel):
    predictions = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    models = model_service_pb2_grpc.ModelServiceStub(channel)

    def spec(message):
        message.model_spec.name = MODEL
        return message

    def multi():
        request = inference_pb2.MultiInferenceRequest()
        task = request.tasks.add()
        task.model_spec.name = MODEL
        task.method_name = "tensorflow/serving/regress"
        return request

    metadata = get_model_metadata_pb2.GetModelMetadataRequest()
    metadata.metadata_field.append("signature_def")
    return {
        "Predict": lambda md: predictions.Predict(spec(predict_pb2.PredictRequest()), metadata=md),
        "Classify": lambda md: predictions.Classify(
            spec(classification_pb2.ClassificationRequest()), metadata=md),
        "Regress": lambda md: predictions.Regress(spec(regression_pb2.RegressionRequest()), metadata=md),
        "MultiInference": lambda md: predictions.MultiInference(multi(), metadata=md),
        "GetModelMetadata": lambda md: predictions.GetModelMetadata(spec(metadata), metadata=md),
        "GetModelStatus": lambda md: models.GetModelStatus(
            spec(get_model_status_pb2.GetModelStatusRequest()), metadata=md),
    }


def test_every_model_scoped_rpc_names_the_model(server):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_target)
    sent = {}
    for rpc, call in _kserve_calls(client).items():
        request_id = f"kserve-{rpc}"
        try:
            call({"x-request-id": request_id})
        except Exception:  # a refusal (load/unload under the default control mode) is logged too
            pass
        sent[request_id] = rpc
    with grpc.insecure_channel(server.grpc_target) as channel:
        for rpc, call in _tf_serving_calls(channel).items():
            request_id = f"tfs-{rpc}"
            try:
                call((("x-request-id", request_id),))
            except grpc.RpcError:  # empty requests are refused; the line must still name the model
                pass
            sent[request_id] = rpc
    lines = _log_lines(server, set(sent))
    unnamed = [f"{rpc}: model={lines[rid]['model']!r} path={lines[rid]['path']}"
               for rid, rpc in sent.items() if lines[rid]["model"] != MODEL]
    assert not unnamed, "\n".join(unnamed)
