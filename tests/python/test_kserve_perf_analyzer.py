"""Triton's perf_analyzer, speaking the KServe v2 / Triton protocol (its default service kind),
runs clean against the server: over gRPC and HTTP, with and without system shared memory, at
batch 1 and 32, on `ranker` (its config gives the dims, so no --shape).

Each run's throughput and p50 / p99 latency are recorded and printed as a table at the end of
the module (`pytest -s` shows it). Runs are short: one concurrency level, count windows of 50
requests, any stable-enough window accepted; this is a functional check, not a benchmark.

perf_analyzer names its shared-memory regions after the tensors (`features_0_0`, `score`). If it
dies without cleaning up, the objects it left in /dev/shm and the regions it left registered
on the server are removed after the run, so that the next run can register them again."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from kserve_util import shm_objects
from tfs import REPO

PERF_ANALYZER = Path(os.environ.get("PERF_ANALYZER", REPO / ".cache" / "perf_analyzer" / "perf_analyzer"))
RUN_TIMEOUT_S = 60
THROUGHPUT_RE = re.compile(r"Throughput:\s*([\d.]+)\s*infer/sec")
P50_RE = re.compile(r"p50 latency:\s*(\d+)\s*usec")
P99_RE = re.compile(r"p99 latency:\s*(\d+)\s*usec")
TENSOR_PREFIXES = ("features", "score")

RESULTS: dict[str, dict] = {}

CONFIGS = [
    pytest.param(protocol, shared, batch, id=f"{protocol}-{'shm' if shared else 'noshm'}-b{batch}")
    for protocol in ("grpc", "http")
    for shared in (False, True)
    for batch in (1, 32)
]


@pytest.fixture(scope="module", autouse=True)
def print_table():
    yield
    if not RESULTS:
        return
    lines = ["", "perf_analyzer on ranker (concurrency 1):",
             f"{'run':<18} {'rc':>4} {'infer/sec':>11} {'p50 usec':>9} {'p99 usec':>9}"]
    for run, r in RESULTS.items():
        fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
        lines.append(f"{run:<18} {r['rc']:>4} {fmt(r['throughput'], '>11.1f')} "
                     f"{fmt(r['p50'], '>9d')} {fmt(r['p99'], '>9d')}")
    print("\n".join(lines))


def _registered(client) -> set[str]:
    return {r["name"] for r in client.get_system_shared_memory_status()}


def _first(regex, text, cast):
    m = regex.search(text)
    return cast(m.group(1)) if m else None


@pytest.mark.parametrize("protocol,shared,batch", CONFIGS)
def test_perf_analyzer_kserve(server, triton_http, protocol, shared, batch):
    if not PERF_ANALYZER.exists():
        pytest.fail(f"perf_analyzer is not installed at {PERF_ANALYZER}: run `make perf-analyzer`")
    run = f"{protocol}-{'shm' if shared else 'noshm'}-b{batch}"
    url = server.grpc_target if protocol == "grpc" else server.rest_url.split("://", 1)[-1]
    command = [
        str(PERF_ANALYZER),
        "-m", "ranker",
        "-i", protocol,
        "-u", url,
        "-b", str(batch),
        "--concurrency-range", "1:1",
        "--measurement-mode", "count_windows",
        "--measurement-request-count", "50",
        "--stability-percentage", "1000",
        "--max-trials", "10",
    ]
    if shared:
        command += ["--shared-memory", "system", "--output-shared-memory-size", "4096"]

    objects_before = set(shm_objects(""))
    regions_before = _registered(triton_http)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    finally:
        # Whatever perf_analyzer left behind (it cleans up itself when it exits normally).
        for name in _registered(triton_http) - regions_before:
            triton_http.unregister_system_shared_memory(name)
        for name in set(shm_objects("")) - objects_before:
            if name.startswith(TENSOR_PREFIXES):
                try:
                    os.unlink(f"/dev/shm/{name}")
                except FileNotFoundError:
                    pass
    output = result.stdout + result.stderr
    RESULTS[run] = {
        "rc": result.returncode,
        "throughput": _first(THROUGHPUT_RE, output, float),
        "p50": _first(P50_RE, output, int),
        "p99": _first(P99_RE, output, int),
    }
    tail = "\n".join(output.splitlines()[-25:])
    assert result.returncode == 0, f"perf_analyzer exited with {result.returncode}:\n{tail}"
    r = RESULTS[run]
    assert r["throughput"] is not None and r["throughput"] > 0, tail
    assert r["p50"] is not None and r["p99"] is not None and r["p99"] >= r["p50"] > 0, tail
    assert "error" not in result.stderr.lower(), tail
    assert f"Batch size: {batch}" in output, tail
