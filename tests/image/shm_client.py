"""A shared-memory client, run in its own container that shares the server container's IPC
namespace (/dev/shm) and network namespace, as a sidecar in the server's Kubernetes pod does:
it creates POSIX shared-memory objects with tritonclient's utilities, registers them with the
server, passes the ranker's input and output through them, and checks the output read back from
its region against the same request sent inline.

Prints one JSON line: {"shm": [...], "inline": [...]} (the scores, for the caller to check
against its own reference). Exits non-zero, with the reason on stderr, on any mismatch.

Usage (in the container): python3 shm_client.py HOST:PORT"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

FEATURES = (np.arange(4 * 16, dtype=np.float32).reshape(4, 16) - 30.0) / 11.0
SCORE_BYTES = 4 * 4  # score: f32[4, 1]


def infer(client: httpclient.InferenceServerClient, regions: dict | None) -> np.ndarray:
    features = httpclient.InferInput("features", list(FEATURES.shape), "FP32")
    score = httpclient.InferRequestedOutput("score", binary_data=False)
    if regions is None:
        features.set_data_from_numpy(FEATURES, binary_data=False)
        result = client.infer("ranker", [features], outputs=[score])
        return result.as_numpy("score")
    features.set_shared_memory(regions["in"], FEATURES.nbytes)
    score.set_shared_memory(regions["out"], SCORE_BYTES)
    result = client.infer("ranker", [features], outputs=[score])
    output = result.get_output("score")
    if output is None or "data" in output:
        raise SystemExit(f"the score came back inline, not in its region: {result.get_response()}")
    return shm.get_contents_as_numpy(regions["handles"]["out"], np.float32, [4, 1])


def main() -> int:
    url = sys.argv[1]
    client = httpclient.InferenceServerClient(url)
    tag = f"image_check_{os.getpid()}"
    names = {"in": f"{tag}_in", "out": f"{tag}_out"}
    handles = {
        "in": shm.create_shared_memory_region(names["in"], "/" + names["in"], FEATURES.nbytes),
        "out": shm.create_shared_memory_region(names["out"], "/" + names["out"], SCORE_BYTES),
    }
    registered = []
    try:
        shm.set_shared_memory_region(handles["in"], [FEATURES])
        # Not a score: what is read back afterwards must be the server's.
        shm.set_shared_memory_region(handles["out"], [np.full(4, -1.0, dtype=np.float32)])
        for role, name in names.items():
            size = FEATURES.nbytes if role == "in" else SCORE_BYTES
            client.register_system_shared_memory(name, "/" + name, size)
            registered.append(name)
        status = {r["name"] for r in client.get_system_shared_memory_status()}
        if not set(names.values()) <= status:
            raise SystemExit(f"registered regions missing from the status: {status}")
        by_region = infer(client, {**names, "handles": handles})
        inline = infer(client, None)
        if not np.allclose(by_region, inline, rtol=1e-6, atol=1e-6):
            raise SystemExit(f"scores through shared memory {by_region.ravel().tolist()} differ from "
                             f"the inline ones {inline.ravel().tolist()}")
        print(json.dumps({"shm": by_region.ravel().tolist(), "inline": inline.ravel().tolist()}))
    finally:
        for name in registered:
            client.unregister_system_shared_memory(name)
        for handle in handles.values():
            shm.destroy_shared_memory_region(handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
