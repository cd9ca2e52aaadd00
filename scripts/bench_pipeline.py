#!/usr/bin/env python3
"""Ensembles and the response cache, side by side with native Triton in one run.

The model repository is examples/pipeline's three-step ranking pipeline (feature_transform ->
ranker_mlp -> top_k, its ensemble config.pbtxt unchanged), plus `ranking_fused`: one ONNX
model doing the same work in one graph, and `ranking_cached`: the fused model with Triton's
`response_cache { enable: true }`. Each step is given one intra-op and one inter-op thread and
one instance, for both servers (Triton's own `parameters` and `instance_group` spellings,
which tensorport reads too). Both servers serve the very same folder.

Cells (KServe gRPC, one request of 10 candidates, servers on core 0, load on core 1):
- the ensemble and the fused model at concurrency 8 (throughput) and 1 (p50), both servers,
  alternated over --rounds so that a noisy machine moves both alike;
- the in-process floor of each step and of the fused model (ONNX Runtime alone, core 0): the
  c=1 overhead is p50 minus the floors' sum;
- the cached model at concurrency 8 (every request after the first is a hit), both servers;
- memory: tensorport with a 32 MiB cache fed 2,000 distinct 64 KiB answers (four times the
  cache), resident memory before and after.

Usage: .venv/bin/python scripts/bench_pipeline.py [--triton DIR] [--rounds N] [--duration S]
       [--doc docs/BENCHMARKS.md]   (DIR from ../shared/tools/setup-triton-onnx.sh DIR;
       default .cache/triton-onnx)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, compose, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  the tensorport runner, pinning and ports, shared
import make_pipeline_models as pipeline  # noqa: E402  the step graphs

REPO = bench.REPO
BEGIN, END = "<!-- bench-pipeline:begin -->", "<!-- bench-pipeline:end -->"
CANDIDATES = 10
STEPS = ("feature_transform", "ranker_mlp", "top_k")
# The floor's input per step: (model, loadgen --input).
FLOOR_INPUTS = {
    "feature_transform": f"raw:{CANDIDATES},{pipeline.FEATURES}",
    "ranker_mlp": f"features:{CANDIDATES},{pipeline.FEATURES}",
    "top_k": f"scores:{CANDIDATES}",
    "ranking_fused": f"raw:{CANDIDATES},{pipeline.FEATURES}",
}
ENSEMBLE_INPUT = f"RAW_FEATURES:{CANDIDATES},{pipeline.FEATURES}"
CACHE_BYTES = 32 << 20
MEMORY_ROW = 16_384  # float32 elements: a 64 KiB answer per distinct request
MEMORY_REQUESTS = 2_000
RUNTIME_PARAMETERS = """parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
parameters { key: "inter_op_thread_count" value: { string_value: "1" } }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


# ---------------------------------------------------------------- the repository


def fused_model() -> onnx.ModelProto:
    """The three step graphs joined into one: the single model doing the ensemble's work."""
    def model(graph):
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", pipeline.OPSET)])
        m.ir_version = pipeline.IR_VERSION
        return m

    first = compose.merge_models(model(pipeline.feature_transform()), model(pipeline.ranker_mlp()),
                                 io_map=[("features", "features")], prefix1="t_", prefix2="r_")
    fused = compose.merge_models(first, model(pipeline.top_k()), io_map=[("r_scores", "scores")], prefix2="k_")
    graph = fused.graph
    renames = {"t_raw": "raw", "k_values": "values", "k_indices": "indices"}
    for node in graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    for value in list(graph.input) + list(graph.output):
        value.name = renames.get(value.name, value.name)
    fused.ir_version = pipeline.IR_VERSION
    onnx.checker.check_model(fused)
    return fused


def identity_model() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "identity",
                              [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", MEMORY_ROW])],
                              [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", MEMORY_ROW])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", pipeline.OPSET)])
    m.ir_version = pipeline.IR_VERSION
    return m


def fused_config(name: str, cached: bool) -> str:
    return (f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
            f'input [ {{ name: "raw" data_type: TYPE_FP32 dims: [ -1, {pipeline.FEATURES} ] }} ]\n'
            f'output [\n  {{ name: "values" data_type: TYPE_FP32 dims: [ {pipeline.TOP_K} ] }},\n'
            f'  {{ name: "indices" data_type: TYPE_INT64 dims: [ {pipeline.TOP_K} ] }}\n]\n'
            "dynamic_batching { max_queue_delay_microseconds: 200 }\n" + RUNTIME_PARAMETERS
            + ("response_cache { enable: true }\n" if cached else ""))


