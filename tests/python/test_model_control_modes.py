"""Model control under Triton's modes, over `tensorport tritonserver ...`.

Triton lets clients load and unload models only in `--model-control-mode=explicit`. In none
(its default) and poll mode both are refused before anything else is looked at, with code
UNAVAILABLE (HTTP 503, gRPC UNAVAILABLE) and the message "explicit model load / unload is not
allowed if polling is enabled" (triton-inference-server/core r24.10, the core of Triton 2.51:
ModelRepositoryManager::LoadUnloadModel, with model control enabled only for explicit mode in
server.cc; HTTP's status for UNAVAILABLE is 503 in server/src/http_server.cc). A drop-in refuses
them alike, and refuses TF Serving's HandleReloadConfigRequest too, which would otherwise change
the models around the refusal. The repository index stays readable, and the models keep serving.
`tensorport serve --model-control-api=false` is the same setting under our own name.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc
from tensorflow_serving.config import model_server_config_pb2
from tritonclient.utils import InferenceServerException

from tensorport_server import EXAMPLE_MODELS, server_binary, start_server

TRITONS_WORDS = "explicit model load / unload is not allowed if polling is enabled"
ANY_PORT = ["--http-port=0", "--grpc-port=0", "--metrics-port=0"]
FEATURES = np.arange(32, dtype=np.float32).reshape(2, 16) / 32.0
TIMEOUT = 30


def tritonserver(tmp_path, *flags: str):
    line = ["--model-repository=" + str(EXAMPLE_MODELS), *flags, *ANY_PORT]
    return start_server(None, tmp_path / "server.log", line,
                        program=[str(server_binary()), "tritonserver"])


def infer(server) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    try:
        features = httpclient.InferInput("features", list(FEATURES.shape), "FP32")
        features.set_data_from_numpy(FEATURES)
        return client.infer("ranker", [features]).as_numpy("score")
    finally:
        client.close()


def reload_config(server, name: str) -> None:
    config = model_server_config_pb2.ModelServerConfig()
    entry = config.model_config_list.config.add()
    entry.name = name
    entry.base_path = str(EXAMPLE_MODELS / name)
    entry.model_platform = "onnx"
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        stub.HandleReloadConfigRequest(model_management_pb2.ReloadConfigRequest(config=config),
                                       timeout=TIMEOUT)


def assert_fixed(server) -> None:
    """Load, unload and reload-config are refused as Triton refuses them, over every API,
    and the models are served as before."""
    before = infer(server)
    http = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    grpc_client = grpcclient.InferenceServerClient(server.grpc_target)
    try:
        for call in (http.unload_model, http.load_model):
            for name in ("ranker", "no_such_model"):
                with pytest.raises(InferenceServerException) as refused:
                    call(name)
                assert refused.value.status() == "503", refused.value
                assert refused.value.message().startswith(TRITONS_WORDS), refused.value
        for call in (grpc_client.unload_model, grpc_client.load_model):
            with pytest.raises(InferenceServerException) as refused:
                call("ranker")
            assert refused.value.status() == "StatusCode.UNAVAILABLE", refused.value
            assert refused.value.message().startswith(TRITONS_WORDS), refused.value
        # A load that carries the model itself is refused for the mode, not for its parameters.
        with pytest.raises(InferenceServerException) as refused:
            http.load_model("ranker", config='{"backend": "onnxruntime"}')
        assert refused.value.status() == "503", refused.value
        with pytest.raises(grpc.RpcError) as refused_reload:
            reload_config(server, "ranker")
        assert refused_reload.value.code() == grpc.StatusCode.UNAVAILABLE
        assert TRITONS_WORDS in refused_reload.value.details()
        # Nothing changed: both models still serve, and the index still answers.
        assert http.is_model_ready("ranker") and http.is_model_ready("two_tower")
        index = {entry["name"]: entry.get("state") for entry in http.get_model_repository_index()}
        assert index.get("ranker") == "READY" and index.get("two_tower") == "READY", index
        grpc_index = grpc_client.get_model_repository_index()
        assert {m.name for m in grpc_index.models} >= {"ranker", "two_tower"}, grpc_index
        np.testing.assert_array_equal(infer(server), before)
    finally:
        http.close()
        grpc_client.close()


@pytest.mark.parametrize("mode", [[], ["--model-control-mode=none"], ["--model-control-mode=poll"],
                                  ["--model-control-mode=POLL", "--repository-poll-secs=1"]],
                         ids=["default", "none", "poll", "poll-every-second"])
def test_outside_explicit_mode_clients_cannot_load_or_unload(tmp_path, mode):
    server = tritonserver(tmp_path, *mode)
    try:
        assert_fixed(server)
    finally:
        server.stop()


def test_our_own_flag_fixes_the_models_alike(tmp_path):
    server = start_server(EXAMPLE_MODELS, tmp_path / "server.log", ["--model-control-api=false"])
    try:
        assert_fixed(server)
    finally:
        server.stop()


def test_explicit_mode_unloads_and_loads_over_http_and_grpc(tmp_path):
    server = tritonserver(tmp_path, "--model-control-mode=explicit", "--load-model=*")
    http = httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    grpc_client = grpcclient.InferenceServerClient(server.grpc_target)
    try:
        before = infer(server)
        http.unload_model("ranker")
        assert not http.is_model_ready("ranker")
        grpc_client.load_model("ranker")
        assert grpc_client.is_model_ready("ranker")
        np.testing.assert_array_equal(infer(server), before)
        grpc_client.unload_model("two_tower")
        assert not http.is_model_ready("two_tower")
        http.load_model("two_tower")
        assert http.is_model_ready("two_tower")
        # TF Serving's reload-config is a client's control too, and allowed here.
        reload_config(server, "ranker")
        assert http.is_model_ready("ranker")
    finally:
        http.close()
        grpc_client.close()
        server.stop()
