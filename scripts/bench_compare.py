#!/usr/bin/env python3
"""The request path's regression guard: the working tree's release build against a base
revision's, alternated in rounds within one run. `make bench-compare BASE=<rev>` runs it.

On a shared machine a 3% step is noise between two runs minutes apart; between two servers
that run side by side and are measured one after the other, round after round, the machine
moves both alike. So both builds serve the same folder at the same time (each idle while the
other is measured), each round starts both afresh and measures every cell on both, who goes
first alternating, and each round's ratio is printed beside the median of the rounds. Beside throughput and latency, each server's CPU per
inference (user + system from /proc over the cell's warm-up and measured seconds, inferences
from its own statistics): load moves it far less than throughput, so it is the figure to trust
first when the two disagree.

The base's binary is built once into .cache/bench-compare/ (a detached worktree of the
revision, its own target directory so the working tree's stays warm) and kept there by commit.
The load generator is the working tree's for both, so only the server differs.

Cells (scripts/bench_triton.py's, the same models and settings; --only picks some):
- the example 16-32-1 MLP, batch 1, one instance, server on core 0 and load on core 1
  (--unpinned: both wherever the scheduler puts them): json-c8, grpc-c8, grpc-c1, binary-c8,
  shm-c8, and live-c8 (GET /v2/health/live: the request path's cost beside a no-op request);
- a 256-512-256-1 MLP with dynamic batching, batch-1 requests at c=64: batching-c64;
- the same MLP with two instances and 1,000-row requests, unpinned: rows-c1, rows-c4 (split at
  500 rows where the build knows `split_rows`).

Usage: .venv/bin/python scripts/bench_compare.py --base REV|BINARY [--head BINARY] [--rounds N]
       [--duration S] [--warmup S] [--only CELL,...] [--unpinned] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  the tensorport runner, pinning, ORT library
import bench_triton as bt  # noqa: E402  the cells, models and the CPU reader

REPO = bench.REPO
CACHE = REPO / ".cache" / "bench-compare"
BUILDS = ("base", "head")
LIVE = bt.Cell("live-c8", "ranker", "GET /v2/health/live, c=8 (no model)", "health-live", 1, 8, (bt.REQ_S,))
CELLS = (*[c for c in bt.CELLS if c.setup != "floor"], LIVE)
# Figures whose lower value is the better one are compared as base / head, so that above 1.00x
# always means the working tree is ahead.


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout.strip()


def build_base(rev: str) -> tuple[Path, str]:
    """The base revision's release binary, built once and cached by commit."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    binary = CACHE / "bin" / f"tensorport-{commit[:12]}"
    if binary.is_file():
        print(f"base {rev} ({commit[:12]}): cached {binary.relative_to(REPO)}", flush=True)
        return binary, commit
    source = CACHE / "src" / commit[:12]
    if source.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(source)], check=False)
        shutil.rmtree(source, ignore_errors=True)
    source.parent.mkdir(parents=True, exist_ok=True)
    git("worktree", "add", "--detach", str(source), commit)
    try:
        print(f"base {rev} ({commit[:12]}): building its release binary once (several minutes)", flush=True)
        subprocess.run(["cargo", "build", "--release", "-p", "tensorport", "--bin", "tensorport"], cwd=source,
                       env={**os.environ, "CARGO_TARGET_DIR": str(CACHE / "target")}, check=True)
        binary.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(CACHE / "target" / "release" / "tensorport", binary)
        knows_split = subprocess.run(["git", "-C", str(REPO), "grep", "-q", "split_rows", commit, "--", "src"],
                                     check=False).returncode == 0
        binary.with_suffix(".json").write_text(json.dumps({"split_rows": knows_split}))
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(source)], check=False)
    return binary, commit


def knows_split(binary: Path) -> bool:
    facts = binary.with_suffix(".json")
    return json.loads(facts.read_text()).get("split_rows", True) if facts.is_file() else True


def tensorport_toml(setup: bt.Setup, binary: Path) -> str:
    if knows_split(binary):
        return setup.tensorport_toml
    return "\n".join(line for line in setup.tensorport_toml.splitlines() if not line.startswith("split_rows")) + "\n"


