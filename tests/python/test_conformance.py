"""One conformance suite for every model format: the same ranking MLP (features f32[batch, 16] ->
score f32[batch, 1]) saved in each format must answer every API like the framework that made it.

Each row of FORMATS is one format. Every test runs once per row, against one server started for
this module that serves, for each row, the model as `<id>` and a copy with dynamic batching as
`<id>_batched`. Checked per format: TF Serving gRPC (official stubs) and REST, KServe v2 HTTP and
gRPC (tritonclient), system shared memory in both directions over both, batching of concurrent
requests (batch statistics show merged runs), and INVALID_ARGUMENT for a wrong dtype or shape.
Outputs must equal the framework's own to 1e-5.

Adding a format is adding one row: where its model folder is, the platform KServe reports, and
its reference scores for FEATURES, either computed here by the framework's Python package (as
onnxruntime is for ONNX) or committed next to the model as reference.json by the script that
made it (see scripts/make_torch_fixtures.py and scripts/make_tf_fixtures.py: `ranker_inputs()`
there is FEATURES here).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tritonclient.utils import InferenceServerException

from kserve_util import ShmRegions
from tensorport_server import EXAMPLE_MODELS, TEST_MODELS, start_server
from tfs import assert_close, make_ndarray, make_tensor_proto, reference

TIMEOUT = 10
BATCH_DELAY_US = 20000


def ranker_inputs() -> np.ndarray:
    """The eight rows every format is checked on (committed references are computed on them)."""
    grid = np.arange(8 * 16, dtype=np.int64).reshape(8, 16)
    return (((grid * 37) % 101 - 50) / 25.0).astype(np.float32)


FEATURES = ranker_inputs()


class CommittedReference:
    """Scores the framework itself computed for FEATURES, from the reference.json written next to
    the model by its fixture script. Looks rows up, so any subset of FEATURES can be checked."""

    def __init__(self, path: Path, input_name: str = "features", output_name: str = "score"):
        self.path = path
        data = json.loads(path.read_text())
        self.inputs = _array(data["inputs"][input_name])
        self.outputs = _array(data["outputs"][output_name])

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        picked = []
        for row in rows:
            matches = np.flatnonzero((self.inputs == row).all(axis=1))
            assert matches.size, f"{self.path} has no reference for row {row.tolist()}"
            picked.append(self.outputs[matches[0]])
        return np.stack(picked)


def _array(entry: dict) -> np.ndarray:
    return np.array(entry["data"], dtype=entry["dtype"]).reshape(entry["shape"])


def onnx_reference(rows: np.ndarray) -> np.ndarray:
    return reference("ranker", 1, {"features": rows})["score"]


@dataclass(frozen=True)
class Format:
    id: str
    # The model folder: <source>/<version>/<model file>, and <source>/config.toml if it has one.
    source: Path
    version: int
    # The platform KServe's model metadata reports (Triton's names).
    platform: str
    # The framework's own scores for rows of FEATURES.
    reference: Callable[[np.ndarray], np.ndarray]
    input: str = "features"
    output: str = "score"


FORMATS = [
    Format("onnx", EXAMPLE_MODELS / "ranker", 1, "onnxruntime_onnx", onnx_reference),
    Format("torchscript", TEST_MODELS / "ranker_torch", 1, "pytorch_libtorch",
           CommittedReference(TEST_MODELS / "ranker_torch" / "reference.json")),
    Format("savedmodel", TEST_MODELS / "ranker_tf", 1, "tensorflow_savedmodel",
           CommittedReference(TEST_MODELS / "ranker_tf" / "reference.json")),
]


@pytest.fixture(params=FORMATS, ids=[f.id for f in FORMATS])
def fmt(request) -> Format:
    return request.param


def _serve_as(models: Path, name: str, fmt: Format, extra_config: str = "") -> None:
    folder = models / name
    folder.mkdir()
    (folder / "1").symlink_to((fmt.source / str(fmt.version)).resolve(), target_is_directory=True)
    config = fmt.source / "config.toml"
    text = config.read_text() if config.exists() else ""
    if text or extra_config:
        (folder / "config.toml").write_text(text + "\n" + extra_config)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    models = tmp_path_factory.mktemp("conformance_models")
    batching = f"[batching]\nmax_batch_size = 64\nmax_queue_delay_us = {BATCH_DELAY_US}\n"
    for fmt in FORMATS:
        _serve_as(models, fmt.id, fmt)
        _serve_as(models, f"{fmt.id}_batched", fmt, batching)
    log = tmp_path_factory.mktemp("conformance_server") / "tensorport.log"
    server = start_server(models, log)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def clients(served):
    http_client = httpclient.InferenceServerClient(served.rest_url.split("://", 1)[-1],
                                                   connection_timeout=TIMEOUT,
                                                   network_timeout=TIMEOUT)
    grpc_client = grpcclient.InferenceServerClient(served.grpc_target)
    yield {"http": http_client, "grpc": grpc_client}
    http_client.close()
    grpc_client.close()


@pytest.fixture(scope="module")
def tfs_stub(served):
    channel = grpc.insecure_channel(served.grpc_target)
    grpc.channel_ready_future(channel).result(timeout=TIMEOUT)
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
    channel.close()


def lib(protocol: str):
    return httpclient if protocol == "http" else grpcclient


# ---------------------------------------------------------------- metadata

def test_kserve_metadata_names_the_platform_and_signature(clients, fmt):
    meta = clients["http"].get_model_metadata(fmt.id)
    assert meta["platform"] == fmt.platform
    assert meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": fmt.input, "datatype": "FP32", "shape": [-1, 16]}]
    assert meta["outputs"] == [{"name": fmt.output, "datatype": "FP32", "shape": [-1, 1]}]


# ---------------------------------------------------------------- TF Serving

@pytest.mark.parametrize("content", [True, False], ids=["tensor_content", "float_val"])
def test_tfserving_grpc_predict(tfs_stub, fmt, content):
    rows = FEATURES[:5]
    req = predict_pb2.PredictRequest()
    req.model_spec.name = fmt.id
    req.inputs[fmt.input].CopyFrom(make_tensor_proto(rows, content=content))
    resp = tfs_stub.Predict(req, timeout=TIMEOUT)
    assert resp.model_spec.version.value == fmt.version
    out = resp.outputs[fmt.output]
    assert out.dtype == types_pb2.DT_FLOAT
    assert_close(make_ndarray(out), fmt.reference(rows))


def test_tfserving_rest_predict_rows_and_columns(served, fmt):
    url = f"{served.rest_url}/v1/models/{fmt.id}:predict"
    rows = FEATURES[2:8]
    response = requests.post(url, json={"instances": rows.tolist()}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert_close(np.array(response.json()["predictions"], dtype=np.float32), fmt.reference(rows))

    response = requests.post(url, json={"inputs": {fmt.input: rows.tolist()}}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert_close(np.array(response.json()["outputs"], dtype=np.float32), fmt.reference(rows))


# ---------------------------------------------------------------- KServe v2

@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_kserve_http_infer(clients, fmt, binary):
    rows = FEATURES[1:7]
    tensor = httpclient.InferInput(fmt.input, list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows, binary_data=binary)
    wanted = httpclient.InferRequestedOutput(fmt.output, binary_data=binary)
    result = clients["http"].infer(fmt.id, [tensor], outputs=[wanted])
    assert_close(result.as_numpy(fmt.output), fmt.reference(rows))


def test_kserve_grpc_infer(clients, fmt):
    rows = FEATURES
    tensor = grpcclient.InferInput(fmt.input, list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    result = clients["grpc"].infer(fmt.id, [tensor], model_version=str(fmt.version))
    assert result.get_response().model_name == fmt.id
    assert_close(result.as_numpy(fmt.output), fmt.reference(rows))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_system_shared_memory_in_and_out(clients, fmt, protocol):
    client, m = clients[protocol], lib(protocol)
    rows = FEATURES[:5]
    out_bytes = rows.shape[0] * 4
    regions = ShmRegions()
    try:
        in_name, in_key, in_handle = regions.create(rows.nbytes, "cin")
        out_name, out_key, out_handle = regions.create(out_bytes, "cout")
        shm.set_shared_memory_region(in_handle, [rows])
        regions.register(client, in_name, in_key, rows.nbytes)
        regions.register(client, out_name, out_key, out_bytes)
        tensor = m.InferInput(fmt.input, list(rows.shape), "FP32")
        tensor.set_shared_memory(in_name, rows.nbytes)
        wanted = m.InferRequestedOutput(fmt.output)
        wanted.set_shared_memory(out_name, out_bytes)
        client.infer(fmt.id, [tensor], outputs=[wanted])
        got = shm.get_contents_as_numpy(out_handle, np.float32, [rows.shape[0], 1])
        assert_close(got, fmt.reference(rows))
    finally:
        errors = regions.close()
    assert not errors, errors


# ---------------------------------------------------------------- batching

def test_concurrent_requests_are_batched(served, fmt):
    name = f"{fmt.id}_batched"
    order = [i % len(FEATURES) for i in range(32)]

    def one(i: int) -> np.ndarray:
        row = FEATURES[i]
        body = {"inputs": [{"name": fmt.input, "shape": [1, 16], "datatype": "FP32",
                            "data": row.tolist()}]}
        response = requests.post(f"{served.rest_url}/v2/models/{name}/infer", json=body,
                                 timeout=TIMEOUT)
        assert response.status_code == 200, response.text
        return np.array(response.json()["outputs"][0]["data"], dtype=np.float32).reshape(1, 1)

    with ThreadPoolExecutor(max_workers=16) as pool:
        got = list(pool.map(one, order))
    want = fmt.reference(FEATURES)
    for i, score in zip(order, got):
        assert_close(score, want[i:i + 1])
    stats = requests.get(f"{served.rest_url}/v2/models/{name}/stats",
                         timeout=TIMEOUT).json()["model_stats"][0]
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}
    assert sum(size * count for size, count in sizes.items()) >= len(order), sizes
    assert max(sizes) > 1, f"no request was merged: {sizes}"


# ---------------------------------------------------------------- refused inputs

@pytest.mark.parametrize("datatype, shape", [("FP64", [2, 16]), ("FP32", [2, 15]), ("FP32", [16])],
                         ids=["dtype", "width", "rank"])
def test_wrong_dtype_or_shape_is_invalid_argument(served, clients, fmt, datatype, shape):
    count = int(np.prod(shape))
    body = {"inputs": [{"name": fmt.input, "shape": shape, "datatype": datatype,
                        "data": [0.5] * count}]}
    response = requests.post(f"{served.rest_url}/v2/models/{fmt.id}/infer", json=body,
                             timeout=TIMEOUT)
    assert response.status_code == 400, response.text
    assert fmt.input in response.json()["error"]

    data = np.full(shape, 0.5, dtype=np.float64 if datatype == "FP64" else np.float32)
    tensor = grpcclient.InferInput(fmt.input, shape, datatype)
    tensor.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException) as err:
        clients["grpc"].infer(fmt.id, [tensor])
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT", err.value
