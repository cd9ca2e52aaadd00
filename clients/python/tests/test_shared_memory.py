"""The shared-memory helpers: regions and registrations are context managers that leave
nothing behind (in /dev/shm or on the server), and inference through them gives the same
numbers as inference over the socket."""

from __future__ import annotations

import os

import numpy as np
import pytest

import reference
from tensorport_client import SharedMemoryRegion, TensorportError

RNG = np.random.default_rng(11)


def our_objects() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("tensorport_")}


@pytest.fixture(autouse=True)
def nothing_leaks(client):
    before_objects, before_regions = our_objects(), client.shared_memory_status()
    yield
    assert our_objects() == before_objects, "a shared-memory object was left in /dev/shm"
    assert client.shared_memory_status() == before_regions, "a region was left registered"


def test_one_shot_inference_through_shared_memory(client):
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    got = client.infer_shared_memory("ranker", {"features": x})
    expected = reference.run("ranker", 2, {"features": x})["score"]
    assert got["score"].dtype == np.float32 and got["score"].shape == (8, 1)
    np.testing.assert_allclose(got["score"], expected, rtol=1e-5, atol=1e-6)


def test_a_region_serves_several_requests(client):
    with SharedMemoryRegion(1 << 16) as region, client.register_region(region):
        assert any(r["name"] == region.name and r["key"] == region.key for r in client.shared_memory_status())
        for rows in (1, 3, 7):
            inputs = {"user_id": RNG.integers(0, 100, rows), "item_id": RNG.integers(0, 1000, rows)}
            got = client.infer("two_tower", inputs, region=region)
            np.testing.assert_allclose(got["score"], reference.run("two_tower", 1, inputs)["score"], rtol=1e-5)
            assert np.shares_memory(got["score"], region.view(0, np.uint8, (region.byte_size,))) is False


def test_outputs_really_go_through_the_region(client):
    x = RNG.standard_normal((2, 16)).astype(np.float32)
    with SharedMemoryRegion(4096) as region, client.register_region(region):
        region.view(0, np.uint8, (4096,))[:] = 0
        got = client.infer("ranker", {"features": x}, region=region)
        # Inputs sit at offset 0 and the output after them, at the next 64-byte boundary.
        in_place = region.read(128, "FP32", (2, 1))
        np.testing.assert_array_equal(in_place, got["score"])
        np.testing.assert_array_equal(region.read(0, "FP32", (2, 16)), x)


def test_cleanup_happens_when_the_block_raises(client):
    with pytest.raises(RuntimeError, match="boom"):
        with SharedMemoryRegion(1024) as region, client.register_region(region):
            raise RuntimeError("boom")
    assert region.closed


def test_a_failed_request_still_cleans_up(client):
    with pytest.raises(TensorportError) as raised:
        client.infer_shared_memory("ranker", {"features": np.zeros((2, 5), np.float32)},
                                   output_shapes={"score": (2, 1)})
    assert raised.value.kind == "invalid_argument"


def test_a_region_too_small_is_refused_before_sending(client):
    with SharedMemoryRegion(64) as region, client.register_region(region):
        with pytest.raises(ValueError, match="needs"):
            client.infer("ranker", {"features": np.zeros((4, 16), np.float32)}, region=region)


def test_bytes_outputs_are_refused_with_a_hint(client):
    inputs = {"x_double": np.ones((1, 3)), "x_int32": np.ones((1, 3), np.int32),
              "flag": np.ones((1, 3), bool), "label": np.array([b"a"], dtype=object)}
    with pytest.raises(ValueError, match="BYTES"):
        client.infer_shared_memory("multi_dtype", inputs)
    got = client.infer_shared_memory("multi_dtype", {k: v for k, v in inputs.items() if k != "label"} | {
        "label": np.array([b"a"], dtype=object)}, outputs=["weighted", "count"])
    expected = reference.run("multi_dtype", 1, inputs)
    np.testing.assert_allclose(got["weighted"], expected["weighted"])
    np.testing.assert_array_equal(got["count"], expected["count"])


def test_region_bounds_and_double_close():
    region = SharedMemoryRegion(128)
    with pytest.raises(ValueError):
        region.write(100, np.zeros(8, np.float32))
    region.close()
    region.close()
    with pytest.raises(ValueError, match="closed"):
        region.read(0, "FP32", (1,))