@dataclass
class Side:
    name: str
    binary: Path
    server: bench.Tensorport | None = None


def start(side: Side, setup: bt.Setup, work: Path, files: dict[str, Path], cpu: str | None) -> None:
    root = work / f"{side.name}-{setup.name}"
    (root / setup.model.name / "1").mkdir(parents=True)
    os.link(files[setup.model.name], root / setup.model.name / "1" / "model.onnx")
    (root / setup.model.name / "config.toml").write_text(tensorport_toml(setup, side.binary))
    side.server = bench.Tensorport(side.binary, root, work / f"{side.name}-{setup.name}.log", cpu=cpu,
                                   extra=["--ort-library", str(bench.ort_library())])


def measure_cell(args, cell: bt.Cell, setup: bt.Setup, side: Side, cpu: str | None) -> dict:
    server = side.server
    assert server is not None
    target = server.grpc if "grpc" in cell.protocol else server.rest
    counted = cell.protocol != "health-live"
    before = bt.executed(server.rest, setup.model.name) if counted else (0, 0)
    used = bt.cpu_seconds(server.proc.pid)
    result = bt.measure(args, cell, setup.model, target, cpu)
    used = bt.cpu_seconds(server.proc.pid) - used
    if counted:
        after = bt.executed(server.rest, setup.model.name)
        inferences = after[0] - before[0]
    else:
        # A live probe is one request; the generator's count covers the measured seconds only,
        # so scale it by the warm-up too, as the statistics would.
        inferences = int(result.get("requests_per_s", 0) * (args.duration + args.warmup))
    result["cpu_us_per_inference"] = used * 1e6 / inferences if inferences else None
    return result


def run(args, cells: list[bt.Cell], sides: list[Side], work: Path, results: list[dict]) -> None:
    """Each round starts both servers afresh (in turn, who starts first), measures every cell
    of a setup on both (in turn, who goes first) and stops them: a server process carries
    biases of its own (where its arenas and the model landed), which an A/A run of one binary
    against itself shows at about 5% when both servers live through every round."""
    files = bt.write_model_files(work)
    for setup_name in dict.fromkeys(c.setup for c in cells):
        setup = bt.SETUPS[setup_name]
        pinned = setup.pinned and not args.unpinned
        server_cpu = bench.SERVER_CPU if pinned else None
        client_cpu = bench.CLIENT_CPU if pinned else None
        for round_ in range(1, args.rounds + 1):
            order = sides if round_ % 2 else sides[::-1]
            round_work = work / f"round-{round_}"
            try:
                for side in order:
                    start(side, setup, round_work, files, server_cpu)
                for cell in (c for c in cells if c.setup == setup_name):
                    for side in order:
                        result = measure_cell(args, cell, setup, side, client_cpu)
                        results.append({"build": side.name, "round": round_, "cell": cell.name,
                                        "pinned": pinned, **result})
                        print(f"  {cell.name} round {round_} {side.name}: {bt.summary(cell, result)}, CPU "
                              f"{fmt_cpu(result)} us/inference", flush=True)
            finally:
                for side in sides:
                    if side.server is not None:
                        side.server.stop()
                        side.server = None


def fmt_cpu(result: dict) -> str:
    value = result.get("cpu_us_per_inference")
    return f"{value:,.1f}" if value else "-"


def rounds_of(results: list[dict], build: str, cell: str) -> list[dict]:
    return sorted((r for r in results if r["build"] == build and r["cell"] == cell), key=lambda r: r["round"])


def ratio(figure: bt.Figure, head: dict, base: dict) -> float | None:
    a, b = figure.of(head), figure.of(base)
    if not (bt.usable(head) and bt.usable(base)) or not a or not b:
        return None
    return b / a if figure.lower_is_better else a / b


