#!/usr/bin/env python3
"""One tensor of many short rows sent three ways, one request at a time: TF Serving REST in
the row format (`instances`), TF Serving REST in the columnar format (`inputs`) and KServe
JSON, to the example ranker. Prints the median round trip of each. The server runs on CPU 0
and this client on CPU 1 (when the machine has two).

Usage: .venv/bin/python scripts/bench_rest_layouts.py [--bin PATH] [--rows N] [--requests N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
import tensorport_server  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", help="server binary (default: $TENSORPORT_BIN, else target/debug)")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--requests", type=int, default=150)
    args = ap.parse_args()
    if args.bin:
        os.environ["TENSORPORT_BIN"] = args.bin
    two_cpus = len(os.sched_getaffinity(0)) >= 2
    prefix = ["taskset", "-c", "0"] if two_cpus else None
    if two_cpus:
        os.sched_setaffinity(0, {1})
    x = np.random.default_rng(1).standard_normal((args.rows, 16)).astype(np.float32)
    bodies = {
        "TF Serving REST, instances": ("/v1/models/ranker:predict", {"instances": x.tolist()}),
        "TF Serving REST, inputs": ("/v1/models/ranker:predict", {"inputs": {"features": x.tolist()}}),
        "KServe JSON": ("/v2/models/ranker/infer", {"inputs": [
            {"name": "features", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}),
    }
    with tempfile.TemporaryDirectory() as tmp:
        server = tensorport_server.start_server(tensorport_server.EXAMPLE_MODELS, Path(tmp) / "server.log",
                                                prefix=prefix)
        try:
            session = requests.Session()
            headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
            print(f"{args.rows} rows of 16 float32s, {args.requests} requests each, one at a time")
            print("| layout | body (MB) | p50 (ms) |")
            print("| --- | ---: | ---: |")
            for name, (path, document) in bodies.items():
                body = json.dumps(document)
                url = server.rest_url + path
                for _ in range(20):
                    session.post(url, data=body, headers=headers).raise_for_status()
                times = []
                for _ in range(args.requests):
                    start = time.perf_counter()
                    session.post(url, data=body, headers=headers).raise_for_status()
                    times.append(time.perf_counter() - start)
                print(f"| {name} | {len(body) / 1e6:.2f} | {statistics.median(times) * 1e3:.2f} |")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
