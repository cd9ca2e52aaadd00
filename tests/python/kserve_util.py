"""Helpers for the KServe v2 / Triton end-to-end tests: datatype names, raw BYTES encoding,
Prometheus metric parsing, and system shared-memory regions that are always cleaned up."""

from __future__ import annotations

import itertools
import os
import re
import struct
from contextlib import contextmanager

import numpy as np
import requests
import tritonclient.utils.shared_memory as shm

# numpy dtype name (as in tfs.ECHO_TYPES) -> KServe datatype
KSERVE_DTYPES = {
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "bool": "BOOL",
    "string": "BYTES",
}

TIMEOUT = 10
_counter = itertools.count()


def hostport(url: str) -> str:
    """tritonclient.http wants "host:port", not a URL."""
    return url.split("://", 1)[-1]


def unique(prefix: str) -> str:
    """A name no other test (or concurrent run) uses."""
    return f"{prefix}_{os.getpid()}_{next(_counter)}"


def bytes_values() -> np.ndarray:
    """BYTES test values: empty, non-UTF-8, NUL bytes inside and at the ends, multi-byte UTF-8."""
    vals = [[b"hello", b"", b"\xff\xfe\x01"], [b"\x00", b"a\x00b\x00", b"caf\xc3\xa9\x80"]]
    arr = np.empty((2, 3), dtype=object)
    for i in range(2):
        for j in range(3):
            arr[i, j] = vals[i][j]
    return arr


def serialize_bytes(values) -> bytes:
    """KServe's raw BYTES encoding: each element as a 4-byte little-endian length + its bytes."""
    out = bytearray()
    for v in np.asarray(values, dtype=object).reshape(-1):
        b = v if isinstance(v, bytes) else str(v).encode()
        out += struct.pack("<I", len(b)) + b
    return bytes(out)


def deserialize_bytes(raw: bytes, shape) -> np.ndarray:
    out = []
    at = 0
    while at < len(raw):
        (n,) = struct.unpack_from("<I", raw, at)
        out.append(bytes(raw[at + 4: at + 4 + n]))
        at += 4 + n
    arr = np.empty(len(out), dtype=object)
    arr[:] = out
    return arr.reshape(shape)


def raw_of(arr: np.ndarray) -> bytes:
    """Raw little-endian bytes of a numeric array, or the BYTES encoding of an object array."""
    if arr.dtype == object:
        return serialize_bytes(arr)
    return np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()


def assert_bytes_equal(got, want):
    got = np.asarray(got, dtype=object)
    want = np.asarray(want, dtype=object)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert [bytes(x) for x in got.reshape(-1)] == [bytes(x) for x in want.reshape(-1)]


# ---------------------------------------------------------------- metrics

_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def metrics_text(rest_url: str) -> str:
    resp = requests.get(f"{rest_url}/metrics", timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text[:300]
    return resp.text


def metric_samples(text: str, name: str) -> dict[str, float]:
    """{label string: value} for every sample of `name` (labels as written, "" for none)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if m and m.group(1) == name:
            out[m.group(2) or ""] = float(m.group(3))
    return out


def copied_bytes(text: str, stage: str) -> float:
    """tensorport_tensor_copied_bytes_total{stage=...}; a counter never incremented may be
    absent from the exposition, which means 0."""
    samples = metric_samples(text, "tensorport_tensor_copied_bytes_total")
    return samples.get(f'{{stage="{stage}"}}', 0.0)


# ---------------------------------------------------------------- shared memory

def shm_objects(prefix: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))
    except FileNotFoundError:
        return []


class ShmRegions:
    """Creates system shared-memory objects with tritonclient.utils.shared_memory and
    destroys them (and unregisters what was registered through `register`) on close."""

    def __init__(self):
        self.handles = []
        self.registered = []  # (client, name)

    def create(self, byte_size: int, tag: str = "r"):
        name = unique(f"tp_{tag}")
        key = "/" + name
        handle = shm.create_shared_memory_region(name, key, byte_size)
        self.handles.append(handle)
        return name, key, handle

    def register(self, client, name, key, byte_size, offset=0):
        client.register_system_shared_memory(name, key, byte_size, offset=offset)
        self.registered.append((client, name))

    def close(self):
        errors = []
        for client, name in self.registered:
            try:
                client.unregister_system_shared_memory(name)
            except Exception as e:  # noqa: BLE001 - cleanup must go on
                errors.append(e)
        for handle in self.handles:
            try:
                shm.destroy_shared_memory_region(handle)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        self.handles.clear()
        self.registered.clear()
        return errors


@contextmanager
def shm_regions():
    regions = ShmRegions()
    try:
        yield regions
    finally:
        regions.close()
