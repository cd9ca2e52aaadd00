"""The real clients of the migration corpus' servers: tritonclient over HTTP and gRPC with the
shapes a config.pbtxt declares (what a Triton user's client sends), and TF Serving's
PredictionService stubs and REST API with the values TF Serving's own tests use.

Each check returns a short description of what it verified, for the corpus table.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tritonclient.grpc import model_config_pb2

from migration_corpus import read_config
from tfs import make_ndarray, make_tensor_proto

FREE_DIM = 2  # the size sent for a -1 dimension
TRITON_DTYPES = {"TYPE_BOOL": "BOOL", "TYPE_UINT8": "UINT8", "TYPE_UINT16": "UINT16",
                 "TYPE_UINT32": "UINT32", "TYPE_UINT64": "UINT64", "TYPE_INT8": "INT8",
                 "TYPE_INT16": "INT16", "TYPE_INT32": "INT32", "TYPE_INT64": "INT64",
                 "TYPE_FP16": "FP16", "TYPE_FP32": "FP32", "TYPE_FP64": "FP64", "TYPE_STRING": "BYTES"}


def _values(datatype: str, shape: list[int], offset: int) -> np.ndarray:
    count = int(np.prod(shape))
    ints = (np.arange(count) + offset) % 10
    if datatype == "BYTES":  # numbers as text: Triton's simple_string adds them
        return np.array([str(v).encode() for v in ints], dtype=object).reshape(shape)
    return ints.astype(httpclient.triton_to_np_dtype(datatype)).reshape(shape)


def declared_inputs(folder: Path, http) -> tuple[list[tuple[str, str, list[int]]], list[tuple[str, str, list[int]]]]:
    """(name, datatype, shape) of each input and output, from config.pbtxt as a client reads
    it (batch 2 when max_batch_size allows, -1 as 2), else from the server's metadata."""
    config = read_config(folder / "config.pbtxt")
    if config.input:
        batch = [min(2, config.max_batch_size)] if config.max_batch_size > 0 else []

        def spec(t):
            dims = [FREE_DIM if d < 0 else d for d in t.dims]
            return (t.name, TRITON_DTYPES[model_config_pb2.DataType.Name(t.data_type)], batch + dims)

        return [spec(t) for t in config.input], [spec(t) for t in config.output]
    meta = http.get_model_metadata(folder.name)

    def from_meta(t):
        return (t["name"], t["datatype"], [FREE_DIM if d < 0 else d for d in t["shape"]])

    return [from_meta(t) for t in meta["inputs"]], [from_meta(t) for t in meta["outputs"]]


def _shape_fits(got: list[int], want: list[int]) -> bool:
    return len(got) == len(want) and all(w in (g, FREE_DIM) or w < 0 for g, w in zip(got, want))


def triton_infer(rest_url: str, grpc_target: str, folder: Path, spec: dict) -> list[str]:
    """Infers over HTTP and gRPC with the declared shapes; checks each declared output's type
    and shape, and the model's own checks (`add_sub`, `classify`, `config`)."""
    name = folder.name
    http = httpclient.InferenceServerClient(rest_url.removeprefix("http://"), network_timeout=60)
    grpc_client = grpcclient.InferenceServerClient(grpc_target)
    done = []
    try:
        inputs, outputs = declared_inputs(folder, http)
        data = {n: _values(dt, shape, i) for i, (n, dt, shape) in enumerate(inputs)}
        for proto, module, client in (("HTTP", httpclient, http), ("gRPC", grpcclient, grpc_client)):
            request = []
            for n, dt, shape in inputs:
                tensor = module.InferInput(n, shape, dt)
                tensor.set_data_from_numpy(data[n])
                request.append(tensor)
            result = client.infer(name, request)
            for n, dt, shape in outputs:
                got = result.as_numpy(n)
                assert got is not None, f"{proto}: output {n} missing"
                assert _shape_fits(list(got.shape), shape), f"{proto}: {n} shape {list(got.shape)}, declared {shape}"
                out = result.get_output(n)
                datatype = out["datatype"] if isinstance(out, dict) else out.datatype
                assert datatype == dt, f"{proto}: {n} is {datatype}, declared {dt}"
            if spec.get("check") == "add_sub":
                check_add_sub(result, inputs, outputs, data)
        done.append(f"tritonclient HTTP+gRPC infer {[s for _, _, s in inputs]}")
        if spec.get("check") == "add_sub":
            done.append("OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1")
        if "classify" in spec:
            done.append(check_classification(http, folder, spec["classify"], inputs, data))
        if "config" in spec:
            config = http.get_model_config(name)
            for key, want in spec["config"].items():
                assert config.get(key) == want, f"/v2/models/{name}/config {key}: {config.get(key)}, want {want}"
            done.append(f"/config {spec['config']}")
    finally:
        http.close()
        grpc_client.close()
    return done


