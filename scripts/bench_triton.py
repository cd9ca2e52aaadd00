#!/usr/bin/env python3
"""tensorport against native Triton 2.51 (its C++ ONNX Runtime backend), alternating within one
run: every cell is measured tensorport, Triton, tensorport, Triton... for --rounds rounds, so
that a noisy machine moves both alike; the table gives each round's figures and the median of
the per-round ratios. `make bench-triton` runs it; `make bench` runs it after scripts/bench.py
when native Triton is installed or installable.

Both servers load the very same .onnx files (one file, hard-linked into each server's model
folder) with one ONNX Runtime intra-op and one inter-op thread (tensorport: config.toml's
`[runtime]`; Triton: `parameters` intra_op_thread_count / inter_op_thread_count "1"), and are
driven by `tensorport-loadgen` over the KServe v2 protocol. The servers of one setup run at
the same time, each idle while the other is measured. Beside each cell's figures, each
server's CPU per row served (user + system over the run, rows from its own statistics): on
this shared machine throughput moves with the host, the CPU a server spends on the same work
much less.

Setups and cells (--only takes the cell names, comma-separated or repeated):
- ranker, the example MLP (16 -> 32 -> 1), batch-1 requests, no batching, one instance;
  servers on core 0, the load generator on core 1:
  json-c8 (HTTP JSON, req/s), grpc-c8 (gRPC, inf/s), grpc-c1 (gRPC, p50 us),
  binary-c8 (HTTP binary tensors, inf/s), shm-c8 (gRPC, inputs and outputs in system shared
  memory, inf/s)
- a 256 -> 512 -> 256 -> 1 MLP with dynamic batching (up to 64 rows, no queue delay), one
  instance, pinned as above: batching-c64 (batch-1 requests, c=64, inf/s)
- the same MLP with two instances and requests of 1,000 rows (tensorport's settings:
  ranking_config_toml()), servers and load generator unpinned: rows-c1 (c=1, p50 ms and
  rows/s), rows-c4 (c=4, rows/s); each server's resident memory after start and after them
- floor: the 1,000-row request through ONNX Runtime in-process on core 0, no server

Usage: .venv/bin/python scripts/bench_triton.py [--triton DIR] [--rounds N] [--duration S]
       [--warmup S] [--only CELL] [--doc docs/BENCHMARKS.md | --doc -]
       (DIR from ../shared/tools/setup-triton-onnx.sh DIR, default .cache/triton-onnx; with
       --only the table is printed, not written, unless --doc names a file)
"""

from __future__ import annotations

import argparse
import filecmp
import itertools
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  ports, pinning, the tensorport runner, machine description
import bench_pipeline  # noqa: E402  the native Triton runner, resident memory
import make_example_models as examples  # noqa: E402  the ONNX model conventions

REPO = bench.REPO
BEGIN, END = "<!-- bench-triton:begin -->", "<!-- bench-triton:end -->"
HEADING = "## Against native Triton"
SERVERS = ("tensorport", "triton")
ROWS = 1000  # rows per request in the ranking cells
RANKER = bench.RANKER
MLP = bench.Model("ranker_256", 256, "a ranking MLP (256 -> 512 -> 256 -> 1, 1 MB of weights)")
THREADS_TOML = "[runtime]\nintra_op_threads = 1\ninter_op_threads = 1\n"
THREADS_PBTXT = ('parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
                 'parameters { key: "inter_op_thread_count" value: { string_value: "1" } }\n')


def ranking_config_toml() -> str:
    """tensorport's config.toml for the 1,000-row cells: two instances, as Triton's
    instance_group count 2, batches of up to 1,024 rows, and requests of more than 500 rows
    cut in two so that both instances run one at once."""
    return ("[instances]\ncount = 2\n\n" + THREADS_TOML
            + "\n[batching]\nmax_batch_size = 1024\nsplit_rows = 500\n")


