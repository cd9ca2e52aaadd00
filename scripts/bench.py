#!/usr/bin/env python3
"""Side-by-side benchmark: tensorport against MLServer and against the in-process floor (the
same model through ONNX Runtime with no server), in one run on one machine. `make bench` runs
it; `make bench-quick` runs it with --quick.

Every measurement is one `tensorport-loadgen` run (closed loop, warm-up excluded). Servers run
on core 0 and the load generator on core 1 (taskset); the floor runs on core 0, where the
servers run the model. Triton's perf_analyzer repeats a few tensorport cells as a cross-check
of the generator. The tables are written into docs/BENCHMARKS.md between the bench markers;
the raw results (one JSON object per line) go to .cache/bench/results.jsonl.

The full run also compares model instances: one compute-bound model with `[instances]
count = 1` and `count = 2`, and the same file loaded as two models with the load split between
them (batching off; server and load generator unpinned, since instances exist to use more than
one core). `--instances-only` runs just that comparison and prints it.

Usage: .venv/bin/python scripts/bench.py [--quick] [--instances-only] [--duration S]
       [--warmup S] [--no-mlserver] [--no-perf-analyzer] [--doc docs/BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_perf_analyzer  # the perf_analyzer runner, shared

REPO = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
SERVER_CPU, CLIENT_CPU = "0", "1"
LISTENING = re.compile(r"listening grpc=(\S+) rest=(\S+)")
SETTLED = "initial load settled"


def cargo_target_dir() -> Path:
    """Where cargo builds (CARGO_TARGET_DIR, build.target-dir or target/), as cargo says."""
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return Path(json.loads(out)["target_directory"])


@dataclass(frozen=True)
class Model:
    name: str
    features: int
    about: str


RANKER = Model("ranker", 16, "the example ranking MLP (16 -> 32 -> 1, 2 KB of weights)")
WIDE = Model("ranker_wide", 256, "a wide ranking MLP (256 -> 1024 -> 1024 -> 1, 5 MB of weights)")
LARGE = Model("ranker_large", 262_144, "a large-input MLP (1 MiB of features per row -> 4 -> 1, 4 MiB of weights)")
# The instances comparison's model: issue 13's compute-bound MLP, where a run (about 2 ms for 32
# rows) outweighs what the request and the load generator cost.
# The concurrency-1 cells again with the server holding the kernel's CPU wake-up latency cap at
# zero (idle CPUs poll instead of sleeping; machine-wide, so the generator's CPU too). Needs
# write access to the PM QoS device; skipped without it.
POLLING = "tensorport, idle CPUs polling"
PM_QOS_DEVICE = "/dev/cpu_dma_latency"
POLLING_PROTOCOLS = ("kserve-grpc", "kserve-http", "kserve-http-binary")
COMPUTE = Model("mlp_compute", 256, "a compute-bound MLP (256 -> 2048 -> 2048 -> 1, 19 MB of weights)")
COMPUTE_B = Model("mlp_compute_b", 256, "the same file as mlp_compute, loaded as a second model")
# The instances comparison: rows per request and requests in flight (split between the models
# of the two-model setup).
INSTANCE_BATCH, INSTANCE_CONCURRENCY = 32, 4
INSTANCE_SETUPS = (("count = 1", ((COMPUTE, 1),)), ("count = 2", ((COMPUTE, 2),)),
                   ("two models", ((COMPUTE, 1), (COMPUTE_B, 1))))


@dataclass
class Cell:
    """One measurement: who served it, how, and what the generator reported."""
    server: str  # tensorport, MLServer, floor, perf_analyzer
    model: Model
    protocol: str
    batching: str  # off / on
    batch: int
    concurrency: int
    shm: bool = False
    result: dict = field(default_factory=dict)
    executed_batch: float | None = None

    def key(self) -> tuple:
        return (self.model.name, self.protocol, self.batching, self.batch, self.concurrency, self.shm)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(cpu: str | None, command: list[str]) -> list[str]:
    """`command` on `cpu` (None: wherever the scheduler puts it)."""
    return ["taskset", "-c", cpu, *command] if cpu is not None and shutil.which("taskset") else command


def ort_library() -> Path:
    found = sorted((REPO / ".venv" / "lib").glob("python*/site-packages/onnxruntime/capi/libonnxruntime.so*"))
    if not found:
        sys.exit("no libonnxruntime in .venv: run `make venv`")
    return found[-1]


def write_models(root: Path, models: list[Model], batching: bool) -> None:
    """A model directory holding the bench models; with batching, each gets a config.toml."""
    generate = []
    for model in models:
        if model is RANKER:
            target = root / model.name / "1" / "model.onnx"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(latest_version(REPO / "examples" / "models" / "ranker"), target)
        else:
            flag = {WIDE.name: "--wide-ranker", COMPUTE.name: "--compute-mlp"}.get(model.name, "--large-ranker")
            generate += [flag, str(root)]
        if batching:
            (root / model.name).mkdir(parents=True, exist_ok=True)
            (root / model.name / "config.toml").write_text("[batching]\nmax_batch_size = 64\nmax_queue_delay_us = 0\n")
    if generate:
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_example_models.py"), *generate],
                       check=True, capture_output=True)


def latest_version(model_dir: Path) -> Path:
    versions = sorted((int(p.name), p) for p in model_dir.iterdir() if p.name.isdigit())
    return versions[-1][1] / "model.onnx"


class Tensorport:
    def __init__(self, binary: Path, model_dir: Path, log: Path, cpu: str | None = SERVER_CPU,
                 extra: list[str] | None = None):
        command = pinned(cpu, [str(binary), "serve", "--model-dir", str(model_dir), "--host", "127.0.0.1",
                                      "--grpc-port", "0", "--rest-port", "0", *(extra or [])])
        self.log = log
        out = log.open("w")
        self.proc = subprocess.Popen(command, stdout=out, stderr=out, env={**os.environ, "RUST_LOG": "warn,tensorport=info"})
        deadline = time.time() + 120
        while time.time() < deadline:
            text = log.read_text()
            match = LISTENING.search(text)
            if match and SETTLED in text:
                self.grpc, self.rest = match.group(1), match.group(2)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        sys.exit(f"tensorport did not start:\n{log.read_text()}")

    def executed(self, model: str) -> tuple[int, int]:
        with urllib.request.urlopen(f"http://{self.rest}/v2/models/{model}/stats", timeout=10) as reply:
            stats = json.load(reply)["model_stats"][0]
        return stats["inference_count"], stats["execution_count"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class MLServer:
    """MLServer with the runtime in bench/mlserver, one inference process (parallel_workers 0,
    so requests do not cross a process boundary on the way to the model)."""

    def __init__(self, executable: Path, work: Path, models: list[Model], batching: bool, model_files: Path):
        self.http, self.grpc = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        root = work / ("mlserver-batching" if batching else "mlserver")
        root.mkdir(parents=True, exist_ok=True)
        settings = {
            "host": "127.0.0.1", "http_port": int(self.http.split(":")[1]), "grpc_port": int(self.grpc.split(":")[1]),
            "metrics_port": free_port(), "metrics_endpoint": None, "parallel_workers": 0,
            "logging_settings": {"version": 1, "disable_existing_loggers": False,
                                 "loggers": {"uvicorn.access": {"level": "WARNING"}}},
        }
        (root / "settings.json").write_text(json.dumps(settings))
        for model in models:
            folder = root / model.name
            folder.mkdir(exist_ok=True)
            model_settings = {
                "name": model.name, "implementation": "runtime.OnnxModel",
                "parameters": {"uri": str(model_files / model.name / "1" / "model.onnx")},
                # Adaptive batching: up to 64 rows, waiting at most 1 ms (MLServer needs a
                # positive wait to batch at all).
                "max_batch_size": 64 if batching else 1, "max_batch_time": 0.001 if batching else 0,
            }
            (folder / "model-settings.json").write_text(json.dumps(model_settings))
        self.log = work / f"{root.name}.log"
        out = self.log.open("w")
        env = {**os.environ, "PYTHONPATH": str(REPO / "bench" / "mlserver")}
        self.proc = subprocess.Popen(pinned(SERVER_CPU, [str(executable), "start", str(root)]),
                                     stdout=out, stderr=out, env=env, cwd=root)
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            if all(self.ready(m.name) for m in models):
                return
            time.sleep(0.5)
        self.stop()
        sys.exit(f"MLServer did not start:\n{self.log.read_text()[-3000:]}")

    def ready(self, model: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http}/v2/models/{model}/ready", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Runner:
    def __init__(self, args):
        self.args = args
        self.loadgen = str(Path(args.loadgen))
        self.cells: list[Cell] = []
        self.results = REPO / ".cache" / "bench" / "results.jsonl"
        self.results.parent.mkdir(parents=True, exist_ok=True)
        self.results.write_text("")

    def loadgen_run(self, cell: Cell, target: str, extra: list[str] | None = None,
                    cpu: str | None = CLIENT_CPU) -> Cell:
        command = [self.loadgen, "--protocol", cell.protocol, "--target", target, "--model", cell.model.name,
                   "--input", f"features:{cell.model.features}", "--batch", str(cell.batch),
                   "--concurrency", str(cell.concurrency), "--duration", str(self.args.duration),
                   "--warmup", str(self.args.warmup), "--format", "json",
                   "--label", f"{cell.server} batching {cell.batching}", *(extra or [])]
        if cell.shm:
            command += ["--shm", "--output", "score:1"]
        done = subprocess.run(pinned(cpu, command), check=False, capture_output=True, text=True,
                              timeout=self.args.duration + self.args.warmup + 120)
        if done.returncode == 0:
            cell.result = json.loads(done.stdout.strip().splitlines()[-1])
        else:
            cell.result = {"failed": (done.stderr.strip().splitlines() or ["no output"])[-1]}
        with self.results.open("a") as f:
            f.write(json.dumps({"server": cell.server, "batching": cell.batching, **cell.result}) + "\n")
        self.cells.append(cell)
        print(f"  {describe(cell)}", flush=True)
        return cell

    def against_tensorport(self, server: Tensorport, cells: list[Cell]) -> None:
        for cell in cells:
            before = server.executed(cell.model.name)
            target = server.grpc if "grpc" in cell.protocol else server.rest
            self.loadgen_run(cell, target)
            after = server.executed(cell.model.name)
            cell.executed_batch = (after[0] - before[0]) / max(after[1] - before[1], 1)

    def floor(self, model: Model, batch: int, model_files: Path) -> Cell:
        cell = Cell("floor", model, "floor", "-", batch, 1)
        extra = ["--model-file", str(model_files / model.name / "1" / "model.onnx"), "--ort-library", str(ort_library())]
        return self.loadgen_run(cell, "-", extra, cpu=SERVER_CPU)

    def perf_analyzer(self, server: Tensorport, model: Model, protocol: str, concurrency: int, work: Path) -> None:
        kind = {"kserve-grpc": ["-i", "grpc", "-u", server.grpc],
                "kserve-http": ["-i", "http", "-u", server.rest],
                "tfs-grpc": ["--service-kind", "tfserving", "-i", "grpc", "-u", server.grpc,
                             "--shape", f"features:1,{model.features}"]}[protocol]
        interval = str(int(self.args.duration * 1000))
        args = ["-m", model.name, "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-interval",
                interval, "--max-trials", "5", "--stability-percentage", "25", *kind]
        figures = bench_perf_analyzer.run(self.args.perf_analyzer, args, work / f"pa-{protocol}-{concurrency}.csv")
        cell = Cell("perf_analyzer", model, protocol, "off", 1, concurrency)
        cell.result = ({"failed": figures} if isinstance(figures, str) else
                       {"inferences_per_s": figures["throughput"], "requests_per_s": figures["throughput"],
                        "p50_us": figures["p50"], "p99_us": figures["p99"], "error_count": 0})
        self.cells.append(cell)
        print(f"  {describe(cell)}", flush=True)

    def instances(self, work: Path) -> None:
        """Each setup of INSTANCE_SETUPS on its own server; in the two-model setup one load
        generator per model, run at the same time."""
        for label, models in INSTANCE_SETUPS:
            root = work / ("instances-" + label.replace(" ", "").replace("=", ""))
            write_models(root, [COMPUTE], batching=False)
            for model, count in models:
                if model is not COMPUTE:
                    shutil.copytree(root / COMPUTE.name, root / model.name)
                (root / model.name / "config.toml").write_text(f"[instances]\ncount = {count}\n")
            print(f"tensorport, instances: {label}", flush=True)
            server = Tensorport(Path(self.args.binary), root, work / f"{root.name}.log", cpu=None)
            try:
                share = INSTANCE_CONCURRENCY // len(models)
                cells = [Cell(f"instances {label}", model, "kserve-grpc", "off", INSTANCE_BATCH, share)
                         for model, _ in models]
                runs = [threading.Thread(target=self.loadgen_run, args=(cell, server.grpc), kwargs={"cpu": None})
                        for cell in cells]
                for run in runs:
                    run.start()
                for run in runs:
                    run.join()
            finally:
                server.stop()
        # The machine's own ceiling: the floor on one CPU, then one floor per CPU at once.
        print("floor, instances model: one CPU, then both", flush=True)
        files = work / "instances-count1"
        extra = ["--model-file", str(files / COMPUTE.name / "1" / "model.onnx"), "--ort-library", str(ort_library())]
        self.loadgen_run(Cell("instances floor, one CPU", COMPUTE, "floor", "-", INSTANCE_BATCH, 1), "-", extra,
                         cpu=SERVER_CPU)
        both = [threading.Thread(target=self.loadgen_run, args=(Cell(f"instances floor, CPU {cpu}", COMPUTE, "floor",
                                                                     "-", INSTANCE_BATCH, 1), "-", extra),
                                 kwargs={"cpu": cpu}) for cpu in (SERVER_CPU, CLIENT_CPU)]
        for run in both:
            run.start()
        for run in both:
            run.join()

    def find(self, server: str, model: Model, protocol: str, batching: str, batch: int, concurrency: int,
             shm: bool = False) -> Cell | None:
        for cell in self.cells:
            if (cell.server, cell.key()) == (server, (model.name, protocol, batching, batch, concurrency, shm)):
                return cell if "failed" not in cell.result else None
        return None


def describe(cell: Cell) -> str:
    r = cell.result
    name = f"{cell.server} {cell.model.name} {cell.protocol}{' shm' if cell.shm else ''} batching {cell.batching} " \
           f"b{cell.batch} c{cell.concurrency}"
    if "failed" in r:
        return f"{name}: failed: {r['failed']}"
    return f"{name}: {r['inferences_per_s']:.0f} infer/s p50 {r['p50_us']:.0f} us p99 {r['p99_us']:.0f} us " \
           f"errors {r.get('error_count', 0)}"


def matrix(quick: bool):
    """(tensorport cells without batching, with batching, MLServer cells without, with)."""
    def cells(server, model, protocols, batching, batches, concurrencies, shm=False):
        return [Cell(server, model, p, batching, b, c, shm) for p in protocols for b in batches for c in concurrencies]

    if quick:
        tp_off = (cells("tensorport", RANKER, ["kserve-grpc", "kserve-http"], "off", [1], [1, 8])
                  + cells("tensorport", LARGE, ["kserve-grpc"], "off", [1], [1])
                  + cells("tensorport", LARGE, ["kserve-grpc"], "off", [1], [1], shm=True))
        tp_on = cells("tensorport", WIDE, ["kserve-grpc"], "on", [1], [64])
        ml_off = cells("MLServer", RANKER, ["kserve-grpc", "kserve-http"], "off", [1], [8])
        return tp_off, tp_on, ml_off, []
    all_protocols = ["kserve-grpc", "kserve-http", "kserve-http-binary", "tfs-grpc", "tfs-rest"]
    tp_off = (cells("tensorport", RANKER, all_protocols, "off", [1, 32], [1, 8, 64])
              + cells("tensorport", RANKER, ["kserve-grpc", "kserve-http"], "off", [1, 32], [1, 8], shm=True)
              + cells("tensorport", WIDE, ["kserve-grpc"], "off", [1], [1, 8, 64])
              + cells("tensorport", LARGE, ["kserve-grpc", "kserve-http", "kserve-http-binary", "tfs-grpc"], "off", [1], [1, 8])
              + cells("tensorport", LARGE, ["kserve-grpc", "kserve-http"], "off", [1], [1, 8], shm=True))
    tp_on = (cells("tensorport", RANKER, ["kserve-grpc", "kserve-http"], "on", [1], [1, 8, 64])
             + cells("tensorport", WIDE, ["kserve-grpc"], "on", [1], [1, 8, 64]))
    ml_off = (cells("MLServer", RANKER, ["kserve-grpc", "kserve-http"], "off", [1, 32], [1, 8, 64])
              + cells("MLServer", WIDE, ["kserve-grpc"], "off", [1], [1, 8, 64])
              + cells("MLServer", LARGE, ["kserve-grpc", "kserve-http"], "off", [1], [1, 8]))
    ml_on = (cells("MLServer", RANKER, ["kserve-grpc", "kserve-http"], "on", [1], [1, 8, 64])
             + cells("MLServer", WIDE, ["kserve-grpc"], "on", [1], [1, 8, 64]))
    return tp_off, tp_on, ml_off, ml_on


def models_of(cells: list[Cell]) -> list[Model]:
    seen: dict[str, Model] = {}
    for cell in cells:
        seen.setdefault(cell.model.name, cell.model)
    return list(seen.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small subset, about two minutes")
    ap.add_argument("--duration", type=float, help="measured seconds per cell (default 4, quick 2)")
    ap.add_argument("--warmup", type=float, help="warm-up seconds per cell (default 1, quick 0.5)")
    release = cargo_target_dir() / "release"
    ap.add_argument("--binary", default=str(release / "tensorport"))
    ap.add_argument("--loadgen", default=str(release / "tensorport-loadgen"))
    ap.add_argument("--mlserver", default=str(REPO / ".cache" / "mlserver" / "bin" / "mlserver"))
    ap.add_argument("--perf-analyzer", default=os.environ.get(
        "PERF_ANALYZER", str(REPO / ".cache" / "perf_analyzer" / "perf_analyzer")))
    ap.add_argument("--instances-only", action="store_true", help="only the instances comparison, printed")
    ap.add_argument("--no-mlserver", action="store_true")
    ap.add_argument("--no-perf-analyzer", action="store_true")
    ap.add_argument("--doc", default=str(REPO / "docs" / "BENCHMARKS.md"), help="where the tables go ('-': stdout only)")
    args = ap.parse_args()
    args.duration = args.duration or (2.0 if args.quick else 4.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 1.0)
    started = time.time()

    runner = Runner(args)
    work = Path(tempfile.mkdtemp(prefix="tensorport-bench-"))
    if args.instances_only:
        try:
            runner.instances(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print("\n".join(instances_table(runner)))
        return 0
    tp_off, tp_on, ml_off, ml_on = matrix(args.quick)
    if args.no_mlserver:
        ml_off, ml_on = [], []
    try:
        plain, batched = work / "models", work / "models-batching"
        write_models(plain, models_of(tp_off + tp_on + ml_off + ml_on), batching=False)
        write_models(batched, models_of(tp_on), batching=True)

        print("tensorport, batching off", flush=True)
        server = Tensorport(Path(args.binary), plain, work / "tensorport.log")
        try:
            runner.against_tensorport(server, tp_off)
            if not args.no_perf_analyzer:
                cross = [("kserve-grpc", 1), ("kserve-grpc", 8), ("kserve-http", 1), ("tfs-grpc", 1)]
                for protocol, concurrency in cross[: 2 if args.quick else None]:
                    runner.perf_analyzer(server, RANKER, protocol, concurrency, work)
        finally:
            server.stop()

        print("tensorport, batching on", flush=True)
        server = Tensorport(Path(args.binary), batched, work / "tensorport-batching.log")
        try:
            runner.against_tensorport(server, tp_on)
        finally:
            server.stop()

        if not args.quick and os.access(PM_QOS_DEVICE, os.W_OK):
            print("tensorport, idle CPUs polling (--cpu-wakeup-latency-us 0)", flush=True)
            server = Tensorport(Path(args.binary), plain, work / "tensorport-polling.log",
                                extra=["--cpu-wakeup-latency-us", "0"])
            try:
                runner.against_tensorport(server, [Cell(POLLING, RANKER, protocol, "off", 1, 1)
                                                   for protocol in POLLING_PROTOCOLS])
            finally:
                server.stop()

        for batching, cells in (("off", ml_off), ("on", ml_on)):
            if not cells:
                continue
            print(f"MLServer, adaptive batching {batching}", flush=True)
            peer = MLServer(Path(args.mlserver), work, models_of(cells), batching == "on", plain)
            try:
                for cell in cells:
                    runner.loadgen_run(cell, peer.grpc if "grpc" in cell.protocol else peer.http)
            finally:
                peer.stop()

        print("floor", flush=True)
        floors = {(cell.model.name, cell.batch): cell.model for cell in tp_off + tp_on}
        for cell in tp_on:
            if cell.executed_batch and cell.concurrency == 64:
                floors[(cell.model.name, max(1, round(cell.executed_batch)))] = cell.model
        for (_, batch), model in sorted(floors.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            runner.floor(model, batch, plain)

        if not args.quick:
            runner.instances(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    elapsed = time.time() - started
    text = render(runner, args, elapsed)
    print(text)
    if args.doc != "-":
        write_doc(Path(args.doc), text)
        print(f"wrote {args.doc}")
    return 0


# ---------------------------------------------------------------- rendering


def fmt(value: float | None, digits: int = 0) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}x" if a and b else ""


def render(runner: Runner, args, elapsed: float) -> str:
    out = [BEGIN, "", "## Side by side: tensorport, MLServer and the floor", ""]
    out += [(f"Generated by `{'make bench-quick' if args.quick else 'make bench'}` "
            f"(`scripts/bench.py{' --quick' if args.quick else ''}`) in {elapsed / 60:.1f} min on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."), ""]
    out += [f"- Machine: {machine()}", f"- Versions: {versions(args)}",
            (f"- Pinning: servers (tensorport, MLServer) on CPU {SERVER_CPU}, the load generator on CPU "
            f"{CLIENT_CPU} (`taskset`); the floor runs on CPU {SERVER_CPU}. ONNX Runtime everywhere with one "
            "intra-op and one inter-op thread."),
            (f"- Each cell: `tensorport-loadgen`, closed loop, {args.warmup} s warm-up then {args.duration} s "
            "measured; one HTTP/2 connection for gRPC, one HTTP/1.1 connection per request in flight. "
            "infer/s counts rows (requests/s x batch). Latencies in microseconds, client-observed."),
            ("- Batching on: tensorport `[batching] max_batch_size = 64, max_queue_delay_us = 0` in the model's "
            "config.toml; MLServer adaptive batching `max_batch_size 64, max_batch_time 1 ms`. "
            "\"exec batch\" is the mean rows per model run on tensorport (its statistics)."),
            ("- MLServer: the runtime in `bench/mlserver/runtime.py` (onnxruntime on the same .onnx file), "
            "`parallel_workers 0` (inference in the server process), access log off."), ""]
    out += targets(runner)
    for model in (RANKER, WIDE, LARGE):
        rows = [c for c in runner.cells if c.model.name == model.name and c.server in ("tensorport", "MLServer")]
        if not rows:
            continue
        out += [f"### {model.name}: {model.about}", ""]
        out += [("| server | protocol | batching | batch | conc | infer/s | p50 | p90 | p99 | max | errors | exec batch "
                "| tensorport / this (infer/s) | this / tensorport (p99) |"),
                "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for cell in rows:
            out.append(row(runner, cell))
        out.append("")
    floors = [c for c in runner.cells if c.server == "floor"]
    if floors:
        out += ["### The floor: ONNX Runtime in-process, no server", "",
                ("| model | batch | infer/s | p50 | p99 | tensorport kserve-grpc c1 p50 - floor p50 "
                "| tensorport kserve-http c1 p50 - floor p50 |"),
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for cell in floors:
            r = cell.result
            if "failed" in r:
                out.append(f"| {cell.model.name} | {cell.batch} | failed: {r['failed']} | | | | |")
                continue
            over = []
            for protocol in ("kserve-grpc", "kserve-http"):
                ours = runner.find("tensorport", cell.model, protocol, "off", cell.batch, 1)
                over.append(fmt(ours.result["p50_us"] - r["p50_us"]) if ours else "")
            out.append(f"| {cell.model.name} | {cell.batch} | {fmt(r['inferences_per_s'])} | {fmt(r['p50_us'])} "
                       f"| {fmt(r['p99_us'])} | {over[0]} | {over[1]} |")
        out.append("")
    polling = [c for c in runner.cells if c.server == POLLING]
    if polling:
        out += ["### Concurrency 1 with idle CPUs polling", "",
                ("The example ranker at concurrency 1 from a server started with `--cpu-wakeup-latency-us 0`, "
                "which holds the kernel's CPU wake-up latency cap (`/dev/cpu_dma_latency`) at zero while it runs: "
                "idle CPUs poll instead of sleeping, machine-wide (the load generator's CPU too), so no round "
                "trip waits for an idle CPU to wake. The ratio columns compare with the default server's cells "
                "above."), "",
                ("| server | protocol | batching | batch | conc | infer/s | p50 | p90 | p99 | max | errors | exec batch "
                "| tensorport / this (infer/s) | this / tensorport (p99) |"),
                "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        out += [row(runner, cell) for cell in polling]
        out.append("")
    out += instances_table(runner)
    pa = [c for c in runner.cells if c.server == "perf_analyzer"]
    if pa:
        out += ["### Cross-check: perf_analyzer against tensorport", "",
                ("Triton's `perf_analyzer` on the same server and cells as the generator (batch 1, batching off, "
                "client on CPU 1), its own measurement windows (`--measurement-interval` = the cell duration)."), "",
                ("| model | protocol | conc | perf_analyzer infer/s | loadgen infer/s | perf_analyzer p50 | loadgen p50 "
                "| perf_analyzer p99 | loadgen p99 |"),
                "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for cell in pa:
            ours = runner.find("tensorport", cell.model, cell.protocol, "off", 1, cell.concurrency)
            r = cell.result
            if "failed" in r:
                out.append(f"| {cell.model.name} | {cell.protocol} | {cell.concurrency} | failed: {r['failed']} "
                           "| | | | | |")
                continue
            o = ours.result if ours else {}
            out.append(f"| {cell.model.name} | {cell.protocol} | {cell.concurrency} | {fmt(r['inferences_per_s'])} "
                       f"| {fmt(o.get('inferences_per_s'))} | {fmt(r['p50_us'])} | {fmt(o.get('p50_us'))} "
                       f"| {fmt(r['p99_us'])} | {fmt(o.get('p99_us'))} |")
        out.append("")
    out.append(END)
    return "\n".join(out)


def row(runner: Runner, cell: Cell) -> str:
    r = cell.result
    protocol = cell.protocol + (" + shm" if cell.shm else "")
    head = f"| {cell.server} | {protocol} | {cell.batching} | {cell.batch} | {cell.concurrency}"
    if "failed" in r:
        return f"{head} | failed: {r['failed']} | | | | | | | | |"
    errors = r.get("error_count", 0)
    if errors:
        errors = f"{errors} ({', '.join(f'{k} {v}' for k, v in r['errors'].items())})"
    exec_batch = fmt(cell.executed_batch, 1) if cell.server == "tensorport" else ""
    vs_throughput = vs_p99 = ""
    if cell.server != "tensorport":
        ours = runner.find("tensorport", cell.model, cell.protocol, cell.batching, cell.batch, cell.concurrency, cell.shm)
        if ours:
            vs_throughput = ratio(ours.result["inferences_per_s"], r["inferences_per_s"])
            vs_p99 = ratio(r["p99_us"], ours.result["p99_us"])
    return (f"{head} | {fmt(r['inferences_per_s'])} | {fmt(r['p50_us'])} | {fmt(r['p90_us'])} | {fmt(r['p99_us'])} "
            f"| {fmt(r['max_us'])} | {errors} | {exec_batch} | {vs_throughput} | {vs_p99} |")


def instances_table(runner: Runner) -> list[str]:
    """One row per instances setup: throughput summed over its models, the worse latencies."""
    totals = {}
    for label, _ in INSTANCE_SETUPS:
        cells = [c for c in runner.cells if c.server == f"instances {label}"]
        if cells and all("failed" not in c.result for c in cells):
            totals[label] = (sum(c.result["inferences_per_s"] for c in cells),
                             max(c.result["p50_us"] for c in cells), max(c.result["p99_us"] for c in cells))
        elif cells:
            totals[label] = next(c.result["failed"] for c in cells if "failed" in c.result)
    if not totals:
        return []
    out = [f"### Instances: {COMPUTE.name}, batch {INSTANCE_BATCH}, concurrency {INSTANCE_CONCURRENCY}, batching off", "",
           ("`[instances] count` in the model's config.toml, against the same file loaded as two models with the "
            "load split between them. KServe gRPC; server and load generator unpinned (every core)."), "",
           "| setup | infer/s | p50 | p99 | / count = 1 (infer/s) |", "| --- | ---: | ---: | ---: | ---: |"]
    one = totals.get("count = 1")
    for label, total in totals.items():
        if isinstance(total, str):
            out.append(f"| {label} | failed: {total} | | | |")
            continue
        base = one[0] if isinstance(one, tuple) else None
        out.append(f"| {label} | {fmt(total[0])} | {fmt(total[1])} | {fmt(total[2])} | {ratio(total[0], base)} |")
    two, pair = totals.get("count = 2"), totals.get("two models")
    if isinstance(two, tuple) and isinstance(one, tuple) and isinstance(pair, tuple):
        met = two[0] >= 1.5 * one[0] and two[0] >= 0.9 * pair[0]
        out += ["", (f"Target (count = 2 >= 1.5x count = 1 and >= 90% of two models): {two[0] / one[0]:.2f}x and "
                     f"{two[0] / pair[0]:.0%}: {'met' if met else 'not met'}.")]
    floors = {c.server: c.result.get("inferences_per_s") for c in runner.cells if c.server.startswith("instances floor")}
    alone = floors.get("instances floor, one CPU")
    both = [floors.get(f"instances floor, CPU {cpu}") for cpu in (SERVER_CPU, CLIENT_CPU)]
    if alone and all(both):
        out += ["", (f"The machine's ceiling, the in-process floor with no server or sockets: {fmt(alone)} infer/s on "
                     f"one CPU, {fmt(sum(both))} with one floor process per CPU at once "
                     f"({sum(both) / alone:.2f}x).")]
    out.append("")
    return out


def targets(runner: Runner) -> list[str]:
    out = ["### Against the targets", "", "| target | measured | met |", "| --- | --- | --- |"]

    tp = runner.find("tensorport", RANKER, "kserve-grpc", "off", 1, 8)
    ml = runner.find("MLServer", RANKER, "kserve-grpc", "off", 1, 8)
    if tp and ml:
        t, p = tp.result["inferences_per_s"] / ml.result["inferences_per_s"], ml.result["p99_us"] / tp.result["p99_us"]
        out.append(f"| ranker, concurrency 8, batch 1, KServe gRPC: >= 5x MLServer's throughput, <= 1/5 of its p99 "
                   f"| {t:.1f}x the throughput, p99 1/{p:.1f} | {'yes' if t >= 5 and p >= 5 else 'no'} |")
    tp = runner.find("tensorport", RANKER, "kserve-http", "off", 1, 8)
    ml = runner.find("MLServer", RANKER, "kserve-http", "off", 1, 8)
    if tp and ml:
        t = tp.result["inferences_per_s"] / ml.result["inferences_per_s"]
        out.append(f"| ranker, concurrency 8, batch 1, KServe JSON: >= 20x MLServer's throughput "
                   f"| {t:.1f}x ({fmt(tp.result['inferences_per_s'])} vs {fmt(ml.result['inferences_per_s'])} "
                   f"infer/s) | {'yes' if t >= 20 else 'no'} |")
    floor = runner.find("floor", RANKER, "floor", "-", 1, 1)
    for protocol, limit in (("kserve-grpc", 60), ("kserve-http", 40), ("kserve-http-binary", 150)):
        cell = runner.find("tensorport", RANKER, protocol, "off", 1, 1)
        if cell and floor:
            over = cell.result["p50_us"] - floor.result["p50_us"]
            out.append(f"| ranker, concurrency 1, batch 1, {protocol}: p50 - floor p50 < {limit} us "
                       f"| {over:.0f} us ({cell.result['p50_us']:.0f} - {floor.result['p50_us']:.0f}) "
                       f"| {'yes' if over < limit else 'no'} |")
    for protocol, limit in (("kserve-grpc", 60), ("kserve-http", 40)):
        cell = runner.find(POLLING, RANKER, protocol, "off", 1, 1)
        if cell and floor:
            over = cell.result["p50_us"] - floor.result["p50_us"]
            out.append(f"| the same, {protocol}, idle CPUs polling (`--cpu-wakeup-latency-us 0`): p50 - floor p50 "
                       f"< {limit} us | {over:.0f} us ({cell.result['p50_us']:.0f} - {floor.result['p50_us']:.0f}) "
                       f"| {'yes' if over < limit else 'no'} |")
    for model in (WIDE, RANKER):
        cell = runner.find("tensorport", model, "kserve-grpc", "on", 1, 64)
        if cell and cell.executed_batch:
            batch = max(1, round(cell.executed_batch))
            fl = runner.find("floor", model, "floor", "-", batch, 1)
            if fl:
                share = cell.result["inferences_per_s"] / fl.result["inferences_per_s"]
                out.append(f"| {model.name}, batching on, concurrency 64: >= 80% of the floor's throughput at the "
                           f"executed batch ({batch}) | {share:.0%} ({fmt(cell.result['inferences_per_s'])} vs "
                           f"{fmt(fl.result['inferences_per_s'])} infer/s) | {'yes' if share >= 0.8 else 'no'} |")
    json = runner.find("tensorport", LARGE, "kserve-http", "off", 1, 1)
    if json:
        rate = json.result["inferences_per_s"]
        out.append(f"| 1 MiB input (ranker_large) over KServe JSON, concurrency 1: >= 340 req/s (10x the 34 "
                   f"measured before the number scanner) | {rate:.1f} req/s ({rate / 34:.1f}x) "
                   f"| {'yes' if rate >= 340 else 'no'} |")
    inline = runner.find("tensorport", LARGE, "kserve-grpc", "off", 1, 1)
    shm = runner.find("tensorport", LARGE, "kserve-grpc", "off", 1, 1, shm=True)
    if inline and shm:
        speed = inline.result["p50_us"] / shm.result["p50_us"]
        out.append(f"| 1 MiB input (ranker_large), concurrency 1: shared memory >= 3x faster than inline gRPC "
                   f"| {speed:.1f}x (p50 {inline.result['p50_us']:.0f} vs {shm.result['p50_us']:.0f} us) "
                   f"| {'yes' if speed >= 3 else 'no'} |")
    out.append("")
    return out


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal"))
        memory = f"{mem / 2**20:.0f} GiB"
    except (OSError, StopIteration):
        memory = "?"
    return (f"{os.cpu_count()} CPUs ({model or platform.machine()}), {memory}, Linux {platform.release()}; "
            "shared with other work, so differences under ~10% are noise")


def versions(args) -> str:
    def run(command: list[str]) -> str:
        try:
            return subprocess.run(command, check=False, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return "?"
    commit = run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    rustc = run(["rustc", "--version"]).split(" (")[0]
    ort = re.search(r"libonnxruntime\.so\.?([\d.]*)", str(ort_library()))
    mlserver = run([str(Path(args.mlserver).with_name("pip")), "show", "mlserver"]) if not args.no_mlserver else ""
    mlserver_version = re.search(r"Version: (\S+)", mlserver)
    return (f"tensorport {commit} (release build, {rustc}), ONNX Runtime {ort.group(1) if ort else '?'} "
            f"(PyPI wheel), MLServer {mlserver_version.group(1) if mlserver_version else '-'}, "
            f"Python {platform.python_version()}")


def write_doc(path: Path, text: str) -> None:
    doc = path.read_text()
    if BEGIN in doc and END in doc:
        doc = doc[: doc.index(BEGIN)] + text + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(doc)


if __name__ == "__main__":
    sys.exit(main())
