#!/usr/bin/env python3
"""Many models in bounded memory: 50 generated ONNX models of about 20 MiB each behind a
200 MiB `--model-memory-budget`, with Zipf-distributed KServe v2 HTTP traffic from a few
client threads. Prints a Markdown table for docs/BENCHMARKS.md:

- latency p50 / p99 of hits (the model was resident when the request was sent) and of
  misses (it was not: the request waited for its load, and possibly for evictions),
- loads on demand and evictions per second (the server's own counters),
- the server's peak resident memory (VmHWM) and its accounted resident total.

    .venv/bin/python scripts/bench_many_models.py [--bin target/release/tensorport]

Each model is an embedding lookup (`Gather` of a [327680, 16] FP32 table by the `idx`
input), so its weights are real initializers that the runtime keeps in memory and a request
is cheap: the figures show the cost of residency, not of inference. A request counts as a hit
when the repository index said READY just before it was sent; a version evicted in between
counts as a hit that waited (rare, and it can only raise the hit tail).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import requests
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
import tensorport_server

ROWS = 327_680  # x 16 FP32 = 20 MiB
WIDTH = 16


def make_model(path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((ROWS, WIDTH), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["embedding"], axis=0)],
        "lookup",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["batch"])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", WIDTH])],
        [numpy_helper.from_array(table, "table")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def zipf_weights(n: int, s: float) -> list[float]:
    return [1.0 / (rank ** s) for rank in range(1, n + 1)]


def metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + "{", name + " ")))


def vm_field(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", help="the server binary (default: $TENSORPORT_BIN or target/debug)")
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--budget", default="200MiB")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--zipf", type=float, default=1.1)
    args = parser.parse_args()
    if args.bin:
        import os
        os.environ["TENSORPORT_BIN"] = args.bin

    with tempfile.TemporaryDirectory(prefix="tensorport-many-") as tmp:
        root = Path(tmp)
        models = root / "models"
        names = [f"emb{i:02d}" for i in range(args.models)]
        started = time.monotonic()
        for i, name in enumerate(names):
            make_model(models / name / "1" / "model.onnx", seed=i)
        print(f"generated {len(names)} models in {time.monotonic() - started:.0f} s", file=sys.stderr)

        server = tensorport_server.start_server(
            models, root / "server.log",
            ["--model-memory-budget", args.budget, "--intra-op-threads", "1", "--model-poll-secs", "0"])
        try:
            run(server, names, args)
        finally:
            server.stop()


def run(server, names: list[str], args) -> None:
    weights = zipf_weights(len(names), args.zipf)
    body = {"inputs": [{"name": "idx", "shape": [1], "datatype": "INT64", "data": [7]}]}
    hits: list[float] = []
    misses: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + args.seconds

    def client(seed: int) -> None:
        rng = random.Random(seed)
        session = requests.Session()
        while time.monotonic() < stop_at:
            name = rng.choices(names, weights)[0]
            index = session.post(f"{server.rest_url}/v2/repository/index", json={"ready": True}, timeout=60).json()
            resident = any(entry["name"] == name for entry in index)
            sent = time.perf_counter()
            response = session.post(f"{server.rest_url}/v2/models/{name}/infer", json=body, timeout=120)
            took = time.perf_counter() - sent
            with lock:
                if response.status_code != 200:
                    errors.append(f"{response.status_code}: {response.text[:200]}")
                (hits if resident else misses).append(took)

    base = vm_field(server.process.pid, "VmRSS")
    before = requests.get(f"{server.rest_url}/metrics", timeout=10).text
    began = time.monotonic()
    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    after = requests.get(f"{server.rest_url}/metrics", timeout=10).text

    loads = metric(after, "tensorport_model_loads_on_demand_total") - metric(before, "tensorport_model_loads_on_demand_total")
    evictions = metric(after, "tensorport_model_evictions_total") - metric(before, "tensorport_model_evictions_total")
    resident = metric(after, "tensorport_model_memory_bytes")
    per_model = [float(line.rsplit(" ", 1)[1]) for line in after.splitlines()
                 if line.startswith("tensorport_model_memory_bytes{")]
    peak = vm_field(server.process.pid, "VmHWM")
    end = vm_field(server.process.pid, "VmRSS")
    mib = 1 << 20
    total = len(hits) + len(misses)

    print(f"{len(names)} models, budget {args.budget}, {args.threads} client threads, Zipf s={args.zipf}, "
          f"{elapsed:.0f} s, {total} requests, {len(errors)} errors")
    if errors:
        print("first error:", errors[0])
    print()
    print("| requests | count | p50 ms | p99 ms |")
    print("| --- | ---: | ---: | ---: |")
    for label, values in (("hits (resident)", hits), ("misses (loaded on demand)", misses)):
        print(f"| {label} | {len(values)} | {pct(values, 0.5) * 1e3:.1f} | {pct(values, 0.99) * 1e3:.1f} |")
    print()
    print("| figure | value |")
    print("| --- | ---: |")
    print(f"| loads on demand per second | {loads / elapsed:.1f} |")
    print(f"| evictions per second | {evictions / elapsed:.1f} |")
    print(f"| hit ratio | {len(hits) / max(total, 1):.2f} |")
    print(f"| accounted per model (MiB, median) | {statistics.median(per_model) / mib if per_model else float('nan'):.1f} |")
    print(f"| accounted resident total at the end (MiB) | {resident / mib:.1f} |")
    print(f"| server resident memory before the run, no model loaded (MiB) | {base / mib:.0f} |")
    print(f"| server resident memory at the end, VmRSS (MiB) | {end / mib:.0f} |")
    print(f"| peak resident memory of the server, VmHWM (MiB) | {peak / mib:.0f} |")


if __name__ == "__main__":
    main()
