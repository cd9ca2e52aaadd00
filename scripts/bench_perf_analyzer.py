#!/usr/bin/env python3
"""Runs Triton's perf_analyzer against a release build of tensorport and prints Markdown
tables:
- protocols: TF Serving gRPC, KServe gRPC and HTTP, with and without system shared memory, at
  batch 1 and 32, concurrency 1;
- batching: batch-1 requests over KServe gRPC at concurrency 1, 8 and 64, dynamic batching
  off versus on, with the batch sizes the server executed.
The server is pinned to core 0 and perf_analyzer to core 1 (taskset), so they do not fight
over the same core on a 2-core machine.

Usage: .venv/bin/python scripts/bench_perf_analyzer.py [--binary target/release/tensorport]
       [--model ranker] [--interval-ms 3000] [--suite protocols|batching|all]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LISTENING = re.compile(r"listening grpc=(\S+) rest=(\S+)")


def cargo_target_dir() -> Path:
    """Where cargo builds (CARGO_TARGET_DIR, build.target-dir or target/), as cargo says."""
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return Path(json.loads(out)["target_directory"])


def start_server(binary: Path, model_dir: Path, log: Path, *extra: str) -> tuple[subprocess.Popen, str, str]:
    command = [str(binary), "serve", "--model-dir", str(model_dir), "--host", "127.0.0.1",
               "--grpc-port", "0", "--rest-port", "0", *extra]
    if shutil.which("taskset"):
        command = ["taskset", "-c", "0"] + command
    out = log.open("w")
    proc = subprocess.Popen(command, stderr=out, stdout=out)
    deadline = time.time() + 60
    while time.time() < deadline:
        text = log.read_text()
        match = LISTENING.search(text)
        # The ports are bound first; the models serve once the load at start-up settles.
        if match and "initial load settled" in text:
            return proc, match.group(1), match.group(2)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    sys.exit(f"server did not start:\n{log.read_text()}")


def run(perf_analyzer: str, args: list[str], csv_path: Path) -> dict[str, float] | str:
    command = [perf_analyzer, *args, "-f", str(csv_path)]
    if shutil.which("taskset"):
        command = ["taskset", "-c", "1"] + command
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        return (result.stdout + result.stderr).strip().splitlines()[-1]
    with csv_path.open() as f:
        row = next(csv.DictReader(f))
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50": float(row["p50 latency"]),
        "p99": float(row["p99 latency"]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(cargo_target_dir() / "release" / "tensorport"))
    ap.add_argument("--perf-analyzer", default=os.environ.get(
        "PERF_ANALYZER", str(REPO / ".cache" / "perf_analyzer" / "perf_analyzer")))
    ap.add_argument("--model", default="ranker")
    ap.add_argument("--interval-ms", type=int, default=3000)
    ap.add_argument("--suite", choices=["protocols", "batching", "all"], default="all")
    args = ap.parse_args()
    if args.suite in ("protocols", "all"):
        protocols(args)
    if args.suite in ("batching", "all"):
        batching(args)
    return 0


def executed(rest: str, model: str) -> tuple[int, int]:
    """(inferences, executions) the server has run for `model` so far."""
    import json
    import urllib.request

    with urllib.request.urlopen(f"http://{rest}/v2/models/{model}/stats", timeout=10) as reply:
        stats = json.load(reply)["model_stats"][0]
    return stats["inference_count"], stats["execution_count"]


def batching(args) -> None:
    work = Path(tempfile.mkdtemp(prefix="tensorport-bench-"))
    models = work / "models"
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_example_models.py"), "--wide-ranker", str(models)],
                   check=True, capture_output=True)
    model = "ranker_wide"
    print(f"\nperf_analyzer against {args.binary}, model {model} (256 -> 1024 -> 1024 -> 1, ~5 MB of weights), "
          f"batch-1 requests over KServe gRPC; server on core 0, client on core 1\n")
    print("| batching | concurrency | infer/s | p50 (us) | p99 (us) | mean executed batch |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    settings = {
        "off": [],
        "on (max 64, no delay)": ["--max-batch-size", "64"],
        "on (max 64, 2 ms delay)": ["--max-batch-size", "64", "--max-queue-delay-us", "2000"],
    }
    for label, flags in settings.items():
        proc, grpc, rest = start_server(Path(args.binary), models, work / "server.log", *flags)
        try:
            for concurrency in (1, 8, 64):
                before = executed(rest, model)
                figures = run(args.perf_analyzer, [
                    "-m", model, "-i", "grpc", "-u", grpc, "-b", "1",
                    "--concurrency-range", f"{concurrency}:{concurrency}",
                    "--measurement-interval", str(args.interval_ms), "--max-trials", "10",
                    "--stability-percentage", "20"], work / f"batching{concurrency}.csv")
                after = executed(rest, model)
                runs = max(after[1] - before[1], 1)
                mean_batch = (after[0] - before[0]) / runs
                if isinstance(figures, str):
                    print(f"| {label} | {concurrency} | failed: {figures} | | | |")
                else:
                    print(f"| {label} | {concurrency} | {figures['throughput']:.0f} | {figures['p50']:.0f} | "
                          f"{figures['p99']:.0f} | {mean_batch:.1f} |")
                sys.stdout.flush()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    shutil.rmtree(work, ignore_errors=True)


def protocols(args) -> None:
    work = Path(tempfile.mkdtemp(prefix="tensorport-bench-"))
    proc, grpc, rest = start_server(Path(args.binary), REPO / "examples" / "models", work / "server.log")
    common = ["-m", args.model, "--concurrency-range", "1:1", "--measurement-interval", str(args.interval_ms),
              "--max-trials", "10", "--stability-percentage", "20"]
    shm = ["--shared-memory", "system", "--output-shared-memory-size", "131072"]
    cases = [
        ("TF Serving gRPC", 1, ["--service-kind", "tfserving", "-i", "grpc", "-u", grpc, "--shape", "features:1,16"]),
    ]
    for batch in (1, 32):
        cases += [
            ("KServe gRPC", batch, ["-i", "grpc", "-u", grpc, "-b", str(batch)]),
            ("KServe gRPC + shm", batch, ["-i", "grpc", "-u", grpc, "-b", str(batch), *shm]),
            ("KServe HTTP", batch, ["-i", "http", "-u", rest, "-b", str(batch)]),
            ("KServe HTTP + shm", batch, ["-i", "http", "-u", rest, "-b", str(batch), *shm]),
        ]
    print(f"perf_analyzer against {args.binary}, model {args.model}, concurrency 1; "
          f"server on core 0, client on core 1\n")
    print("| protocol | batch | infer/s | p50 (us) | p99 (us) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    try:
        for i, (name, batch, extra) in enumerate(cases):
            figures = run(args.perf_analyzer, common + extra, work / f"run{i}.csv")
            if isinstance(figures, str):
                print(f"| {name} | {batch} | failed: {figures} | | |")
            else:
                print(f"| {name} | {batch} | {figures['throughput']:.0f} | {figures['p50']:.0f} | {figures['p99']:.0f} |")
            sys.stdout.flush()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
