"""Scores feed items with the example `ranker` model over REST, over gRPC, and through shared
memory. Reads the server's addresses from TENSORPORT_REST (default http://localhost:8501) and
TENSORPORT_GRPC (default localhost:8500).

    make serve                             # in another terminal
    python clients/python/examples/ranker.py
"""

from __future__ import annotations

import os

import numpy as np

from tensorport_client import GrpcClient, RestClient

REST = os.environ.get("TENSORPORT_REST", "http://localhost:8501")
GRPC = os.environ.get("TENSORPORT_GRPC", "localhost:8500")


def main() -> None:
    features = np.linspace(0, 1, 3 * 16, dtype=np.float32).reshape(3, 16)
    with RestClient(REST) as rest, GrpcClient(GRPC) as grpc:
        print("status          ", rest.model_status("ranker"))
        print("metadata inputs ", grpc.model_metadata("ranker").inputs)
        print("REST predict    ", rest.predict("ranker", {"features": features})["score"].ravel())
        print("gRPC infer      ", grpc.infer("ranker", {"features": features})["score"].ravel())
        shm = grpc.infer_shared_memory("ranker", {"features": features})["score"].ravel()
        print("shared memory   ", shm)


if __name__ == "__main__":
    main()
