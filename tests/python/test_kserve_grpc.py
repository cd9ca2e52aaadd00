"""KServe v2 / Triton protocol over gRPC (`inference.GRPCInferenceService` on the gRPC port),
with the real `tritonclient.grpc` client (sync and asyncio; it sends raw_input_contents) and
hand-built ModelInferRequests for the typed `contents` fields. Outputs are compared to
onnxruntime's own results on the same .onnx file."""

from __future__ import annotations

import asyncio
import queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
from tritonclient.grpc import model_config_pb2, service_pb2
from tritonclient.utils import InferenceServerException

from kserve_util import KSERVE_DTYPES, TIMEOUT, assert_bytes_equal, bytes_values, deserialize_bytes
from tfs import ECHO_TYPES, assert_close, echo_values, reference

X2 = np.arange(32, dtype=np.float32).reshape(2, 16) / 32.0
X5 = (np.arange(5 * 16, dtype=np.float32).reshape(5, 16) - 40.0) / 17.0


def md_feeds():
    label = np.empty(2, dtype=object)
    label[:] = [b"alpha", "caf\u00e9".encode()]
    return {
        "x_double": np.array([[1.5, -2.0, 3.25], [0.1, 0.2, 0.3]], dtype=np.float64),
        "x_int32": np.array([[1, 2, -3], [7, 0, 5]], dtype=np.int32),
        "flag": np.array([[True, False, True], [True, True, False]]),
        "label": label,
    }


def grpc_inputs(feeds: dict):
    inputs = []
    for name, arr in feeds.items():
        dt = KSERVE_DTYPES["string" if arr.dtype == object else arr.dtype.name]
        i = grpcclient.InferInput(name, list(arr.shape), dt)
        i.set_data_from_numpy(arr)
        inputs.append(i)
    return inputs


def decode_output(response: service_pb2.ModelInferResponse, name: str) -> np.ndarray:
    """An output of a raw ModelInferResponse (raw_output_contents, or typed contents)."""
    names = [o.name for o in response.outputs]
    assert name in names, f"no output {name!r} in {names}"
    idx = names.index(name)
    out = response.outputs[idx]
    shape = list(out.shape)
    if response.raw_output_contents:
        raw = response.raw_output_contents[idx]
        if out.datatype == "BYTES":
            return deserialize_bytes(raw, shape)
        np_name = {v: k for k, v in KSERVE_DTYPES.items()}[out.datatype]
        dt = np.dtype(np_name).newbyteorder("<")
        return np.frombuffer(raw, dtype=dt).astype(np.dtype(np_name)).reshape(shape)
    c = out.contents
    field = {"FP32": c.fp32_contents, "FP64": c.fp64_contents, "INT64": c.int64_contents,
             "INT32": c.int_contents, "BOOL": c.bool_contents, "BYTES": c.bytes_contents}[out.datatype]
    return np.array(list(field)).reshape(shape)


# ---------------------------------------------------------------- health and metadata

def test_server_live_ready_metadata(triton_grpc):
    assert triton_grpc.is_server_live()
    assert triton_grpc.is_server_ready()
    meta = triton_grpc.get_server_metadata()
    assert meta.name and meta.version
    assert {"system_shared_memory", "binary_tensor_data"} <= set(meta.extensions), meta


def test_model_metadata(triton_grpc):
    meta = triton_grpc.get_model_metadata("ranker")
    assert meta.name == "ranker" and list(meta.versions) == ["2"]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("features", "FP32", [-1, 16])]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [("score", "FP32", [-1, 1])]
    md = triton_grpc.get_model_metadata("multi_dtype", as_json=True)
    assert {i["name"]: i["datatype"] for i in md["inputs"]} == {
        "x_double": "FP64", "x_int32": "INT32", "flag": "BOOL", "label": "BYTES"}
    with pytest.raises(InferenceServerException) as err:
        triton_grpc.get_model_metadata("ranker", model_version="1")
    assert err.value.status() == "StatusCode.NOT_FOUND", err.value
    with pytest.raises(InferenceServerException) as err:
        triton_grpc.get_model_metadata("nosuchmodel")
    assert err.value.status() == "StatusCode.NOT_FOUND"
    assert "nosuchmodel" in err.value.message()


