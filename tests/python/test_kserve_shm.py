"""Triton's system shared-memory extension, end to end with `tritonclient.utils.shared_memory`:
create a POSIX shared-memory object, register it, infer with inputs and outputs in it, read the
outputs back from it, unregister, destroy. Over HTTP and gRPC. Also: region status, unregister
one / all, double registration, use after unregister, the zero-copy metric, and the CUDA
shared-memory endpoints of a server that has no GPU.

Every object created here is destroyed (and every registration undone) in a fixture, and the
module checks at the end that no /dev/shm object of this process is left behind."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from kserve_util import (ShmRegions, assert_bytes_equal, copied_bytes, hostport, metric_samples,
                         metrics_text, serialize_bytes, shm_objects, unique)
from tfs import assert_close, reference

X5 = (np.arange(5 * 16, dtype=np.float32).reshape(5, 16) - 40.0) / 17.0
IN_BYTES = X5.nbytes          # 320
OUT_BYTES = 5 * 4             # score f32[5, 1]
PROTOCOLS = ["http", "grpc"]


def md_feeds():
    label = np.empty(2, dtype=object)
    label[:] = [b"alpha\x00beta", b"\xff\xfe not utf-8"]
    return {
        "x_double": np.array([[1.5, -2.0, 3.25], [0.1, 0.2, 0.3]], dtype=np.float64),
        "x_int32": np.array([[1, 2, -3], [7, 0, 5]], dtype=np.int32),
        "flag": np.array([[True, False, True], [True, True, False]]),
        "label": label,
    }


@pytest.fixture(scope="module", autouse=True)
def no_leaks(server):
    yield
    mine = [n for n in shm_objects("tp_") if f"_{os.getpid()}_" in n]
    assert mine == [], f"/dev/shm objects left behind: {mine}"
    assert shm.mapped_shared_memory_regions() == [], shm.mapped_shared_memory_regions()


@pytest.fixture
def regions():
    r = ShmRegions()
    yield r
    errors = r.close()
    assert not errors, errors


@pytest.fixture
def clients(triton_http, triton_grpc):
    return {"http": triton_http, "grpc": triton_grpc}


def lib(protocol):
    return httpclient if protocol == "http" else grpcclient


def status_names(client) -> dict:
    """{region name: (key, offset, byte_size)} from either client's status call."""
    status = client.get_system_shared_memory_status()
    if isinstance(status, list):
        return {r["name"]: (r["key"], int(r["offset"]), int(r["byte_size"])) for r in status}
    return {name: (r.key, r.offset, r.byte_size) for name, r in status.regions.items()}


def ranker_shm_infer(client, protocol, in_region, out_region, in_offset=0, out_offset=0):
    m = lib(protocol)
    i = m.InferInput("features", [5, 16], "FP32")
    i.set_shared_memory(in_region, IN_BYTES, offset=in_offset)
    o = m.InferRequestedOutput("score")
    o.set_shared_memory(out_region, OUT_BYTES, offset=out_offset)
    return client.infer("ranker", [i], outputs=[o])


def assert_output_not_inline(result, protocol, name):
    if protocol == "http":
        out = result.get_output(name)
        assert out is not None and "data" not in out, out
        assert "binary_data_size" not in out.get("parameters", {}), out
    else:
        resp = result.get_response()
        idx = [o.name for o in resp.outputs].index(name)
        raw = resp.raw_output_contents[idx] if len(resp.raw_output_contents) > idx else b""
        assert raw == b"", f"{len(raw)} bytes of {name} came back inline"