def ranking_mlp() -> bytes:
    """256 -> 512 -> 256 -> 1 with ReLU between and a sigmoid score; fixed seed."""
    rng = np.random.default_rng(404)
    sizes = (MLP.features, 512, 256, 1)
    nodes, weights, current = [], [], "features"
    for layer, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes), start=1):
        w = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        weights += [numpy_helper.from_array(w, f"w{layer}"),
                    numpy_helper.from_array(np.zeros(fan_out, dtype=np.float32), f"b{layer}")]
        nodes.append(helper.make_node("Gemm", [current, f"w{layer}", f"b{layer}"], [f"h{layer}"], name=f"dense{layer}"))
        current = f"h{layer}"
        if fan_out != 1:
            nodes.append(helper.make_node("Relu", [current], [f"a{layer}"], name=f"relu{layer}"))
            current = f"a{layer}"
    nodes.append(helper.make_node("Sigmoid", [current], ["score"], name="sigmoid"))
    graph = helper.make_graph(
        nodes, MLP.name,
        inputs=[helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", MLP.features])],
        outputs=[helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])],
        initializer=weights)
    return examples.make_model(graph, "ranking MLP 256->512->256->1").SerializeToString()


@dataclass(frozen=True)
class Setup:
    """One model served alike by both servers."""
    name: str
    model: bench.Model
    tensorport_toml: str
    triton_max_batch: int
    triton_extra: str  # dynamic_batching, instance_group
    pinned: bool

    def cpu(self, server_side: bool) -> str | None:
        if not self.pinned:
            return None
        return bench.SERVER_CPU if server_side else bench.CLIENT_CPU


SETUPS = {s.name: s for s in (
    Setup("ranker", RANKER, THREADS_TOML + "\n[instances]\ncount = 1\n", 8,
          "instance_group [ { count: 1 kind: KIND_CPU } ]\n", True),
    Setup("batching", MLP, THREADS_TOML + "\n[instances]\ncount = 1\n\n[batching]\nmax_batch_size = 64\n"
          "max_queue_delay_us = 0\n", 64, "dynamic_batching { }\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n",
          True),
    Setup("ranking", MLP, ranking_config_toml(), 1024, "instance_group [ { count: 2 kind: KIND_CPU } ]\n", False),
)}


@dataclass(frozen=True)
class Figure:
    unit: str
    key: str  # loadgen's field
    scale: float = 1.0
    lower_is_better: bool = False

    def of(self, result: dict) -> float | None:
        return None if "failed" in result else result[self.key] * self.scale


REQ_S, INF_S, ROWS_S = Figure("req/s", "requests_per_s"), Figure("inf/s", "inferences_per_s"), \
    Figure("rows/s", "inferences_per_s")
P50_US, P50_MS = Figure("p50 us", "p50_us", lower_is_better=True), Figure("p50 ms", "p50_us", 1e-3, True)


@dataclass(frozen=True)
class Cell:
    name: str
    setup: str  # a SETUPS key, or "floor"
    label: str
    protocol: str
    batch: int
    concurrency: int
    figures: tuple[Figure, ...]
    shm: bool = False


SMALL = "16-32-1 MLP, batch 1, one instance"
ROWS_LABEL = f"256-512-256-1 MLP, {ROWS:,}-row requests, 2 instances, unpinned"
CELLS = (
    Cell("json-c8", "ranker", f"{SMALL}, HTTP JSON, c=8", "kserve-http", 1, 8, (REQ_S,)),
    Cell("grpc-c8", "ranker", f"{SMALL}, gRPC, c=8", "kserve-grpc", 1, 8, (INF_S,)),
    Cell("grpc-c1", "ranker", f"{SMALL}, gRPC, c=1", "kserve-grpc", 1, 1, (P50_US,)),
    Cell("binary-c8", "ranker", f"{SMALL}, HTTP binary tensors, c=8", "kserve-http-binary", 1, 8, (INF_S,)),
    Cell("shm-c8", "ranker", f"{SMALL}, gRPC, inputs and outputs in system shared memory, c=8", "kserve-grpc", 1, 8,
         (INF_S,), shm=True),
    Cell("batching-c64", "batching", "256-512-256-1 MLP, batch-1 requests, dynamic batching (up to 64), one "
         "instance, gRPC, c=64", "kserve-grpc", 1, 64, (INF_S,)),
    Cell("rows-c1", "ranking", f"{ROWS_LABEL}, gRPC, c=1", "kserve-grpc", ROWS, 1, (P50_MS, ROWS_S)),
    Cell("rows-c4", "ranking", f"{ROWS_LABEL}, gRPC, c=4", "kserve-grpc", ROWS, 4, (ROWS_S,)),
    Cell("floor", "floor", f"in-process floor, {ROWS:,} rows, one core (ONNX Runtime alone)", "floor", ROWS, 1,
         (P50_MS, ROWS_S)),
)