def test_model_ready(triton_grpc):
    assert triton_grpc.is_model_ready("ranker")
    assert triton_grpc.is_model_ready("ranker", model_version="2")
    assert not triton_grpc.is_model_ready("ranker", model_version="1")
    assert not triton_grpc.is_model_ready("broken")
    assert not triton_grpc.is_model_ready("nosuchmodel")


def test_model_config(triton_grpc):
    cfg = triton_grpc.get_model_config("ranker").config
    assert cfg.name == "ranker"
    assert cfg.max_batch_size > 0
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [("features", model_config_pb2.TYPE_FP32, [16])]
    assert [(o.name, o.data_type, list(o.dims)) for o in cfg.output] == [("score", model_config_pb2.TYPE_FP32, [1])]
    md = triton_grpc.get_model_config("multi_dtype").config
    assert {i.name: i.data_type for i in md.input} == {
        "x_double": model_config_pb2.TYPE_FP64, "x_int32": model_config_pb2.TYPE_INT32,
        "flag": model_config_pb2.TYPE_BOOL, "label": model_config_pb2.TYPE_STRING}
    with pytest.raises(InferenceServerException) as err:
        triton_grpc.get_model_config("nosuchmodel")
    assert err.value.status() == "StatusCode.NOT_FOUND"


def test_model_statistics_count_up(triton_grpc):
    def snapshot():
        stats = triton_grpc.get_inference_statistics("ranker").model_stats
        assert [(s.name, s.version) for s in stats] == [("ranker", "2")]
        return stats[0]

    before = snapshot()
    i = grpc_inputs({"features": X5})
    triton_grpc.infer("ranker", i)
    after = snapshot()
    assert after.inference_count == before.inference_count + 5
    assert after.execution_count == before.execution_count + 1
    assert after.inference_stats.success.count == before.inference_stats.success.count + 1
    assert after.inference_stats.success.ns > before.inference_stats.success.ns
    assert after.last_inference > 0
    every = triton_grpc.get_inference_statistics().model_stats
    assert {"ranker", "two_tower", "multi_dtype"} <= {s.name for s in every}


def test_repository_index(triton_grpc, kserve_stub):
    index = triton_grpc.get_model_repository_index().models
    rows = {(m.name, m.version): m for m in index}
    assert rows[("ranker", "2")].state == "READY"
    broken = [m for m in index if m.name == "broken"]
    assert broken, [m.name for m in index]
    assert all(m.state == "UNAVAILABLE" and m.reason for m in broken), broken
    ready = kserve_stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True), timeout=TIMEOUT)
    assert "broken" not in {m.name for m in ready.models}
    assert {"ranker", "two_tower", "multi_dtype"} <= {m.name for m in ready.models}


# ---------------------------------------------------------------- inference with tritonclient (raw contents)

def test_infer_raw_input_contents(triton_grpc):
    result = triton_grpc.infer("ranker", grpc_inputs({"features": X2}), request_id="grpc-7")
    resp = result.get_response()
    assert resp.model_name == "ranker" and resp.model_version == "2" and resp.id == "grpc-7"
    assert [(o.name, o.datatype, list(o.shape)) for o in resp.outputs] == [("score", "FP32", [2, 1])]
    assert_close(result.as_numpy("score"), reference("ranker", 2, {"features": X2})["score"])