# ---------------------------------------------------------------- round trips

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_round_trip(clients, regions, protocol):
    client = clients[protocol]
    in_name, in_key, in_handle = regions.create(IN_BYTES, "in")
    out_name, out_key, out_handle = regions.create(OUT_BYTES, "out")
    shm.set_shared_memory_region(in_handle, [X5])
    client.register_system_shared_memory(in_name, in_key, IN_BYTES)
    client.register_system_shared_memory(out_name, out_key, OUT_BYTES)
    try:
        assert {in_name, out_name} <= set(status_names(client))
        result = ranker_shm_infer(client, protocol, in_name, out_name)
        assert_output_not_inline(result, protocol, "score")
        got = shm.get_contents_as_numpy(out_handle, np.float32, [5, 1])
        assert_close(got, reference("ranker", 2, {"features": X5})["score"])
    finally:
        client.unregister_system_shared_memory(in_name)
        client.unregister_system_shared_memory(out_name)
    assert not {in_name, out_name} & set(status_names(client))
    shm.destroy_shared_memory_region(in_handle)
    shm.destroy_shared_memory_region(out_handle)
    regions.handles.clear()
    assert not os.path.exists(f"/dev/shm/{in_name}") and not os.path.exists(f"/dev/shm/{out_name}")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_offsets(clients, regions, protocol):
    """Region registered at a (page-aligned) offset into its object, tensors at non-zero offsets
    inside their regions."""
    client = clients[protocol]
    obj_name, obj_key, obj = regions.create(8192, "obj")
    out_name, out_key, out = regions.create(4096, "o")
    in_region_offset, in_tensor_offset, out_tensor_offset = 4096, 192, 64
    # Garbage around the tensor, so a wrong offset cannot give the right answer.
    shm.set_shared_memory_region(obj, [np.full(2048, 7.0, dtype=np.float32)])
    shm.set_shared_memory_region(obj, [X5], offset=in_region_offset + in_tensor_offset)
    shm.set_shared_memory_region(out, [np.full(1024, -1.0, dtype=np.float32)])
    regions.register(client, obj_name, obj_key, 1024, offset=in_region_offset)
    regions.register(client, out_name, out_key, 4096)
    assert status_names(client)[obj_name] == (obj_key, in_region_offset, 1024)
    ranker_shm_infer(client, protocol, obj_name, out_name, in_offset=in_tensor_offset,
                     out_offset=out_tensor_offset)
    got = shm.get_contents_as_numpy(out, np.float32, [5, 1], offset=out_tensor_offset)
    assert_close(got, reference("ranker", 2, {"features": X5})["score"])
    # Nothing written outside the output's window.
    before = shm.get_contents_as_numpy(out, np.float32, [out_tensor_offset // 4])
    after = shm.get_contents_as_numpy(out, np.float32, [16], offset=out_tensor_offset + OUT_BYTES)
    assert (before == -1.0).all() and (after == -1.0).all()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_one_region_for_input_and_output(clients, regions, protocol):
    client = clients[protocol]
    out_at = 384  # past the 320 input bytes, 64-byte aligned
    name, key, handle = regions.create(out_at + OUT_BYTES, "both")
    shm.set_shared_memory_region(handle, [X5])
    regions.register(client, name, key, out_at + OUT_BYTES)
    ranker_shm_infer(client, protocol, name, name, in_offset=0, out_offset=out_at)
    got = shm.get_contents_as_numpy(handle, np.float32, [5, 1], offset=out_at)
    assert_close(got, reference("ranker", 2, {"features": X5})["score"])
    # The input is still intact.
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [5, 16]), X5)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_multi_dtype_tensor_in_one_region(clients, regions, protocol):
    """FP64, INT32, BOOL and BYTES inputs and FP64, INT64, BYTES outputs, all in one region."""
    client = clients[protocol]
    m = lib(protocol)
    feeds = md_feeds()
    want = reference("multi_dtype", 1, {**feeds, "label": np.array([b"a", b"b"], dtype=object)})
    name, key, handle = regions.create(4096, "md")
    inputs, at = [], 0
    dtypes = {"x_double": "FP64", "x_int32": "INT32", "flag": "BOOL", "label": "BYTES"}
    for input_name, arr in feeds.items():
        size = len(serialize_bytes(arr)) if arr.dtype == object else arr.nbytes
        value = serialize_byte_tensor(arr) if arr.dtype == object else arr
        shm.set_shared_memory_region(handle, [value], offset=at)
        i = m.InferInput(input_name, list(arr.shape), dtypes[input_name])
        i.set_shared_memory(name, size, offset=at)
        inputs.append(i)
        at = (at + size + 63) // 64 * 64
    out_at = {"weighted": 1024, "count": 1280, "tag": 1536}
    outputs = []
    for out_name, offset in out_at.items():
        o = m.InferRequestedOutput(out_name)
        o.set_shared_memory(name, 256, offset=offset)
        outputs.append(o)
    regions.register(client, name, key, 4096)
    client.infer("multi_dtype", inputs, outputs=outputs)
    weighted = shm.get_contents_as_numpy(handle, np.float64, [2, 3], offset=out_at["weighted"])
    count = shm.get_contents_as_numpy(handle, np.int64, [2], offset=out_at["count"])
    tag = shm.get_contents_as_numpy(handle, np.object_, [2], offset=out_at["tag"])
    assert_close(weighted, want["weighted"])
    assert_close(count, want["count"])
    assert_bytes_equal(tag, feeds["label"])