# ---------------------------------------------------------------- models and servers


def write_repositories(work: Path, setup: Setup, files: dict[str, Path]) -> tuple[Path, Path]:
    """One model folder per server, its model.onnx a hard link to the one file both load."""
    model = setup.model
    roots = work / f"tensorport-{setup.name}", work / f"triton-{setup.name}"
    for root in roots:
        (root / model.name / "1").mkdir(parents=True)
        os.link(files[model.name], root / model.name / "1" / "model.onnx")
    (roots[0] / model.name / "config.toml").write_text(setup.tensorport_toml)
    (roots[1] / model.name / "config.pbtxt").write_text(
        f'name: "{model.name}"\nbackend: "onnxruntime"\nmax_batch_size: {setup.triton_max_batch}\n'
        f'input [ {{ name: "features" data_type: TYPE_FP32 dims: [ {model.features} ] }} ]\n'
        'output [ { name: "score" data_type: TYPE_FP32 dims: [ 1 ] } ]\n' + setup.triton_extra + THREADS_PBTXT)
    return roots


def write_model_files(work: Path) -> dict[str, Path]:
    files = {RANKER.name: work / "files" / f"{RANKER.name}.onnx", MLP.name: work / "files" / f"{MLP.name}.onnx"}
    files[RANKER.name].parent.mkdir(parents=True)
    shutil.copy(bench.latest_version(REPO / "examples" / "models" / RANKER.name), files[RANKER.name])
    files[MLP.name].write_bytes(ranking_mlp())
    return files


def executed(address: str, model: str) -> tuple[int, int]:
    """Rows and model runs so far: both servers answer Triton's statistics extension."""
    with urllib.request.urlopen(f"http://{address}/v2/models/{model}/stats", timeout=10) as reply:
        stats = json.load(reply)["model_stats"][0]
    return stats["inference_count"], stats["execution_count"]


def server_version(address: str) -> str:
    try:
        with urllib.request.urlopen(f"http://{address}/v2", timeout=10) as reply:
            return json.load(reply).get("version", "?")
    except OSError:
        return "?"


def group_rss_kib(pgid: int) -> tuple[int, list[str]]:
    """Resident memory summed over a process group (Triton's start script execs tritonserver,
    which then leads the group alone; a stub it starts would count too), and who is in it."""
    total, names = 0, []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat[stat.rindex(")") + 2:].split()[2]) != pgid:
                continue
            total += bench_pipeline.rss_kib(int(entry.name))
            names.append(stat[stat.index("(") + 1: stat.rindex(")")])
        except (OSError, ValueError, IndexError):
            continue
    return total, names


