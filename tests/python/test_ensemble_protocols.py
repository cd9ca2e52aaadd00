"""The example ranking pipeline (examples/pipeline) over the paths an ensemble shares with every
model, each with the client users have for it:

- Triton's system shared memory on the ensemble's boundary (`tritonclient.utils.shared_memory`
  over HTTP and gRPC): RAW_FEATURES read from one region, TOP_SCORES and TOP_ITEMS written into
  another, equal to the answer sent inline.
- TF Serving gRPC through the official stubs: `GetModelMetadata` (signature_def) describes the
  ensemble's own inputs and outputs, and `Predict` answers as the steps run one after another.
- KServe gRPC `ModelConfig` lists the ensemble_scheduling steps with their maps, and
  `ModelMetadata` names the ensemble's tensors."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import get_model_metadata_pb2, predict_pb2, prediction_service_pb2_grpc

from kserve_util import ShmRegions
from tensorport_server import REPO, start_server
from tfs import make_ndarray, make_tensor_proto

PIPELINE = REPO / "examples" / "pipeline"
CANDIDATES = 6
TIMEOUT = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = start_server(PIPELINE, tmp_path_factory.mktemp("ensemble_protocols") / "server.log")
    yield server
    server.stop()


@pytest.fixture
def regions():
    made = ShmRegions()
    yield made
    assert not made.close()


def _raw(batch: int = 2) -> np.ndarray:
    rng = np.random.default_rng(11)
    return rng.normal(size=(batch, CANDIDATES, 8)).astype(np.float32)


def _client(server, module):
    if module is httpclient:
        return httpclient.InferenceServerClient(server.rest_url.removeprefix("http://"))
    return grpcclient.InferenceServerClient(server.grpc_target)


def _inline(server, module, raw):
    features = module.InferInput("RAW_FEATURES", list(raw.shape), "FP32")
    features.set_data_from_numpy(raw)
    answer = _client(server, module).infer("ranking_pipeline", [features])
    return answer.as_numpy("TOP_SCORES"), answer.as_numpy("TOP_ITEMS")


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_inputs_from_and_outputs_into_shared_memory_equal_the_inline_answer(server, regions, module):
    raw = _raw()
    want_scores, want_items = _inline(server, module, raw)
    client = _client(server, module)
    scores_bytes, items_bytes = raw.shape[0] * 3 * 4, raw.shape[0] * 3 * 8
    in_name, in_key, in_handle = regions.create(raw.nbytes, "ens_in")
    out_name, out_key, out_handle = regions.create(scores_bytes + items_bytes, "ens_out")
    shm.set_shared_memory_region(in_handle, [raw])
    regions.register(client, in_name, in_key, raw.nbytes)
    regions.register(client, out_name, out_key, scores_bytes + items_bytes)
    features = module.InferInput("RAW_FEATURES", list(raw.shape), "FP32")
    features.set_shared_memory(in_name, raw.nbytes)
    scores = module.InferRequestedOutput("TOP_SCORES")
    scores.set_shared_memory(out_name, scores_bytes)
    items = module.InferRequestedOutput("TOP_ITEMS")
    items.set_shared_memory(out_name, items_bytes, offset=scores_bytes)
    client.infer("ranking_pipeline", [features], outputs=[scores, items])
    got_scores = shm.get_contents_as_numpy(out_handle, np.float32, [raw.shape[0], 3])
    got_items = shm.get_contents_as_numpy(out_handle, np.int64, [raw.shape[0], 3], offset=scores_bytes)
    np.testing.assert_array_equal(got_scores, want_scores)
    np.testing.assert_array_equal(got_items, want_items)


def _tf_serving(server):
    channel = grpc.insecure_channel(server.grpc_target)
    return channel, prediction_service_pb2_grpc.PredictionServiceStub(channel)


def test_tf_serving_get_model_metadata_describes_the_ensemble_signature(server):
    channel, stub = _tf_serving(server)
    with channel:
        request = get_model_metadata_pb2.GetModelMetadataRequest()
        request.model_spec.name = "ranking_pipeline"
        request.metadata_field.append("signature_def")
        answer = stub.GetModelMetadata(request, timeout=TIMEOUT)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    assert answer.metadata["signature_def"].Unpack(signatures)
    signature = signatures.signature_def["serving_default"]
    shapes = lambda infos: {k: (v.dtype, [d.size for d in v.tensor_shape.dim])  # noqa: E731
                            for k, v in infos.items()}
    assert shapes(signature.inputs) == {"RAW_FEATURES": (types_pb2.DT_FLOAT, [-1, -1, 8])}
    assert shapes(signature.outputs) == {"TOP_SCORES": (types_pb2.DT_FLOAT, [-1, 3]),
                                         "TOP_ITEMS": (types_pb2.DT_INT64, [-1, 3])}


def test_tf_serving_predict_on_the_ensemble_answers_as_over_kserve(server):
    raw = _raw(batch=1)
    want_scores, want_items = _inline(server, grpcclient, raw)
    channel, stub = _tf_serving(server)
    with channel:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "ranking_pipeline"
        request.inputs["RAW_FEATURES"].CopyFrom(make_tensor_proto(raw))
        answer = stub.Predict(request, timeout=TIMEOUT)
    np.testing.assert_array_equal(make_ndarray(answer.outputs["TOP_SCORES"]), want_scores)
    np.testing.assert_array_equal(make_ndarray(answer.outputs["TOP_ITEMS"]), want_items)


def test_kserve_grpc_model_config_lists_the_steps_and_metadata_the_tensors(server):
    client = grpcclient.InferenceServerClient(server.grpc_target)
    config = client.get_model_config("ranking_pipeline").config
    assert config.platform == "ensemble"
    steps = config.ensemble_scheduling.step
    assert [step.model_name for step in steps] == ["feature_transform", "ranker_mlp", "top_k"]
    assert dict(steps[0].input_map) == {"raw": "RAW_FEATURES"}
    assert dict(steps[2].output_map) == {"values": "TOP_SCORES", "indices": "TOP_ITEMS"}
    metadata = client.get_model_metadata("ranking_pipeline")
    assert metadata.platform == "ensemble"
    assert [(t.name, t.datatype) for t in metadata.inputs] == [("RAW_FEATURES", "FP32")]
    assert {(t.name, t.datatype) for t in metadata.outputs} == {("TOP_SCORES", "FP32"),
                                                                 ("TOP_ITEMS", "INT64")}