def test_asyncio_http_round_trip(server, regions):
    in_name, in_key, in_handle = regions.create(IN_BYTES, "ain")
    out_name, out_key, out_handle = regions.create(OUT_BYTES, "aout")
    shm.set_shared_memory_region(in_handle, [X5])

    async def main():
        client = aiohttpclient.InferenceServerClient(hostport(server.rest_url))
        try:
            await client.register_system_shared_memory(in_name, in_key, IN_BYTES)
            await client.register_system_shared_memory(out_name, out_key, OUT_BYTES)
            try:
                i = aiohttpclient.InferInput("features", [5, 16], "FP32")
                i.set_shared_memory(in_name, IN_BYTES)
                o = aiohttpclient.InferRequestedOutput("score")
                o.set_shared_memory(out_name, OUT_BYTES)
                await client.infer("ranker", [i], outputs=[o])
            finally:
                await client.unregister_system_shared_memory(in_name)
                await client.unregister_system_shared_memory(out_name)
        finally:
            await client.close()

    asyncio.run(main())
    got = shm.get_contents_as_numpy(out_handle, np.float32, [5, 1])
    assert_close(got, reference("ranker", 2, {"features": X5})["score"])


# ---------------------------------------------------------------- status and unregister

def test_status_and_unregister(triton_http, triton_grpc, regions):
    made = {}
    for tag, (size, offset) in {"s1": (64, 0), "s2": (128, 4096), "s3": (4096, 4096)}.items():
        name, key, _ = regions.create(8192, tag)
        regions.register(triton_http, name, key, size, offset=offset)
        made[name] = (key, offset, size)
    for client in (triton_http, triton_grpc):
        listed = status_names(client)
        for name, expect in made.items():
            assert listed.get(name) == expect, (name, listed)
    names = list(made)

    one_http = triton_http.get_system_shared_memory_status(region_name=names[0])
    assert [(r["name"], r["key"], int(r["offset"]), int(r["byte_size"])) for r in one_http] == [
        (names[0], *made[names[0]])]
    one_grpc = triton_grpc.get_system_shared_memory_status(region_name=names[1])
    assert list(one_grpc.regions) == [names[1]]
    r = one_grpc.regions[names[1]]
    assert (r.name, r.key, r.offset, r.byte_size) == (names[1], *made[names[1]])

    triton_grpc.unregister_system_shared_memory(names[0])
    listed = status_names(triton_http)
    assert names[0] not in listed and names[1] in listed and names[2] in listed
    triton_http.unregister_system_shared_memory(names[1])
    assert names[1] not in status_names(triton_grpc) and names[2] in status_names(triton_grpc)
    # Unregistering a name that is not registered is not an error (as in Triton).
    triton_http.unregister_system_shared_memory(names[1])
    triton_grpc.unregister_system_shared_memory(names[0])

    # Unregister all, once over each protocol.
    triton_http.register_system_shared_memory(names[0], made[names[0]][0], 64)
    triton_grpc.unregister_system_shared_memory()
    assert status_names(triton_http) == {}
    triton_grpc.register_system_shared_memory(names[1], made[names[1]][0], 64)
    triton_http.unregister_system_shared_memory()
    assert status_names(triton_grpc) == {}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_register_same_name_twice(clients, regions, protocol):
    client = clients[protocol]
    name, key, _ = regions.create(256, "dup")
    regions.register(client, name, key, 256)
    with pytest.raises(InferenceServerException) as err:
        client.register_system_shared_memory(name, key, 128)
    want = "409" if protocol == "http" else "StatusCode.ALREADY_EXISTS"
    assert err.value.status() == want, err.value
    assert name in err.value.message()
    # The first registration is untouched.
    assert status_names(client)[name] == (key, 0, 256)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_use_after_unregister(clients, regions, protocol):
    """Unregister a region while nothing uses it, then name it in a request: a bad request
    (400 / INVALID_ARGUMENT) naming the region."""
    client = clients[protocol]
    in_name, in_key, in_handle = regions.create(IN_BYTES, "uin")
    out_name, out_key, _ = regions.create(OUT_BYTES, "uout")
    shm.set_shared_memory_region(in_handle, [X5])
    regions.register(client, in_name, in_key, IN_BYTES)
    regions.register(client, out_name, out_key, OUT_BYTES)
    ranker_shm_infer(client, protocol, in_name, out_name)
    client.unregister_system_shared_memory(in_name)
    with pytest.raises(InferenceServerException) as err:
        ranker_shm_infer(client, protocol, in_name, out_name)
    assert in_name in err.value.message()
    want = "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
    assert err.value.status() == want, f"{err.value.status()}: {err.value.message()}"