def table(results: list[dict], cells: list[bt.Cell]) -> list[str]:
    out = ["| cell | figure | base, per round | head, per round | head / base, per round | median |",
           "| --- | --- | --- | --- | --- | ---: |"]
    for cell in cells:
        base, head = rounds_of(results, "base", cell.name), rounds_of(results, "head", cell.name)
        for figure in cell.figures:
            ratios = [r for r in (ratio(figure, h, b) for h, b in zip(head, base)) if r is not None]
            median = f"{statistics.median(ratios):.2f}x" if ratios else ""
            better = " (lower is better; ratio base / head)" if figure.lower_is_better else ""
            out.append(f"| {cell.name} | {figure.unit}{better} | {', '.join(bt.shown(figure, r) for r in base)} "
                       f"| {', '.join(bt.shown(figure, r) for r in head)} "
                       f"| {', '.join(f'{x:.2f}x' for x in ratios)} | {median} |")
    out += ["", "Server CPU per inference, microseconds (user + system over each cell's warm-up and measured "
            "seconds), per round; below 1.00x the working tree spends less:", "",
            "| cell | base | head | head / base, median |", "| --- | --- | --- | ---: |"]
    for cell in cells:
        pairs = [(b["cpu_us_per_inference"], h["cpu_us_per_inference"])
                 for b, h in zip(rounds_of(results, "base", cell.name), rounds_of(results, "head", cell.name))
                 if bt.usable(b) and bt.usable(h) and b.get("cpu_us_per_inference") and h.get("cpu_us_per_inference")]
        if pairs:
            out.append(f"| {cell.name} | {', '.join(f'{b:,.1f}' for b, _ in pairs)} "
                       f"| {', '.join(f'{h:,.1f}' for _, h in pairs)} "
                       f"| {statistics.median(h / b for b, h in pairs):.2f}x |")
    live = {b: [r for r in rounds_of(results, b, LIVE.name) if bt.usable(r)] for b in BUILDS}
    infer = {b: [r for r in rounds_of(results, b, "json-c8") if bt.usable(r)] for b in BUILDS}
    shares = []
    for build in BUILDS:
        pairs = [i["requests_per_s"] / lv["requests_per_s"] for i, lv in zip(infer[build], live[build])
                 if lv.get("requests_per_s")]
        if pairs:
            shares.append(f"{build} {statistics.median(pairs):.2f}x")
    if shares:
        out += ["", "HTTP JSON infer over GET /v2/health/live at c=8, median of rounds: " + ", ".join(shares) + "."]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True,
                    help="the revision to compare against (built once, cached), or a server binary")
    ap.add_argument("--head", help="the working tree's server binary (default: cargo's release build)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds per cell")
    ap.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per cell")
    ap.add_argument("--only", action="append", default=[], help="cell names, comma-separated or repeated")
    ap.add_argument("--unpinned", action="store_true", help="servers and load generator unpinned in every cell")
    ap.add_argument("--json", help="also write every round's raw figures here")
    ap.add_argument("--loadgen", default=str(bench.cargo_target_dir() / "release" / "tensorport-loadgen"))
    args = ap.parse_args()
    wanted = [name.strip() for item in args.only for name in item.split(",") if name.strip()]
    cells = [c for c in CELLS if not wanted or c.name in wanted]
    if wanted and len(cells) != len(wanted):
        sys.exit(f"--only: unknown cell; cells: {', '.join(c.name for c in CELLS)}")
    head = Path(args.head) if args.head else bench.cargo_target_dir() / "release" / "tensorport"
    if not head.is_file() or not Path(args.loadgen).is_file():
        sys.exit("no release build: run `make bench-build`")
    if Path(args.base).is_file():
        base, commit = Path(args.base), "binary"
    else:
        base, commit = build_base(args.base)
    sides = [Side("base", base), Side("head", head)]
    results: list[dict] = []
    began = time.time()
    with tempfile.TemporaryDirectory(prefix="tensorport-compare-") as tmp:
        run(args, cells, sides, Path(tmp), results)
    described = (f"base {args.base} ({commit[:12]}) against the working tree on {git('rev-parse', '--short', 'HEAD')}"
                 f"{' with changes' if git('status', '--porcelain', '--untracked-files=no') else ''}; "
                 f"{args.rounds} rounds of {args.duration:g} s (+{args.warmup:g} s warm-up) per cell, "
                 f"{time.time() - began:.0f} s in all; {bench.machine()}")
    print("\n" + described + "\n\n" + "\n".join(table(results, cells)))
    if args.json:
        Path(args.json).write_text("\n".join(json.dumps(r) for r in results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