def test_multi_dtype(triton_grpc):
    feeds = md_feeds()
    result = triton_grpc.infer("multi_dtype", grpc_inputs(feeds))
    want = reference("multi_dtype", 1, feeds)
    assert_close(result.as_numpy("weighted"), want["weighted"])
    assert_close(result.as_numpy("count"), want["count"])
    assert_bytes_equal(result.as_numpy("tag"), feeds["label"])


def test_requested_output_subset(triton_grpc):
    feeds = md_feeds()
    result = triton_grpc.infer("multi_dtype", grpc_inputs(feeds),
                               outputs=[grpcclient.InferRequestedOutput("count")])
    assert [o.name for o in result.get_response().outputs] == ["count"]
    assert result.as_numpy("weighted") is None
    assert_close(result.as_numpy("count"), reference("multi_dtype", 1, feeds)["count"])


@pytest.mark.parametrize("dtype", ECHO_TYPES)
def test_echo_every_dtype_raw(triton_grpc, dtype):
    x = bytes_values() if dtype == "string" else echo_values(dtype)
    kd = KSERVE_DTYPES[dtype]
    i = grpcclient.InferInput("x", list(x.shape), kd)
    i.set_data_from_numpy(x)
    result = triton_grpc.infer(f"echo_{dtype}", [i])
    (out,) = result.get_response().outputs
    assert out.datatype == kd and list(out.shape) == [2, 3]
    got = result.as_numpy("y")
    if dtype == "string":
        assert_bytes_equal(got, x)
    else:
        assert got.dtype == x.dtype
        assert_close(got, reference(f"echo_{dtype}", 1, {"x": x})["y"])
        np.testing.assert_array_equal(got, x)


def test_versions(triton_grpc):
    i = grpc_inputs({"features": X2})
    v2 = triton_grpc.infer("ranker", i, model_version="2")
    assert v2.get_response().model_version == "2"
    assert_close(v2.as_numpy("score"), reference("ranker", 2, {"features": X2})["score"])
    with pytest.raises(InferenceServerException) as err:
        triton_grpc.infer("ranker", i, model_version="1")
    assert err.value.status() == "StatusCode.NOT_FOUND", err.value
    assert "version" in err.value.message().lower()


# ---------------------------------------------------------------- typed contents, by hand

TYPED = {
    # dtype: (contents field, values)
    "float32": ("fp32_contents", echo_values("float32")),
    "float64": ("fp64_contents", echo_values("float64")),
    "int8": ("int_contents", echo_values("int8")),
    "int16": ("int_contents", echo_values("int16")),
    "int32": ("int_contents", echo_values("int32")),
    "int64": ("int64_contents", echo_values("int64")),
    "uint8": ("uint_contents", echo_values("uint8")),
    "uint16": ("uint_contents", echo_values("uint16")),
    "uint32": ("uint_contents", echo_values("uint32")),
    "uint64": ("uint64_contents", echo_values("uint64")),
    "bool": ("bool_contents", echo_values("bool")),
    "string": ("bytes_contents", bytes_values()),
}


def typed_request(model, dtype, field, arr, name="x"):
    req = service_pb2.ModelInferRequest(model_name=model, id=f"typed-{dtype}")
    t = req.inputs.add(name=name, datatype=KSERVE_DTYPES[dtype], shape=list(arr.shape))
    flat = arr.reshape(-1)
    if dtype == "string":
        values = [bytes(v) for v in flat]
    elif dtype == "bool":
        values = [bool(v) for v in flat]
    elif dtype.startswith("float"):
        values = [float(v) for v in flat]
    else:
        values = [int(v) for v in flat]
    getattr(t.contents, field).extend(values)
    return req


@pytest.mark.parametrize("dtype", list(TYPED))
def test_typed_contents_every_dtype(kserve_stub, dtype):
    field, x = TYPED[dtype]
    resp = kserve_stub.ModelInfer(typed_request(f"echo_{dtype}", dtype, field, x), timeout=TIMEOUT)
    assert resp.id == f"typed-{dtype}"
    got = decode_output(resp, "y")
    if dtype == "string":
        assert_bytes_equal(got, x)
    else:
        assert_close(got, reference(f"echo_{dtype}", 1, {"x": x})["y"])
        np.testing.assert_array_equal(got, x)