# ---------------------------------------------------------------- zero copy

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_shared_memory_input_is_not_copied(server, clients, regions, protocol):
    client = clients[protocol]
    in_name, in_key, in_handle = regions.create(IN_BYTES, "zin")
    out_name, out_key, out_handle = regions.create(OUT_BYTES, "zout")
    shm.set_shared_memory_region(in_handle, [X5])
    regions.register(client, in_name, in_key, IN_BYTES)
    regions.register(client, out_name, out_key, OUT_BYTES)

    before = metrics_text(server.rest_url)
    ranker_shm_infer(client, protocol, in_name, out_name)
    after = metrics_text(server.rest_url)

    samples = metric_samples(after, "tensorport_tensor_copied_bytes_total")
    assert '{stage="shared_memory_output"}' in samples, f"copied-bytes metric not exposed: {samples}"
    assert copied_bytes(after, "input_alignment") == copied_bytes(before, "input_alignment"), (
        "a shared-memory input was copied for alignment")
    # The runtime writes the output straight into the region: no copy either.
    assert copied_bytes(after, "shared_memory_output") == copied_bytes(before, "shared_memory_output"), (
        "a shared-memory output was copied into its region")
    assert_close(shm.get_contents_as_numpy(out_handle, np.float32, [5, 1]),
                 reference("ranker", 2, {"features": X5})["score"])
    regs = metric_samples(after, "tensorport_shared_memory_regions")
    assert regs and list(regs.values())[0] >= 2, regs


# ---------------------------------------------------------------- CUDA shared memory

def test_cuda_shared_memory_endpoints(triton_http, triton_grpc, http, rest_url):
    assert triton_http.get_cuda_shared_memory_status() == []
    resp = http.get(f"{rest_url}/v2/cudasharedmemory/status", timeout=10)
    assert resp.status_code == 200 and resp.json() == []
    assert len(triton_grpc.get_cuda_shared_memory_status().regions) == 0
    triton_http.unregister_cuda_shared_memory()
    triton_http.unregister_cuda_shared_memory(unique("nocuda"))
    triton_grpc.unregister_cuda_shared_memory()
    triton_grpc.unregister_cuda_shared_memory(unique("nocuda"))
    for client in (triton_http, triton_grpc):
        with pytest.raises(InferenceServerException) as err:
            client.register_cuda_shared_memory(unique("cuda"), b"\0" * 64, 0, 64)
        assert "cuda" in err.value.message().lower(), err.value
        assert err.value.status() not in (None, "200")
    assert triton_http.get_cuda_shared_memory_status() == []