def cpu_seconds(pid: int) -> float:
    """User and system CPU a process has used so far, all its threads together."""
    fields = (Path(f"/proc/{pid}") / "stat").read_text()
    fields = fields[fields.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(pgid: int) -> float:
    """CPU used so far by a process group (see group_rss_kib)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat[stat.rindex(")") + 2:].split()[2]) == pgid:
                total += cpu_seconds(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return total


class Pair:
    """tensorport and Triton serving one setup at once."""

    def __init__(self, args, setup: Setup, work: Path, files: dict[str, Path]):
        tensorport_root, triton_root = write_repositories(work, setup, files)
        cpu = setup.cpu(server_side=True)
        print(f"setup {setup.name}: starting tensorport and Triton", flush=True)
        self.tensorport = bench.Tensorport(Path(args.binary), tensorport_root, work / f"tensorport-{setup.name}.log",
                                           cpu=cpu, extra=["--ort-library", str(bench.ort_library())])
        try:
            self.triton = bench_pipeline.Triton(Path(args.triton), triton_root, work / f"triton-{setup.name}.log",
                                                [], cpu=cpu)
        except BaseException:
            self.tensorport.stop()
            raise
        self.setup = setup

    def address(self, server: str, protocol: str) -> str:
        peer = self.tensorport if server == "tensorport" else self.triton
        return peer.grpc if "grpc" in protocol else peer.rest

    def rest(self, server: str) -> str:
        return self.tensorport.rest if server == "tensorport" else self.triton.rest

    def rss(self) -> dict[str, dict]:
        triton, names = group_rss_kib(self.triton.proc.pid)
        return {"tensorport": {"kib": bench_pipeline.rss_kib(self.tensorport.proc.pid), "processes": ["tensorport"]},
                "triton": {"kib": triton, "processes": names}}

    def cpu(self, server: str) -> float:
        """CPU the server has used so far (Triton: its process group)."""
        if server == "tensorport":
            return cpu_seconds(self.tensorport.proc.pid)
        return group_cpu_seconds(self.triton.proc.pid)

    def stop(self) -> None:
        self.tensorport.stop()
        self.triton.stop()


def measure(args, cell: Cell, model: bench.Model, target: str, cpu: str | None, extra: list[str] | None = None) -> dict:
    command = [args.loadgen, "--protocol", cell.protocol, "--target", target, "--model", model.name,
               "--input", f"features:{model.features}", "--batch", str(cell.batch),
               "--concurrency", str(cell.concurrency), "--duration", str(args.duration),
               "--warmup", str(args.warmup), "--format", "json", *(extra or [])]
    if cell.shm:
        command += ["--shm", "--output", "score:1"]
    done = subprocess.run(bench.pinned(cpu, command), check=False, capture_output=True, text=True,
                          timeout=args.duration + args.warmup + 120)
    if done.returncode != 0:
        return {"failed": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(cell: Cell, result: dict) -> str:
    if "failed" in result:
        return f"failed: {result['failed']}"
    shown = ", ".join(f"{figure.of(result):,.{digits(figure)}f} {figure.unit}" for figure in cell.figures)
    return f"{shown}, errors {result.get('error_count', 0)}"


# ---------------------------------------------------------------- the run


def run_setup(args, setup: Setup, cells: list[Cell], work: Path, files: dict[str, Path], results: list[dict],
              memory: dict) -> None:
    pair = Pair(args, setup, work, files)
    try:
        memory.setdefault("versions", {}).update(
            {s: server_version(pair.rest(s)) for s in SERVERS})
        if setup.name == "ranking":
            memory["after start"] = pair.rss()
        for cell in cells:
            for round_ in range(1, args.rounds + 1):
                for server in SERVERS:
                    before, used = executed(pair.rest(server), setup.model.name), pair.cpu(server)
                    result = measure(args, cell, setup.model, pair.address(server, cell.protocol),
                                     setup.cpu(server_side=False))
                    used, after = pair.cpu(server) - used, executed(pair.rest(server), setup.model.name)
                    runs, rows = after[1] - before[1], after[0] - before[0]
                    result["exec_batch"] = rows / runs if runs else None
                    # Over the warm-up and the measured seconds both, as the statistics count.
                    result["cpu_us_per_row"] = used * 1e6 / rows if rows else None
                    results.append({"server": server, "round": round_, "cell": cell.name, **result})
                    print(f"  {cell.name} round {round_} {server}: {summary(cell, result)}", flush=True)
        if setup.name == "ranking":
            memory[f"after the {ROWS:,}-row cells"] = pair.rss()
    finally:
        pair.stop()


def run_floor(args, cell: Cell, files: dict[str, Path], results: list[dict]) -> None:
    extra = ["--model-file", str(files[MLP.name]), "--ort-library", str(bench.ort_library())]
    for round_ in range(1, args.rounds + 1):
        result = measure(args, cell, MLP, "-", bench.SERVER_CPU, extra)
        results.append({"server": "floor", "round": round_, "cell": cell.name, **result})
        print(f"  floor round {round_}: {summary(cell, result)}", flush=True)


# ---------------------------------------------------------------- rendering


def digits(figure: Figure) -> int:
    return 1 if figure.unit in ("p50 ms", "p50 us") else 0


def per_round(results: list[dict], server: str, cell: str) -> list[dict]:
    rows = sorted((r for r in results if r["server"] == server and r["cell"] == cell), key=lambda r: r["round"])
    return rows


def shown(figure: Figure, result: dict) -> str:
    if "failed" in result:
        return f"failed ({result['failed']})"
    text = f"{figure.of(result):,.{digits(figure)}f}"
    errors = result.get("error_count", 0)
    return f"{text} ({errors} errors)" if errors else text


def usable(result: dict) -> bool:
    return "failed" not in result and result.get("error_count", 0) == 0


def served_rows(results: list[dict], cells: list[Cell]) -> list[str]:
    out = [("| cell | figure | tensorport, per round | Triton, per round | tensorport / Triton, per round "
            "| median ratio |"),
           "| --- | --- | --- | --- | --- | ---: |"]
    for cell in cells:
        ours, theirs = per_round(results, "tensorport", cell.name), per_round(results, "triton", cell.name)
        for figure in cell.figures:
            ratios = [figure.of(a) / figure.of(b) for a, b in zip(ours, theirs)
                      if usable(a) and usable(b) and figure.of(b)]
            median = f"{statistics.median(ratios):.2f}x" if ratios else ""
            out.append(f"| {cell.label} | {figure.unit}{' (lower is better)' if figure.lower_is_better else ''} "
                       f"| {', '.join(shown(figure, r) for r in ours)} | {', '.join(shown(figure, r) for r in theirs)} "
                       f"| {', '.join(f'{x:.2f}x' for x in ratios)} | {median} |")
    return out


def cpu_rows(results: list[dict], cells: list[Cell]) -> list[str]:
    """Each server's CPU per row served, a figure the machine's load moves less than
    throughput: a server that does the same work on less CPU has room the other lacks."""
    out = [("Server CPU per row served (user + system, over each run's warm-up and measured seconds, "
            "rows from each server's statistics), in microseconds, per round:"), "",
           "| cell | tensorport | Triton | Triton / tensorport, median |", "| --- | --- | --- | ---: |"]
    for cell in cells:
        ours, theirs = per_round(results, "tensorport", cell.name), per_round(results, "triton", cell.name)
        pairs = [(a["cpu_us_per_row"], b["cpu_us_per_row"]) for a, b in zip(ours, theirs)
                 if usable(a) and usable(b) and a.get("cpu_us_per_row") and b.get("cpu_us_per_row")]
        if not pairs:
            continue
        ratio = statistics.median(b / a for a, b in pairs)
        out.append(f"| {cell.label} | {', '.join(f'{a:,.1f}' for a, _ in pairs)} "
                   f"| {', '.join(f'{b:,.1f}' for _, b in pairs)} | {ratio:.2f}x |")
    return out if len(out) > 4 else []


def median_of(results: list[dict], server: str, cell: str, figure: Figure) -> float | None:
    values = [figure.of(r) for r in per_round(results, server, cell) if usable(r)]
    return statistics.median(values) if values else None


def exec_batches(results: list[dict]) -> str:
    parts = []
    for server in SERVERS:
        values = [r["exec_batch"] for r in per_round(results, server, "batching-c64") if r.get("exec_batch")]
        if values:
            parts.append(f"{'tensorport' if server == 'tensorport' else 'Triton'} "
                         f"{', '.join(f'{v:.1f}' for v in values)}")
    return ("Rows per model run in the batching cell, per round (each server's statistics): "
            + "; ".join(parts) + ".") if parts else ""


def floor_lines(results: list[dict]) -> list[str]:
    floor = CELLS[-1]
    rounds = per_round(results, "floor", floor.name)
    if not rounds:
        return []
    text = "; ".join(f"{f.unit} {', '.join(shown(f, r) for r in rounds)}" for f in floor.figures)
    out = [(f"In-process floor, {ROWS:,} rows on core {bench.SERVER_CPU} (`tensorport-loadgen --protocol floor`, "
            f"the same file and thread settings), per round: {text}.")]
    base = median_of(results, "floor", floor.name, P50_MS)
    over = [(server, median_of(results, server, "rows-c1", P50_MS)) for server in SERVERS]
    if base and all(v is not None for _, v in over):
        out[0] += (" Median c=1 p50 over the floor's: "
                   + ", ".join(f"{'tensorport' if s == 'tensorport' else 'Triton'} {v / base:.2f}x" for s, v in over)
                   + ".")
    return out


def memory_lines(memory: dict) -> list[str]:
    moments = [m for m in memory if m != "versions"]
    if not moments:
        return []
    group = ", ".join(memory[moments[0]]["triton"]["processes"])
    out = [f"Resident memory of the 2-instance servers (VmRSS; Triton: its process group, {group}):", "",
           "| server | " + " | ".join(moments) + " |", "| --- |" + " ---: |" * len(moments)]
    for server in SERVERS:
        out.append(f"| {'tensorport' if server == 'tensorport' else 'native Triton'} | "
                   + " | ".join(f"{memory[m][server]['kib'] / 1024:,.1f} MiB" for m in moments) + " |")
    return out


def versions(args, memory: dict) -> str:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=False, capture_output=True,
                            text=True).stdout.strip() or "?"
    ort = bench.ort_library()
    same = ""
    triton_ort = Path(args.triton) / "backends" / "onnxruntime" / "libonnxruntime.so.1"
    if triton_ort.exists():
        same = (", the same library file in both" if filecmp.cmp(ort, triton_ort, shallow=False)
                else f", tensorport's {ort.name} and Triton's backend copy differ")
    found = memory.get("versions", {})
    return (f"tensorport {commit} (server reports {found.get('tensorport', '?')}, release build), native Triton "
            f"{found.get('triton', '?')} with the ONNX Runtime backend of r24.10, ONNX Runtime "
            f"{ort.name.removeprefix('libonnxruntime.so.') or '?'} from the PyPI wheel{same}")


def render(args, results: list[dict], memory: dict, cells: list[Cell], elapsed: float) -> str:
    when = time.gmtime()
    served = [c for c in cells if c.setup != "floor"]
    lines = [
        BEGIN,
        (f"Command: `{args.command}` ({elapsed / 60:.1f} minutes, {time.strftime('%Y-%m-%d %H:%M UTC', when)}; "
         f"{args.rounds} round{'s' if args.rounds > 1 else ''}, each cell run tensorport then Triton per round, "
         f"{args.warmup:g} s warm-up and {args.duration:g} s measured per run)."),
        "",
        f"- Machine: {bench.machine()}",
        f"- Versions: {versions(args, memory)}",
        ("- Both servers load the same .onnx file per model, one intra-op and one inter-op ONNX Runtime thread; "
         "KServe v2 through `tensorport-loadgen` (closed loop, one HTTP/2 connection for gRPC, one HTTP/1.1 "
         f"connection per request in flight). Pinned cells: servers on core {bench.SERVER_CPU}, the load generator "
         f"on core {bench.CLIENT_CPU}. The {ROWS:,}-row cells: two instances each (tensorport "
         "`[instances] count = 2`, `[batching] max_batch_size = 1024`; Triton `instance_group` count 2, "
         "KIND_CPU, max_batch_size 1024), servers and generator unpinned. Batching cell: tensorport "
         "`[batching] max_batch_size = 64, max_queue_delay_us = 0`, Triton `dynamic_batching { }` with "
         "max_batch_size 64. The two servers of a setup run at once, each idle while the other is measured."),
        ("- Ratios: tensorport's figure over Triton's in the same round (above 1x is better for tensorport in "
         "throughput, below 1x in latency); the median over the rounds is the figure to quote."),
        "",
    ]
    lines += served_rows(results, served)
    cpu = cpu_rows(results, served)
    lines += ["", *cpu] if cpu else []
    batches = exec_batches(results)
    lines += ["", batches] if batches else []
    floor = floor_lines(results)
    lines += ["", *floor] if floor else []
    mem = memory_lines(memory)
    lines += ["", *mem] if mem else []
    failed = sorted({f"{r['server']} {r['cell']}: {r['failed']}" for r in results if "failed" in r})
    if failed:
        lines += ["", "Failed runs: " + "; ".join(failed) + "."]
    lines += ["", END]
    return "\n".join(lines)


def write_doc(path: Path, text: str) -> None:
    doc = path.read_text()
    if BEGIN in doc and END in doc:
        doc = doc[: doc.index(BEGIN)] + text + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip() + f"\n\n{HEADING}\n\n" + text + "\n"
    path.write_text(doc)


def chosen_cells(only: list[str] | None) -> list[Cell]:
    if not only:
        return list(CELLS)
    names = {n.strip() for item in only for n in item.split(",") if n.strip()}
    known = {c.name for c in CELLS}
    unknown = names - known
    if unknown:
        sys.exit(f"unknown cell(s) {', '.join(sorted(unknown))}; cells: {', '.join(c.name for c in CELLS)}")
    return [c for c in CELLS if c.name in names]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    release = bench.cargo_target_dir() / "release"
    ap.add_argument("--binary", default=str(release / "tensorport"))
    ap.add_argument("--loadgen", default=str(release / "tensorport-loadgen"))
    ap.add_argument("--triton", default=str(REPO / ".cache" / "triton-onnx"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=4.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per run")
    ap.add_argument("--only", action="append", metavar="CELL",
                    help="only these cells: " + ", ".join(c.name for c in CELLS))
    ap.add_argument("--doc", help="where the section goes (default docs/BENCHMARKS.md; with --only, '-'); "
                                  "'-': print only")
    args = ap.parse_args()
    if args.rounds < 1:
        sys.exit("--rounds must be at least 1")
    cells = chosen_cells(args.only)
    if args.doc is None:
        args.doc = "-" if args.only else str(REPO / "docs" / "BENCHMARKS.md")
    relative = [os.path.relpath(a, REPO) if a.startswith(str(REPO)) else a for a in sys.argv[1:]]
    args.command = shlex.join(["scripts/bench_triton.py", *relative])
    if not (Path(args.triton) / "start-triton.sh").exists():
        sys.exit(f"no Triton in {args.triton}: run ../shared/tools/setup-triton-onnx.sh {args.triton} "
                 "(or `make triton-onnx`)")
    for binary in (args.binary, args.loadgen):
        if not os.access(binary, os.X_OK):
            sys.exit(f"no {binary}: run `make bench-build`")
    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="tensorport-bench-triton-"))
    results: list[dict] = []
    memory: dict = {}
    try:
        files = write_model_files(work)
        for setup in SETUPS.values():
            mine = [c for c in cells if c.setup == setup.name]
            if mine:
                run_setup(args, setup, mine, work, files, results, memory)
        floors = [c for c in cells if c.setup == "floor"]
        if floors:
            print("floor", flush=True)
            run_floor(args, floors[0], files, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (REPO / ".cache" / "bench").mkdir(parents=True, exist_ok=True)
    (REPO / ".cache" / "bench" / "triton.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    text = render(args, results, memory, cells, time.time() - started)
    print(text)
    if args.doc != "-":
        write_doc(Path(args.doc), text)
        print(f"wrote {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