def test_typed_contents_ranker_and_multi_dtype(kserve_stub):
    req = typed_request("ranker", "float32", "fp32_contents", X5, name="features")
    resp = kserve_stub.ModelInfer(req, timeout=TIMEOUT)
    assert_close(decode_output(resp, "score"), reference("ranker", 2, {"features": X5})["score"])

    feeds = md_feeds()
    req = service_pb2.ModelInferRequest(model_name="multi_dtype", model_version="1")
    for name, dtype, field in (("x_double", "float64", "fp64_contents"), ("x_int32", "int32", "int_contents"),
                               ("flag", "bool", "bool_contents"), ("label", "string", "bytes_contents")):
        one = typed_request("multi_dtype", dtype, field, feeds[name], name=name).inputs[0]
        req.inputs.append(one)
    req.outputs.add(name="count")
    resp = kserve_stub.ModelInfer(req, timeout=TIMEOUT)
    assert [o.name for o in resp.outputs] == ["count"]
    assert_close(decode_output(resp, "count"), reference("multi_dtype", 1, feeds)["count"])


# ---------------------------------------------------------------- streaming and asyncio

def test_stream_infer(triton_grpc):
    results: queue.Queue = queue.Queue()
    triton_grpc.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for n, x in enumerate((X2, X5)):
            triton_grpc.async_stream_infer("ranker", grpc_inputs({"features": x}), request_id=f"s{n}")
        got = [results.get(timeout=TIMEOUT) for _ in range(2)]
    finally:
        triton_grpc.stop_stream()
    by_id = {}
    for result, error in got:
        assert error is None, error
        by_id[result.get_response().id] = result
    assert_close(by_id["s0"].as_numpy("score"), reference("ranker", 2, {"features": X2})["score"])
    assert_close(by_id["s1"].as_numpy("score"), reference("ranker", 2, {"features": X5})["score"])


def test_asyncio_grpc_client(server):
    feeds = md_feeds()

    async def main():
        client = aiogrpcclient.InferenceServerClient(server.grpc_target)
        try:
            assert await client.is_server_live()
            assert await client.is_model_ready("multi_dtype")
            meta = await client.get_server_metadata()
            assert "binary_tensor_data" in meta.extensions
            cfg = await client.get_model_config("ranker")
            assert cfg.config.max_batch_size > 0
            inputs = []
            for name, arr in feeds.items():
                dt = KSERVE_DTYPES["string" if arr.dtype == object else arr.dtype.name]
                i = aiogrpcclient.InferInput(name, list(arr.shape), dt)
                i.set_data_from_numpy(arr)
                inputs.append(i)
            r = aiogrpcclient.InferInput("features", [2, 16], "FP32")
            r.set_data_from_numpy(X2)
            return await asyncio.gather(client.infer("multi_dtype", inputs, request_id="aio-md"),
                                        client.infer("ranker", [r]))
        finally:
            await client.close()

    md, ranker = asyncio.run(main())
    want = reference("multi_dtype", 1, feeds)
    assert md.get_response().id == "aio-md"
    assert_close(md.as_numpy("weighted"), want["weighted"])
    assert_close(md.as_numpy("count"), want["count"])
    assert_bytes_equal(md.as_numpy("tag"), feeds["label"])
    assert_close(ranker.as_numpy("score"), reference("ranker", 2, {"features": X2})["score"])


def test_raw_stub_errors_are_grpc_codes(kserve_stub):
    with pytest.raises(grpc.RpcError) as err:
        kserve_stub.ModelMetadata(service_pb2.ModelMetadataRequest(name="nosuchmodel"), timeout=TIMEOUT)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "nosuchmodel" in err.value.details()
