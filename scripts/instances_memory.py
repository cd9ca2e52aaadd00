#!/usr/bin/env python3
"""What instances of one model cost in memory: the server's resident set (VmRSS) with one, two
and four instances of a model with about 100 MB of weights. For ONNX Runtime (the default),
with instances sharing one session (the default) and with a session each (`[instances]
share_session = false`); with `--runtime torchscript` or `--runtime savedmodel`, the same
weights as a TorchScript file or a SavedModel, whose instances always run one loaded module
(the server must be built with the runtime's feature, and the model is written by
scripts/make_big_models.py in the runtime's own virtual environment, which that script's
documentation says how to create).

Each setup gets a fresh server; the figure is read after the model has loaded and answered
requests on every instance at once (two clients per instance, 64 rows each, so each session's
arena has grown to what serving takes). Prints a Markdown table for docs/BENCHMARKS.md.

    .venv/bin/python scripts/instances_memory.py [--bin target/release/tensorport]
        [--runtime onnx|torchscript|savedmodel]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import onnx
import requests
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  the server runner the benchmarks share

FEATURES, HIDDEN = 256, 5000
ROWS = 64
ROUNDS = 8
REPO = Path(__file__).resolve().parent.parent
# The Python that can write each runtime's file (the ONNX one is written here).
MAKERS = {
    "torchscript": REPO / ".cache" / "torch-venv" / "bin" / "python",
    "savedmodel": REPO / ".cache" / "tf-python" / "bin" / "python",
}
THREADS = "[runtime]\nintra_op_threads = 1\ninter_op_threads = 1\n"


def big_mlp() -> onnx.ModelProto:
    """256 -> 5000 -> 5000 -> 1: 105 MB of float32 weights, most of them in one 5000 x 5000
    matrix, as a large ranking tower's would be."""
    rng = np.random.default_rng(34)
    w1 = (rng.standard_normal((FEATURES, HIDDEN)) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, HIDDEN)) * 0.01).astype(np.float32)
    w3 = (rng.standard_normal((HIDDEN, 1)) * 0.01).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["features", "w1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["a1"]),
        helper.make_node("MatMul", ["a1", "w2"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["a2"]),
        helper.make_node("MatMul", ["a2", "w3"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes, "big_mlp",
        inputs=[helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", FEATURES])],
        outputs=[helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])],
        initializer=[numpy_helper.from_array(w, n) for w, n in ((w1, "w1"), (w2, "w2"), (w3, "w3"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def serve_and_measure(binary: Path, root: Path, model: Path, count: int, shared: bool) -> tuple[int, int]:
    """`model` is an ONNX file, or a model folder holding a version folder `1` and a
    config.toml (a TorchScript file's signature)."""
    repo = root / f"count{count}-{'shared' if shared else 'own'}"
    (repo / "big").mkdir(parents=True)
    instances = f"[instances]\ncount = {count}\n"
    if model.is_file():
        (repo / "big" / "1").mkdir()
        (repo / "big" / "1" / "model.onnx").symlink_to(model)
        instances += f"share_session = {'true' if shared else 'false'}\n"
        extra = ""
    else:
        # Hard links: the version folder as the server would find it, without copying 100 MB.
        shutil.copytree(model / "1", repo / "big" / "1", copy_function=os.link)
        signature = model / "config.toml"
        extra = "\n" + signature.read_text() if signature.exists() else ""
    (repo / "big" / "config.toml").write_text(instances + THREADS + extra)
    server = bench.Tensorport(binary, repo, root / f"{repo.name}.log", cpu=None)
    try:
        loaded = rss_kib(server.proc.pid)
        body = {"inputs": [{"name": "features", "datatype": "FP32", "shape": [ROWS, FEATURES],
                            "data": [0.25] * (ROWS * FEATURES)}]}
        url = f"http://{server.rest}/v2/models/big/infer"
        failures: list[str] = []

        def client() -> None:
            with requests.Session() as session:
                for _ in range(ROUNDS):
                    reply = session.post(url, json=body, timeout=120)
                    if reply.status_code != 200:
                        failures.append(reply.text)

        clients = [threading.Thread(target=client) for _ in range(2 * count)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        if failures:
            sys.exit(f"requests failed: {failures[0]}")
        return loaded, rss_kib(server.proc.pid)
    finally:
        server.stop()


def write_model(runtime: str, root: Path) -> tuple[Path, int]:
    """The model for `runtime` under `root`, and its weights' bytes on disk."""
    if runtime == "onnx":
        model = root / "big.onnx"
        onnx.save(big_mlp(), model)
        return model, model.stat().st_size
    python = MAKERS[runtime]
    if not python.exists():
        sys.exit(f"{python} is missing: create it as scripts/make_big_models.py says")
    folder = root / "big"
    subprocess.run([str(python), str(REPO / "scripts" / "make_big_models.py"), runtime, str(folder)], check=True)
    size = sum(f.stat().st_size for f in (folder / "1").rglob("*") if f.is_file())
    return folder, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, default=bench.cargo_target_dir() / "release" / "tensorport")
    ap.add_argument("--runtime", choices=("onnx", *MAKERS), default="onnx")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="instances-memory-") as tmp:
        root = Path(tmp)
        model, size = write_model(args.runtime, root)
        weights_mib = size / 2**20
        if args.runtime == "onnx":
            setups = [(1, True), (2, True), (4, True), (2, False), (4, False)]
        else:
            setups = [(1, True), (2, True), (4, True)]
        figures = {}
        for count, shared in setups:
            print(f"instances {count}, {'one shared session' if shared else 'a session each'}", flush=True)
            figures[(count, shared)] = serve_and_measure(args.bin, root, model, count, shared)
    base = figures[(1, True)][1]
    print(f"\n{args.runtime}: model {weights_mib:.0f} MiB on disk (256 -> 5000 -> 5000 -> 1, float32); "
          f"VmRSS in MiB, after load and after {ROUNDS} requests of {ROWS} rows from two clients per instance.\n")
    # The ratio counts the libraries' own resident memory too (LibTorch's and TensorFlow's are
    # large), so the growth over one instance is given beside it.
    print("| instances | sessions | after load | after serving | vs one instance | more than one instance |")
    print("| --- | --- | --- | --- | --- | --- |")
    for count, shared in setups:
        loaded, served = figures[(count, shared)]
        sessions = "1 (shared)" if shared else str(count)
        print(f"| {count} | {sessions} | {loaded / 1024:.0f} | {served / 1024:.0f} | {served / base:.2f}x "
              f"| {(served - base) / 1024:+.0f} MiB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