def write_repository(root: Path) -> None:
    pipeline.write(root)
    for step in STEPS:
        config = root / step / "config.pbtxt"
        config.write_text(config.read_text() + RUNTIME_PARAMETERS)
    fused = fused_model().SerializeToString()
    for name, cached in (("ranking_fused", False), ("ranking_cached", True)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.onnx").write_bytes(fused)
        (root / name / "config.pbtxt").write_text(fused_config(name, cached))


def write_memory_repository(root: Path) -> None:
    (root / "identity_cache" / "1").mkdir(parents=True)
    (root / "identity_cache" / "1" / "model.onnx").write_bytes(identity_model().SerializeToString())
    (root / "identity_cache" / "config.pbtxt").write_text(
        'name: "identity_cache"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {MEMORY_ROW} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {MEMORY_ROW} ] }} ]\n'
        + RUNTIME_PARAMETERS + "response_cache { enable: true }\n")


# ---------------------------------------------------------------- the servers


class Triton:
    def __init__(self, home: Path, repo: Path, log: Path, extra: list[str], cpu: str | None = bench.SERVER_CPU):
        self.port = bench.free_port()
        while bench.free_port() in (self.port + 1, self.port + 2):
            self.port = bench.free_port()
        self.rest, self.grpc = f"127.0.0.1:{self.port}", f"127.0.0.1:{self.port + 1}"
        out = log.open("w")
        command = bench.pinned(cpu, [str(home / "start-triton.sh"), str(repo), str(self.port), *extra])
        self.proc = subprocess.Popen(command, stdout=out, stderr=out, start_new_session=True)
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"http://{self.rest}/v2/health/ready", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        sys.exit(f"Triton did not start:\n{log.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def loadgen(args, protocol: str, target: str, model: str, inputs: str, concurrency: int,
            extra: list[str] | None = None, cpu: str = bench.CLIENT_CPU) -> dict:
    command = [args.loadgen, "--protocol", protocol, "--target", target, "--model", model, "--input", inputs,
               "--batch", "1", "--concurrency", str(concurrency), "--duration", str(args.duration),
               "--warmup", str(args.warmup), "--format", "json", *(extra or [])]
    done = subprocess.run(bench.pinned(cpu, command), capture_output=True, text=True,
                          timeout=args.duration + args.warmup + 120)
    if done.returncode != 0:
        return {"failed": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# ---------------------------------------------------------------- the run


# The cache cells again with a request of LARGE candidates, where the model's run is a real part
# of a request's cost (at 10 candidates it is about a sixth).
LARGE = 500
LARGE_INPUT = f"raw:{LARGE},{pipeline.FEATURES}"
# (cell, model, loadgen --input, concurrency)
SERVED_CELLS = [("ensemble c8", "ranking_pipeline", ENSEMBLE_INPUT, 8),
                ("fused c8", "ranking_fused", FLOOR_INPUTS["ranking_fused"], 8),
                ("ensemble c1", "ranking_pipeline", ENSEMBLE_INPUT, 1),
                ("fused c1", "ranking_fused", FLOOR_INPUTS["ranking_fused"], 1),
                ("cached c8", "ranking_cached", FLOOR_INPUTS["ranking_fused"], 8),
                ("fused large c8", "ranking_fused", LARGE_INPUT, 8),
                ("cached large c8", "ranking_cached", LARGE_INPUT, 8)]


def run_server(args, server: str, repo: Path, work: Path, round_: int, results: list[dict]) -> None:
    print(f"{server}, round {round_}", flush=True)
    if server == "tensorport":
        peer = bench.Tensorport(Path(args.binary), repo, work / f"tensorport-{round_}.log",
                                extra=["--cache-config", "local,size=16777216"])
    else:
        peer = Triton(Path(args.triton), repo, work / f"triton-{round_}.log", ["--cache-config", "local,size=16777216"])
    try:
        for cell, model, inputs, concurrency in SERVED_CELLS:
            result = loadgen(args, "kserve-grpc", peer.grpc, model, inputs, concurrency)
            results.append({"server": server, "round": round_, "cell": cell, **result})
            print(f"  {cell} ({model}): {summary(result)}", flush=True)
    finally:
        peer.stop()


def run_floors(args, repo: Path, results: list[dict]) -> None:
    print("floor", flush=True)
    for model, inputs in FLOOR_INPUTS.items():
        extra = ["--model-file", str(repo / model / "1" / "model.onnx"), "--ort-library", str(bench.ort_library())]
        result = loadgen(args, "floor", "-", model, inputs, 1, extra, cpu=bench.SERVER_CPU)
        results.append({"server": "floor", "cell": model, **result})
        print(f"  {model}: {summary(result)}", flush=True)


def run_memory(args, work: Path) -> dict:
    """Resident memory of a server whose 32 MiB cache is offered four times its size, against
    the same server and requests without the cache: what the rest of the process grows by
    (request and answer buffers, the allocator's arenas) shows in both and is not the cache's."""
    cached = grow_memory(args, work, ["--cache-config", f"local,size={CACHE_BYTES}"])
    uncached = grow_memory(args, work, [])
    return {**cached, "uncached_growth_kib": uncached["after_kib"] - uncached["before_kib"],
            "uncached_peak_kib": uncached["peak_kib"] - uncached["before_kib"]}


def grow_memory(args, work: Path, extra: list[str]) -> dict:
    """Resident memory before and after 2,000 distinct requests."""
    import tritonclient.http as httpclient

    repo = work / "memory"
    if not repo.exists():
        write_memory_repository(repo)
    server = bench.Tensorport(Path(args.binary), repo, work / "tensorport-memory.log", extra=extra)
    try:
        client = httpclient.InferenceServerClient(server.rest)
        rng = np.random.default_rng(7)

        def ask(values: np.ndarray) -> None:
            tensor = httpclient.InferInput("INPUT0", [1, MEMORY_ROW], "FP32")
            tensor.set_data_from_numpy(values, binary_data=True)
            client.infer("identity_cache", [tensor],
                         outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])

        for _ in range(50):  # the same request: allocator and arenas warm, one entry cached
            ask(np.zeros((1, MEMORY_ROW), dtype=np.float32))
        before = rss_kib(server.proc.pid)
        peak = before
        for _ in range(MEMORY_REQUESTS):
            ask(rng.random((1, MEMORY_ROW), dtype=np.float32))
            peak = max(peak, rss_kib(server.proc.pid))
        after = rss_kib(server.proc.pid)
        with urllib.request.urlopen(f"http://{server.rest}/v2/models/identity_cache/stats", timeout=10) as reply:
            stats = json.load(reply)["model_stats"][0]["inference_stats"]
        client.close()
    finally:
        server.stop()
    return {"before_kib": before, "after_kib": after, "peak_kib": peak,
            "offered_mib": MEMORY_REQUESTS * MEMORY_ROW * 4 / 2**20, "cache_mib": CACHE_BYTES / 2**20,
            "cache_hit": stats["cache_hit"]["count"], "cache_miss": stats["cache_miss"]["count"]}


def summary(result: dict) -> str:
    if "failed" in result:
        return f"failed: {result['failed']}"
    return f"{result['inferences_per_s']:,.0f} inf/s, p50 {result['p50_us']:,.0f} us, errors {result['error_count']}"


# ---------------------------------------------------------------- rendering


def best(results, server, cell, key="inferences_per_s", pick=max):
    values = [r[key] for r in results if r["server"] == server and r["cell"] == cell
              and "failed" not in r and r.get("error_count", 0) == 0]
    return pick(values) if values else None


def paired(results, server, cell, base):
    """`cell`'s throughput over `base`'s, per round of `server` (both measured in that round,
    one after the other, so that the machine's drift between rounds moves both alike)."""
    rounds = sorted({r["round"] for r in results if r["server"] == server})
    out = []
    for round_ in rounds:
        a, b = ([r["inferences_per_s"] for r in results if r["server"] == server and r["round"] == round_
                 and r["cell"] == c and "failed" not in r and r.get("error_count", 0) == 0] for c in (cell, base))
        if a and b and b[0]:
            out.append(a[0] / b[0])
    return out


def paired_overheads(results, steps_floor, one_floor):
    """The c=1 overhead ratio per round of tensorport: both p50s of the round, one after the
    other, less the floors (measured once, after the rounds)."""
    out = []
    for round_ in sorted({r["round"] for r in results if r["server"] == "tensorport"}):
        a, b = ([r["p50_us"] for r in results if r["server"] == "tensorport" and r["round"] == round_
                 and r["cell"] == c and "failed" not in r and r.get("error_count", 0) == 0]
                for c in ("ensemble c1", "fused c1"))
        if a and b and b[0] - one_floor > 0:
            out.append((a[0] - steps_floor) / (b[0] - one_floor))
    return out


def paired_text(ratios, best_ratio):
    """The median of per-round ratios, each round's, and the best-of ratio beside them."""
    if not ratios:
        return best_ratio
    median = statistics.median(ratios)
    rounds = ", ".join(f"{r:.2f}x" for r in ratios)
    return f"{median:.2f}x, the median of the rounds' {rounds} (best of each cell: {best_ratio})"


def figure(value, digits=0, unit=""):
    return "failed" if value is None else f"{value:,.{digits}f}{unit}"


def ratio(a, b):
    return "" if a is None or b in (None, 0) else f"{a / b:.2f}x"


def render(args, results: list[dict], memory: dict, elapsed: float) -> str:
    servers = ("tensorport", "triton")
    tput = {(s, c): best(results, s, c) for s in servers for c, _, _, n in SERVED_CELLS if n == 8}
    p50 = {(s, c): best(results, s, c, "p50_us", min) for s in servers for c, _, _, n in SERVED_CELLS if n == 1}
    floors = {m: best(results, "floor", m, "p50_us", min) for m in FLOOR_INPUTS}
    steps_floor = sum(floors[s] for s in STEPS if floors[s] is not None)
    lines = [
        BEGIN,
        f"Command: `{args.command}` ({elapsed / 60:.0f} minutes; best of {args.rounds} alternated rounds, "
        f"{args.duration:g} s per cell; a ratio of two tensorport cells is also given per round, both "
        f"cells measured one after the other in it, and as the median of those). KServe gRPC, one request of {CANDIDATES} candidates x "
        f"{pipeline.FEATURES} features, servers pinned to core 0, tensorport-loadgen on core 1; native "
        "Triton 2.51 with its ONNX Runtime backend (../shared/tools/setup-triton-onnx.sh), the same "
        "folder and config.pbtxt files for both (one instance, one intra-op and one inter-op thread per model).",
        "",
        "| cell | tensorport | native Triton | tensorport / Triton |",
        "| --- | --- | --- | --- |",
    ]
    for label, cell in (("3-step ensemble, c=8, inf/s", "ensemble c8"),
                        ("the same work as one model, c=8, inf/s", "fused c8"),
                        ("one model with response_cache, every request a hit, c=8, inf/s", "cached c8"),
                        (f"the one model, {LARGE} candidates, c=8, inf/s", "fused large c8"),
                        (f"with response_cache, {LARGE} candidates, every request a hit, c=8, inf/s",
                         "cached large c8")):
        a, b = tput[("tensorport", cell)], tput[("triton", cell)]
        lines.append(f"| {label} | {figure(a)} | {figure(b)} | {ratio(a, b)} |")
    for label, cell in (("3-step ensemble, c=1, p50 us", "ensemble c1"),
                        ("the same work as one model, c=1, p50 us", "fused c1")):
        a, b = p50[("tensorport", cell)], p50[("triton", cell)]
        lines.append(f"| {label} | {figure(a)} | {figure(b)} | {ratio(a, b)} |")
    ens_over = (p50[("tensorport", "ensemble c1")] or 0) - steps_floor
    one_over = (p50[("tensorport", "fused c1")] or 0) - (floors["ranking_fused"] or 0)
    tri_ens_over = (p50[("triton", "ensemble c1")] or 0) - steps_floor
    tri_one_over = (p50[("triton", "fused c1")] or 0) - (floors["ranking_fused"] or 0)
    lines += [
        "",
        "In-process floors (ONNX Runtime alone, core 0, p50): "
        + ", ".join(f"{m} {figure(v, 1)} us" for m, v in floors.items()) + ".",
        "",
        "| target | measured | goal |",
        "| --- | --- | --- |",
        f"| ensemble throughput / native Triton's ensemble (c=8) | "
        f"{ratio(tput[('tensorport', 'ensemble c8')], tput[('triton', 'ensemble c8')])} | at least 1.5x |",
        f"| ensemble throughput / tensorport's one model doing the same work (c=8) | "
        + paired_text(paired(results, "tensorport", "ensemble c8", "fused c8"),
                      ratio(tput[('tensorport', 'ensemble c8')], tput[('tensorport', 'fused c8')]))
        + " | at least 0.80x |",
        "| c=1 overhead: (ensemble p50 - steps' floors) / (one model's p50 - its floor) | "
        + paired_text(paired_overheads(results, steps_floor, floors["ranking_fused"] or 0),
                      f"{figure(ens_over, 1)} us / {figure(one_over, 1)} us = {ratio(ens_over, one_over)}")
        + f" (Triton: {figure(tri_ens_over, 1)} / {figure(tri_one_over, 1)} us = {ratio(tri_ens_over, tri_one_over)}) "
        "| at most 1.3x |",
        f"| cache hit throughput / the uncached model's (c=8; {CANDIDATES} candidates, then {LARGE}) | "
        + paired_text(paired(results, "tensorport", "cached c8", "fused c8"),
                      ratio(tput[('tensorport', 'cached c8')], tput[('tensorport', 'fused c8')]))
        + "; "
        + paired_text(paired(results, "tensorport", "cached large c8", "fused large c8"),
                      ratio(tput[('tensorport', 'cached large c8')], tput[('tensorport', 'fused large c8')]))
        + " | at least 1.5x |",
        f"| resident memory after {memory['offered_mib']:,.0f} MiB of distinct answers into a "
        f"{memory['cache_mib']:,.0f} MiB cache, less the same server's growth without it | "
        f"+{(memory['after_kib'] - memory['before_kib']) / 1024:,.1f} MiB - "
        f"{memory['uncached_growth_kib'] / 1024:,.1f} MiB = "
        f"{(memory['after_kib'] - memory['before_kib'] - memory['uncached_growth_kib']) / 1024:,.1f} MiB "
        f"(peaks +{(memory['peak_kib'] - memory['before_kib']) / 1024:,.1f} and "
        f"+{memory['uncached_peak_kib'] / 1024:,.1f} MiB; {memory['cache_miss']} misses, "
        f"{memory['cache_hit']} hits) | at most the cache's size |",
        "",
        END,
    ]
    return "\n".join(lines)


def write_doc(path: Path, text: str) -> None:
    doc = path.read_text()
    if BEGIN in doc and END in doc:
        doc = doc[: doc.index(BEGIN)] + text + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip() + "\n\n## Ensembles and the response cache against native Triton\n\n" + text + "\n"
    path.write_text(doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    release = bench.cargo_target_dir() / "release"
    ap.add_argument("--binary", default=str(release / "tensorport"))
    ap.add_argument("--loadgen", default=str(release / "tensorport-loadgen"))
    ap.add_argument("--triton", default=str(REPO / ".cache" / "triton-onnx"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--doc", default=str(REPO / "docs" / "BENCHMARKS.md"), help="'-': print only")
    args = ap.parse_args()
    args.command = "make bench-pipeline"
    if not (Path(args.triton) / "start-triton.sh").exists():
        sys.exit(f"no Triton in {args.triton}: run ../shared/tools/setup-triton-onnx.sh {args.triton}")
    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="tensorport-bench-pipeline-"))
    results: list[dict] = []
    try:
        repo = work / "repository"
        write_repository(repo)
        for round_ in range(1, args.rounds + 1):
            order = ("tensorport", "triton") if round_ % 2 else ("triton", "tensorport")
            for server in order:
                run_server(args, server, repo, work, round_, results)
        run_floors(args, repo, results)
        memory = run_memory(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (REPO / ".cache" / "bench").mkdir(parents=True, exist_ok=True)
    (REPO / ".cache" / "bench" / "pipeline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    text = render(args, results, memory, time.time() - started)
    print(text)
    if args.doc != "-":
        write_doc(Path(args.doc), text)
        print(f"wrote {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