def _number(a: np.ndarray) -> np.ndarray:
    return np.array([int(v) for v in a.reshape(-1)]).reshape(a.shape) if a.dtype == object else a.astype(np.int64)


def check_add_sub(result, inputs, outputs, data) -> None:
    a, b = (_number(data[n]) for n, _, _ in inputs[:2])
    total, diff = (_number(result.as_numpy(n)) for n, _, _ in outputs[:2])
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(diff, a - b)


def check_classification(http, folder: Path, spec: dict, inputs, data) -> str:
    """Triton's classification extension: the top `class_count` of an output, each
    "value:index:label" with the label from the output's label_filename."""
    labels = (folder / spec["labels"]).read_text().splitlines()
    request = []
    for n, dt, shape in inputs:
        tensor = httpclient.InferInput(n, shape, dt)
        tensor.set_data_from_numpy(data[n])
        request.append(tensor)
    wanted = httpclient.InferRequestedOutput(spec["output"], class_count=spec["class_count"])
    top = http.infer(folder.name, request, outputs=[wanted]).as_numpy(spec["output"])
    assert top is not None and top.size == spec["class_count"], top
    first = top.reshape(-1)[0].decode().split(":")
    # The generated model's output is an increasing ramp: the last class is the top one.
    assert first[1:] == [str(len(labels) - 1), labels[-1]], first
    return f"classification class_count={spec['class_count']}: top label {labels[-1]!r}"


def tfs_predict(grpc_target: str, rest_url: str, name: str, spec: dict) -> list[str]:
    """TF Serving's Predict over the gRPC stubs (by version label where given) and REST."""
    done = []
    with grpc.insecure_channel(grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        for case in spec.get("predict", []):
            request = predict_pb2.PredictRequest()
            request.model_spec.name = name
            if "label" in case:
                request.model_spec.version_label = case["label"]
            for key, value in case["inputs"].items():
                request.inputs[key].CopyFrom(make_tensor_proto(np.array(value, dtype=np.float32)))
            reply = stub.Predict(request, timeout=30)
            for key, value in case["outputs"].items():
                np.testing.assert_allclose(make_ndarray(reply.outputs[key]), np.array(value), rtol=1e-5)
            assert reply.model_spec.version.value == case["version"], reply.model_spec
            done.append(f"Predict (stubs) {'label ' + case['label'] if 'label' in case else 'latest'} -> version {case['version']}")
    for case in spec.get("rest", []):
        if rest_url == "http://off":
            continue
        path = f"/{case['path']}" if "path" in case else ""
        answer = requests.post(f"{rest_url}/v1/models/{name}{path}:predict", json=case["body"], timeout=30)
        assert answer.status_code == 200, answer.text
        np.testing.assert_allclose(np.array(answer.json()["predictions"]), np.array(case["predictions"]), rtol=1e-5)
        done.append(f"REST /v1/models/{name}{path}:predict")
    return done
